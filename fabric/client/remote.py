"""`RemoteCluster`: the Cluster interface served by coordinator instances over Arrow Flight.

URL: `fabric://host:port[,host:port...][?token=T&tls=true&ca=/ca.pem&timeout_ms=30000]` (fabric.server.connection:
calls fail over to the active instance until timeout_ms has passed). Produce, fetch, offset commits and fetches and
topic metadata go over the fabric protocol where the instance offers it (fabric.client.protocol_calls).
An idempotent producer's retried append is written once (the service's log recognises its producer id and
sequence); without idempotence it may be written twice (at least once, as in Kafka). Publish is exactly-once.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.flight as flight

from fabric.client.cluster import Cluster
from fabric.client.protocol_calls import ProtocolCalls, committed_of, fetched_of, offset_rows, produce_payload
from fabric.common.protocol import messages
from fabric.common.types import (
    CommittedOffset,
    Fetched,
    GroupDescription,
    JoinRequest,
    JoinResult,
    PartitionState,
    ProducerIdentity,
    SyncResult,
    TopicInfo,
    TopicPartition,
    TopicRecovery,
    TransactionalOffsets,
    TransactionRecord,
)
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.offsets_records import OFFSETS_PARTITIONS, OFFSETS_TOPIC, offsets_partition
from fabric.server import wire
from fabric.server.connection import Connection, action_call, fetch_call, parse_url, put_call, time_left
from fabric.storage.batch_encoding import Rows, decoded
from fabric.storage.cleaner import CleanReport


def group_route(group: str) -> str:
    """The route of the calls about `group`: its offsets partition (served by one instance)."""
    return f"{OFFSETS_TOPIC}-{offsets_partition(group, OFFSETS_PARTITIONS)}"


class RemoteCoordinator(Coordinator):
    """The Coordinator of a coordinator service: each method is one DoAction, but for the hot ones (topic,
    commit_offsets, committed), which go over the fabric protocol where the instance offers it."""

    def __init__(self, connection: Connection, protocol: ProtocolCalls | None = None) -> None:
        self.connection = connection
        self.protocol = protocol or ProtocolCalls(connection)

    def create_topic(self, name: str, partitions: int, config: dict[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        return self.connection.action("create_topic", name=name, partitions=partitions, config=dict(config),
                                      value_schema=value_schema)

    def delete_topic(self, name: str) -> None:
        self.connection.action("delete_topic", name=name)

    def topic(self, name: str) -> TopicInfo:
        answer = self.protocol.coordinator("topic", {"name": name})
        if answer is None:
            return self.connection.action("topic", name=name)
        return messages.decode_result(answer[0], TopicInfo)

    def list_topics(self) -> list[str]:
        return self.connection.action("list_topics")

    def alter_topic_config(self, name: str, config: dict[str, str | None]) -> TopicInfo:
        return self.connection.action("alter_topic_config", name=name, config=dict(config))

    def set_partitions(self, name: str, total: int) -> TopicInfo:
        return self.connection.action("set_partitions", name=name, total=total)

    def _of_group(self, group: str, name: str, /, **kwargs: Any) -> Any:
        """A call about `group`: to the instance serving its offsets partition, where instances share them out."""
        return self.connection.call(action_call(name, **kwargs), route=group_route(group))

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        rows = offset_rows(offsets)
        if rows is None or self.protocol.coordinator("commit_offsets", {
                "group": group, "offsets": rows, "metadata": metadata, "generation": generation,
                "member_id": member_id}, route=group_route(group)) is None:
            self._of_group(group, "commit_offsets", group=group, offsets=dict(offsets), metadata=metadata,
                           generation=generation, member_id=member_id)

    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        names = None if topics is None else list(topics)
        answer = self.protocol.coordinator("committed", {"group": group, "topics": names}, route=group_route(group))
        if answer is None:
            return self._of_group(group, "committed", group=group, topics=names)
        return committed_of(answer)

    def list_groups(self) -> list[str]:
        """The groups of every instance that serves offsets partitions (Kafka's ListGroups, sent to every
        broker), else of the active instance."""
        coordinators = self.connection.action("group_coordinators")
        if not coordinators:
            return self.connection.action("list_groups")
        return sorted({g for address in coordinators for g in self.connection.action_at(address, "list_groups")})

    def delete_group(self, group: str) -> None:
        self._of_group(group, "delete_group", group=group)

    def delete_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        gone = self._of_group(group, "delete_offsets", group=group, partitions=[tuple(tp) for tp in partitions])
        return [(topic, partition) for topic, partition in gone]

    def commit_transaction(self, txn: str, writers: Sequence[int] | None = None,
                           offsets: TransactionalOffsets | None = None) -> None:
        """Committed by the instance serving the offsets' group (where instances share the groups out), else by
        the active one."""
        call = action_call("commit_transaction", txn=txn, writers=None if writers is None else list(writers),
                           offsets=offsets)
        self.connection.call(call, route=None if offsets is None else group_route(offsets.group))

    def add_transaction_writer(self, txn: str, producer_id: int, producer_epoch: int,
                               partitions: Sequence[TopicPartition], timeout_ms: int = 60_000) -> TransactionRecord:
        return self.connection.action("add_transaction_writer", txn=txn, producer_id=producer_id,
                                      producer_epoch=producer_epoch, partitions=[tuple(p) for p in partitions],
                                      timeout_ms=timeout_ms)

    def transaction_record(self, transactional_id: str) -> TransactionRecord:
        return self.connection.action("transaction_record", transactional_id=transactional_id)

    def list_transactions(self) -> list[str]:
        return self.connection.action("list_transactions")

    def abort_transaction_writers(self, transactional_id: str) -> TransactionRecord:
        return self.connection.action("abort_transaction_writers", transactional_id=transactional_id)

    def transaction_committed(self, txn: str) -> bool:
        return self.connection.action("transaction_committed", txn=txn)

    def join_group(self, request: JoinRequest) -> JoinResult:
        return self._of_group(request.group, "join_group", request=request)

    def sync_group(self, group: str, member_id: str, generation: int) -> SyncResult:
        return self._of_group(group, "sync_group", group=group, member_id=member_id, generation=generation)

    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        self._of_group(group, "heartbeat", group=group, member_id=member_id, generation=generation)

    def leave_group(self, group: str, member_id: str) -> None:
        self._of_group(group, "leave_group", group=group, member_id=member_id)

    def describe_group(self, group: str) -> GroupDescription:
        return self._of_group(group, "describe_group", group=group)

    def close(self) -> None:
        self.protocol.close()
        self.connection.close()


class RemoteCluster(Cluster):
    """A fabric served by coordinator instances (`fabric://host:port[,host:port]`)."""

    concurrent_appends = True  # each append waits on a server (and, acks=all, on its followers)

    def __init__(self, url: str) -> None:
        self.url = url
        self.options = parse_url(url)
        self.connection = Connection(self.options)
        self.protocol = ProtocolCalls(self.connection)
        self.coordinator = RemoteCoordinator(self.connection, self.protocol)

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        return self.coordinator.create_topic(name, partitions, dict(config), value_schema)

    def delete_topic(self, name: str) -> None:
        self.coordinator.delete_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        return self.connection.action("create_partitions", name=name, total=total)

    def recover_topics(self, names: Sequence[str] | None = None) -> list[TopicRecovery]:
        return self.connection.action("recover_topics", names=None if names is None else list(names))

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        """The service checks the offsets against its logs (Broker.commit_offsets) before storing them."""
        self.coordinator.commit_offsets(group, offsets, metadata, generation, member_id)

    def init_producer_id(self) -> ProducerIdentity:
        identity: ProducerIdentity = self.connection.action("init_producer_id")
        return identity

    def _put(self, descriptor: flight.FlightDescriptor, schema: pa.Schema,
             batches: Callable[[], Sequence[pa.RecordBatch]]) -> Any:
        """One DoPut of `batches()` (re-made on every retry); returns the server's JSON answer."""
        return self.connection.call(put_call(descriptor, schema, batches))

    def append(self, topic: str, partition: int, rows: Rows, codec: str = "none", acks: str = "all",
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> int:
        rows = decoded(rows)
        args = {"topic": topic, "partition": partition, "codec": codec, "producer_id": producer_id,
                "producer_epoch": producer_epoch, "base_sequence": base_sequence}
        answer = self.protocol.coordinator("produce", args, produce_payload(rows))
        if answer is None:
            return self._put(wire.put_descriptor("append", **args), rows.schema, lambda: [rows])
        return messages.decode_result(answer[0], int)

    def publish(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                codec: str = "none") -> bool:
        return self._publish("publish", txn, parts, codec=codec)

    def publish_frames(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.Buffer]]) -> bool:
        """Ships the sealed frames as they are; the service appends them without re-encoding."""
        return self._publish("publish_frames", txn, parts)

    def publish_transaction(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                            codec: str = "none", offsets: TransactionalOffsets | None = None,
                            timeout_ms: int = 60_000) -> dict[TopicPartition, list[int]] | None:
        bases: dict[TopicPartition, list[int]] | None = self._publish("publish_transaction", txn, parts, codec=codec,
                                                                 offsets=offsets)
        return bases

    def _publish(self, op: str, txn: str, parts: Mapping[TopicPartition, Sequence[Any]], **kwargs: Any) -> Any:
        descriptor = wire.put_descriptor(op, txn=txn, keys=[[t, p] for t, p in parts], **kwargs)
        payload = wire.PUBLISH_OPS[op][1]
        return self._put(descriptor, wire.ENVELOPE, lambda: list(wire.envelope(dict(parts), payload)))

    @property
    def hold_ms(self) -> int:
        """The longest a server may hold one of this client's calls (an acks=all append, a long-polling fetch):
        most of the call timeout (less inside call_deadline), so the server's answer, not the call's deadline,
        says what happened."""
        return int(time_left(self.connection.options.timeout_s) * 800)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None, max_wait_ms: int = 0, client_rack: str | None = None,
              isolation_level: str = "read_committed") -> list[Fetched]:
        args: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset, "max_bytes": max_bytes,
                                "end_offset": end_offset, "max_wait_ms": min(max_wait_ms, self.hold_ms)}
        answer = self.protocol.coordinator("fetch", args)
        if answer is None:
            return self.connection.call(fetch_call(wire.fetch_ticket(**args)))
        return fetched_of(answer)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        return self.connection.action("partition_state", topic=topic, partition=partition)

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        return self.connection.action("offset_for_time", topic=topic, partition=partition, timestamp_us=timestamp_us)

    def offset_after_records(self, topic: str, partition: int, offset: int, count: int,
                             end_offset: int | None = None, isolation_level: str = "read_committed") -> int:
        return self.connection.action("offset_after_records", topic=topic, partition=partition, offset=offset,
                                      count=count, end_offset=end_offset, isolation_level=isolation_level)

    def enforce_retention(self, topic: str) -> int:
        return self.connection.action("enforce_retention", topic=topic)

    def compact_topic(self, topic: str) -> list[CleanReport]:
        return self.connection.action("compact_topic", topic=topic)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        return self.connection.action("delete_records", topic=topic, partition=partition, before_offset=before_offset)

    def statuses(self) -> dict[str, wire.InstanceStatus | Exception]:
        """Every listed instance's status, or the error reaching it."""
        out: dict[str, wire.InstanceStatus | Exception] = {}
        for address in self.options.addresses:
            try:
                out[address] = self.connection.status_of(address)
            except Exception as exc:  # noqa: BLE001 (reported per instance, not raised)
                out[address] = exc
        return out
