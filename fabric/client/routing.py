"""`RoutingCluster`: a fabric:// cluster whose replicated partitions are served by data nodes.

Metadata (docs/replication.md, Clients) is the controller's `describe_cluster`: the nodes and every replicated
partition's replicas, leader and leader epoch, cached until a routing error shows it stale (or for
METADATA_MAX_AGE_S). Produce, fetch and the partition offsets of a replicated partition go to its leader node,
quoting the leader epoch the client knows (produce and fetch over the fabric protocol where the node offers it:
fabric.client.protocol_calls); everything else, and every single-directory topic, goes to the
coordinator as RemoteCluster sends it. A NotLeaderError or FencedLeaderEpochError (from a node, or from the
coordinator about a topic the cache does not know as replicated yet) refreshes the metadata and the call is
tried once more at once; a partition without a live leader is LeaderNotAvailableError. All three are
retriable: producers and consumers retry them within their delivery and poll timeouts.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Sequence, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from fabric.client import leader_transactions
from fabric.client.cluster import PendingAppend
from fabric.client.protocol_calls import Answer, fetched_of, produce_payload
from fabric.client.remote import RemoteCluster
from fabric.common.errors import ClientTimeoutError, FencedLeaderEpochError, LeaderNotAvailableError, NotLeaderError
from fabric.common.protocol import messages
from fabric.common.protocol.cluster import cluster_of
from fabric.common.protocol.connection import Payload
from fabric.common.types import (
    ClusterDescription,
    Fetched,
    LeaderAndIsr,
    NodeInfo,
    OpenTransaction,
    PartitionRegistration,
    PartitionState,
    ProducerBatch,
    ProducerState,
    TopicInfo,
    TopicPartition,
    TransactionalOffsets,
)
from fabric.server import wire
from fabric.server.connection import Call, action_call, fetch_call, put_call
from fabric.storage.batch_encoding import Rows, decoded
from fabric.storage.cleaner import CleanReport

log = logging.getLogger(__name__)
METADATA_MAX_AGE_S = 30.0
NODE_DID_NOT_ANSWER: tuple[type[BaseException], ...] = (*wire.NO_ANSWER, ConnectionError, ClientTimeoutError)
T = TypeVar("T")


class Target(NamedTuple):
    """Where a request about a replicated partition goes, and what it quotes there: the leader epoch and topic
    id the client knows (a node refuses a request whose view differs from its own), and whether it asks a
    follower (fetch from follower)."""

    node: NodeInfo
    leader_epoch: int
    topic_id: str
    from_follower: bool

    def quoted(self) -> dict[str, Any]:
        """The request fields that say which leadership and which topic the client means."""
        return {"leader_epoch": self.leader_epoch, "topic_id": self.topic_id,
                **({"from_follower": True} if self.from_follower else {})}


class RoutingCluster(RemoteCluster):
    """A fabric served by coordinator instances and data nodes (`fabric://coordinator:port[,...]`)."""

    pipelined_appends = True  # to leader nodes, over the fabric protocol

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._metadata: ClusterDescription | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()

    # -- metadata --------------------------------------------------------------------------------------------
    def describe_cluster(self, refresh: bool = False) -> ClusterDescription:
        """The controller's view of the nodes and replicated partitions (cached; `refresh` asks again)."""
        with self._lock:
            metadata = self._metadata
            if refresh or metadata is None or time.monotonic() - self._fetched_at > METADATA_MAX_AGE_S:
                answer = self.protocol.coordinator("describe_cluster", {})
                metadata = self.connection.action("describe_cluster") if answer is None else cluster_of(answer[0])
                self._metadata, self._fetched_at = metadata, time.monotonic()
        assert metadata is not None
        return metadata

    def _stale(self) -> None:
        with self._lock:
            self._metadata = None

    def nodes(self) -> list[NodeInfo]:
        return list(self.describe_cluster(refresh=True).nodes)

    def _leader(self, topic: str, partition: int, rack: str | None = None) -> Target | None:
        """The node to ask about a replicated partition: the leader, or for a reader in `rack` an in-sync replica
        alive in that rack (KIP-392's fetch from follower, which serves records up to its own high watermark);
        None for a single-directory topic."""
        metadata = self.describe_cluster()
        registration = metadata.partitions.get((topic, partition))
        if registration is None:
            return None
        state = registration.state
        node = next((n for n in metadata.nodes if n.id == state.leader), None)
        if node is None:
            self._stale()
            raise LeaderNotAvailableError(
                f"partition {topic}-{partition} is offline: none of its in-sync replicas (nodes "
                f"{list(state.isr)}) is alive; it comes back when one of them does (replicas "
                f"{list(registration.assignment.replicas)})")
        topic_id = metadata.topic_ids.get(topic, "")
        if rack is not None and node.rack != rack:
            nearby = [n for r in state.isr for n in metadata.nodes if n.id == r and n.alive and n.rack == rack]
            if nearby:
                return Target(nearby[0], state.leader_epoch, topic_id, True)
        return Target(node, state.leader_epoch, topic_id, False)

    def _routed(self, topic: str, partition: int, on_node: Callable[[Target], Call],
                on_coordinator: Callable[[], T], rack: str | None = None) -> T:
        """on_coordinator() for a single-directory partition; else on_node(target) at the node _leader picks. A
        routing error refreshes the metadata and tries once more."""
        try:
            return self._route_once(topic, partition, on_node, on_coordinator, rack)
        except (NotLeaderError, FencedLeaderEpochError) as exc:
            log.info("%s-%d: %s; refreshing the metadata", topic, partition, exc)
            return self._route_once(topic, partition, on_node, on_coordinator, rack)

    def _route_once(self, topic: str, partition: int, on_node: Callable[[Target], Call],
                    on_coordinator: Callable[[], T], rack: str | None) -> T:
        target = self._leader(topic, partition, rack)
        try:
            if target is None:
                return on_coordinator()
            return self._at_node(target.node, topic, partition, on_node(target))
        except (NotLeaderError, FencedLeaderEpochError):
            self._stale()
            raise

    def _at_node(self, node: NodeInfo, topic: str, partition: int, call: Call) -> Any:
        with self._node_errors(node, topic, partition):
            return call(self.connection.client(node.address), self.connection.call_options)

    @contextlib.contextmanager
    def _node_errors(self, node: NodeInfo, topic: str, partition: int) -> Iterator[None]:
        """A node that does not answer as LeaderNotAvailableError (the metadata is refreshed next time); a Flight
        error as the fabric error it carries."""
        try:
            yield
        except NODE_DID_NOT_ANSWER as exc:
            self._stale()
            reason = wire.error_details(exc).get('message') if isinstance(exc, flight.FlightError) else None
            raise LeaderNotAvailableError(f"node {node.id} at {node.address}, the leader of {topic}-{partition}, "
                                          f"did not answer ({reason or exc}); "
                                          "retry once the controller has moved the partition or the node is back"
                                          ) from None
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc) from None

    def _node_call(self, node: NodeInfo, kind: str, args: dict[str, Any], payload: Callable[[], Payload],
                   decode: Callable[[Answer], T], over_flight: Callable[[], Call]) -> Call:
        """A call of `node`: request `kind` over the fabric protocol where the node offers it (its answer made a
        result by `decode`), else the Flight call `over_flight()` makes (made only then: its descriptor is JSON)."""
        def run(client: flight.FlightClient, options: flight.FlightCallOptions) -> Any:
            answer = self.protocol.node(node.address, kind, args, payload())
            return over_flight()(client, options) if answer is None else decode(answer)
        return run

    # -- topics ----------------------------------------------------------------------------------------------
    def create_replicated_topic(self, name: str, partitions: int, replication_factor: int,
                                config: Mapping[str, str], value_schema: pa.Schema | None) -> TopicInfo:
        info = self.connection.action("create_topic", name=name, partitions=partitions, config=dict(config),
                                      value_schema=value_schema, replication_factor=replication_factor)
        self._stale()
        return info

    def elect_leaders(self, election: str, partitions: Sequence[TopicPartition] = ()) -> dict[TopicPartition,
                                                                                              LeaderAndIsr]:
        changed: dict[TopicPartition, LeaderAndIsr] = self.connection.action("elect_leaders", election=election,
                                                                              partitions=tuple(partitions))
        self._stale()
        return changed

    def reassign_partition(self, topic: str, partition: int, replicas: Sequence[int]) -> PartitionRegistration:
        started: PartitionRegistration = self.connection.action("reassign_partition", topic=topic,
                                                                 partition=partition, replicas=tuple(replicas))
        self._stale()
        return started

    def describe_partition(self, topic: str, partition: int) -> PartitionState:
        """partition_state(), or for a partition whose leader is offline or does not answer, what the controller
        says of it with unknown (-1) offsets, segments and bytes."""
        try:
            return self.partition_state(topic, partition)
        except LeaderNotAvailableError:
            registration = self.describe_cluster().partitions.get((topic, partition))
            if registration is None:
                raise
            state = registration.state
            return PartitionState(topic, partition, -1, -1, -1, -1, state.leader, registration.assignment.replicas,
                                  state.isr, state.leader_epoch)

    # -- data ------------------------------------------------------------------------------------------------
    def append(self, topic: str, partition: int, rows: Rows, codec: str = "none", acks: str = "all",
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> int:
        """At the leader node, which answers (acks=all) once the in-sync replicas have the rows, within hold_ms."""
        rows = decoded(rows)
        def at_node(target: Target) -> Call:
            return self._produce_call(target, rows, self._produce_args(target, topic, partition, codec, acks,
                                                                       producer_id, producer_epoch, base_sequence))
        # tried once: a NotLeaderError may come after the leader appended the rows (it lost the leadership while
        # acks=all waited), so only the producer, within its `retries`, may send them again
        return self._route_once(topic, partition, at_node, lambda: super(RoutingCluster, self).append(
            topic, partition, rows, codec, acks, producer_id, producer_epoch, base_sequence), None)

    def start_append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none",
                     acks: str = "all", producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1
                     ) -> PendingAppend:
        """Sent now to the leader node over the fabric protocol: one connection per node, whose requests of one
        partition the node appends in the order they came (docs/protocol.md); the answer is an `append`'s. Made
        when waited on where the protocol does not serve it (a single-directory topic, a node without it)."""
        later = super().start_append(topic, partition, rows, codec, acks, producer_id, producer_epoch, base_sequence)
        target = self._leader(topic, partition)
        if target is None:
            return later
        args = self._produce_args(target, topic, partition, codec, acks, producer_id, producer_epoch, base_sequence)
        with self._node_errors(target.node, topic, partition):
            sent = self.protocol.node_send(target.node.address, "produce", args, produce_payload(rows))
        if sent is None:
            return later

        def answer() -> int:
            try:
                with self._node_errors(target.node, topic, partition):
                    return messages.decode_result(sent.wait()[0], int)
            except (NotLeaderError, FencedLeaderEpochError):
                self._stale()
                raise
        return PendingAppend(answer, sent.cancel)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None, max_wait_ms: int = 0, client_rack: str | None = None,
              isolation_level: str = "read_committed") -> list[Fetched]:
        """At the leader, or (a `client_rack` given) at an in-sync replica in that rack."""
        def at_node(target: Target) -> Call:
            args = {"topic": topic, "partition": partition, "offset": offset, "max_bytes": max_bytes,
                    "end_offset": end_offset, **target.quoted(), "max_wait_ms": min(max_wait_ms, self.hold_ms),
                    "isolation_level": isolation_level}
            return self._node_call(target.node, "fetch", args, lambda: b"", fetched_of,
                                   lambda: fetch_call(wire.fetch_ticket(**args)))
        return self._routed(topic, partition, at_node, lambda: super(RoutingCluster, self).fetch(
            topic, partition, offset, max_bytes, end_offset, max_wait_ms), client_rack)

    def _produce_args(self, target: Target, topic: str, partition: int, codec: str, acks: str, producer_id: int,
                      producer_epoch: int, base_sequence: int) -> dict[str, Any]:
        """A produce request's fields at the target node (answered within hold_ms)."""
        return {"topic": topic, "partition": partition, "codec": codec, **target.quoted(), "acks": acks,
                "timeout_ms": self.hold_ms, "producer_id": producer_id, "producer_epoch": producer_epoch,
                "base_sequence": base_sequence}

    def _produce_call(self, target: Target, rows: pa.RecordBatch, args: dict[str, Any]) -> Call:
        """An append of `rows` with `args` at the target node."""
        return self._node_call(target.node, "produce", args, lambda: produce_payload(rows),
                               lambda answer: messages.decode_result(answer[0], int),
                               lambda: put_call(wire.put_descriptor("append", **args), rows.schema, lambda: [rows]))

    def replicated(self, topic: str) -> bool:
        return any(t == topic for t, _ in self.describe_cluster().partitions)

    def transactional_append(self, topic: str, partition: int, rows: pa.RecordBatch, producer: ProducerBatch,
                             transactional_id: str, codec: str = "none") -> int:
        """At the leader, acks=all; routed again after a metadata refresh (a retry is recognised by sequence)."""
        def at_node(target: Target) -> Call:
            return self._produce_call(target, rows, {
                **self._produce_args(target, topic, partition, codec, "all", producer.producer_id,
                                     producer.producer_epoch, producer.base_sequence),
                "transactional": True, "transactional_id": transactional_id})
        return self._routed(topic, partition, at_node, lambda: super(RoutingCluster, self).transactional_append(
            topic, partition, rows, producer, transactional_id, codec))

    def publish_transaction(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                            codec: str = "none", offsets: TransactionalOffsets | None = None,
                            timeout_ms: int = 60_000) -> dict[TopicPartition, list[int]] | None:
        """On a cluster with data nodes, a producer transaction runs on the partition leaders
        (fabric.client.leader_transactions); its group offsets are committed by the coordinator's record of it."""
        if not self.describe_cluster().nodes:
            return super().publish_transaction(txn, parts, codec, offsets)
        return leader_transactions.publish_on_leaders(self, txn, parts, codec, offsets, timeout_ms)

    def write_markers(self, topic: str, partition: int, transactional_id: str,
                      commit: Sequence[tuple[int, int]], abort: Sequence[tuple[int, int]]) -> None:
        self._routed(topic, partition,
                     lambda target: action_call("write_markers", topic=topic, partition=partition,
                                                transactional_id=transactional_id,
                                                commit=[list(p) for p in commit], abort=[list(p) for p in abort],
                                                timeout_ms=self.hold_ms, **target.quoted()),
                     lambda: super(RoutingCluster, self).write_markers(topic, partition, transactional_id, commit,
                                                                        abort))

    def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        return self._routed(topic, partition,
                            lambda target: action_call("describe_producers", topic=topic, partition=partition,
                                                       **target.quoted()),
                            lambda: super(RoutingCluster, self).describe_producers(topic, partition))

    def abort_open_transaction(self, topic: str, partition: int, start_offset: int) -> OpenTransaction:
        return self._routed(topic, partition,
                            lambda target: action_call("abort_open_transaction", topic=topic, partition=partition,
                                                       start_offset=start_offset, timeout_ms=self.hold_ms,
                                                       **target.quoted()),
                            lambda: super(RoutingCluster, self).abort_open_transaction(topic, partition,
                                                                                       start_offset))

    def compact_topic(self, topic: str) -> list[CleanReport]:
        """A replicated topic is compacted at each partition's leader (compact_partition), below its high
        watermark; followers clean their own copies on their node's schedule (log.retention.check.interval.ms).
        Other topics as RemoteCluster does."""
        reports = self._at_each_leader(topic, "compact_partition")
        return super().compact_topic(topic) if reports is None else reports

    def enforce_retention(self, topic: str) -> int:
        """A replicated topic's retention is applied at each partition's leader, below its high watermark; the
        followers take the new log start from their next fetch. Other topics as RemoteCluster does."""
        deleted = self._at_each_leader(topic, "enforce_retention")
        return super().enforce_retention(topic) if deleted is None else sum(deleted)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """At the partition's leader, which moves its log start (never past its high watermark) and answers the
        low watermark; the followers take it from their next fetch."""
        return self._routed(topic, partition,
                            lambda target: action_call("delete_records", topic=topic, partition=partition,
                                                       before_offset=before_offset, **target.quoted()),
                            lambda: super(RoutingCluster, self).delete_records(topic, partition, before_offset))

    def _at_each_leader(self, topic: str, action: str) -> list[Any] | None:
        """The node action `action` at each partition's leader of a replicated topic (each routed as usual), or
        None for a topic the coordinator stores. A rare admin call: it decides on fresh metadata."""
        self.describe_cluster(refresh=True)
        if not self.replicated(topic):
            return None
        def at_leader(partition: int) -> Any:
            return self._routed(topic, partition,
                                lambda target: action_call(action, topic=topic, partition=partition,
                                                           **target.quoted()),
                                lambda: self._moved_off_nodes(topic))
        return [at_leader(partition) for partition in range(self.coordinator.topic(topic).partitions)]

    def _moved_off_nodes(self, topic: str) -> Any:
        """A partition that was on the nodes a moment ago is not: its topic was deleted (and perhaps created again
        at the coordinator) meanwhile."""
        self._stale()
        raise NotLeaderError(f"topic {topic!r} changed while the call was routed to its leaders (deleted, or "
                             "created again); retry")

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        return self._routed(topic, partition,
                            lambda target: action_call("partition_state", topic=topic, partition=partition,
                                                       **target.quoted()),
                            lambda: super(RoutingCluster, self).partition_state(topic, partition))

    def offset_after_records(self, topic: str, partition: int, offset: int, count: int,
                             end_offset: int | None = None, isolation_level: str = "read_committed") -> int:
        return self._routed(topic, partition,
                            lambda target: action_call("offset_after_records", topic=topic, partition=partition,
                                                       offset=offset, count=count, end_offset=end_offset,
                                                       isolation_level=isolation_level, **target.quoted()),
                            lambda: super(RoutingCluster, self).offset_after_records(
                                topic, partition, offset, count, end_offset, isolation_level))

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        return self._routed(topic, partition,
                            lambda target: action_call("offset_for_time", topic=topic, partition=partition,
                                                       timestamp_us=timestamp_us, **target.quoted()),
                            lambda: super(RoutingCluster, self).offset_for_time(topic, partition, timestamp_us))
