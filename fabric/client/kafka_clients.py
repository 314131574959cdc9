"""kafka-python's and confluent-kafka's client classes over a fabric, so that a program written for either runs
with its import line changed (`from fabric.kafka import KafkaConsumer` for `from kafka import KafkaConsumer`,
`from fabric.kafka import Producer` for `from confluent_kafka import Producer`).

Each names its fabric where those clients name brokers, `bootstrap_servers` (kafka-python) or
`bootstrap.servers` (confluent-kafka): a fabric URL (file:///dir, fabric://host:port), or host:port pairs of
coordinator services; without it, $FABRIC_URL, else ./fabric-data. Each client opens its own connection to the
fabric and closes it with itself. The producers are the fabric's own; the consumers answer poll() in their
client's shape (kafka-python's by partition, confluent-kafka's one message or None, with methods: `msg.value()`)
and are otherwise the fabric's consumer.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import Future
from typing import Any, Iterator, Mapping, Sequence, TypeVar

from fabric.client import (
    kafka_admin,
    kafka_configs,
    kafka_elections,
    kafka_groups,
    kafka_metadata,
    kafka_python_admin,
    partition_args,
    partition_eof,
)
from fabric.client.admin import Fabric
from fabric.client.cluster import Cluster
from fabric.client.confluent_message import ConfluentMessage, Message
from fabric.client.consumer import Consumer
from fabric.client.kafka_acls import NoAclCalls
from fabric.client.kafka_configs import ConfigResource
from fabric.client.kafka_groups import OffsetAndMetadata
from fabric.client.kafka_metadata import ClusterMetadata, cluster_metadata
from fabric.client.lookups import OffsetAndTimestamp, times_wanted
from fabric.client.partition_eof import PartitionEnds
from fabric.client.producer import Producer as FabricProducer
from fabric.client.topic_partition import OFFSET_INVALID, TopicPartition
from fabric.client.url import bootstrap_url, open_cluster
from fabric.common import checks
from fabric.common.config import (
    CONFLUENT_CONSUMER_SETTINGS,
    PRODUCER_SETTINGS,
    client_config,
    merged_client_config,
)
from fabric.common.errors import ClientTimeoutError, FabricError, InvalidArgumentError
from fabric.common.records import Record

Servers = str | Sequence[str] | None
C = TypeVar("C", bound="_OwningConsumer")
ADMIN_SETTINGS = {"client_id": PRODUCER_SETTINGS["client_id"]}  # what the admin clients take besides their servers


def _cluster(servers: Servers) -> Cluster:
    """The fabric that bootstrap servers name (None: $FABRIC_URL, else ./fabric-data)."""
    return open_cluster(None if servers is None else bootstrap_url(servers))


def _connected(cluster: Cluster) -> bool:
    """kafka-python's bootstrap_connected(): whether the fabric answers a metadata request now."""
    try:
        cluster.describe_cluster(refresh=True)
    except FabricError:
        return False
    return True


def _conf(conf: Mapping[str, Any] | None, kwargs: dict[str, Any], kind: str) -> tuple[Servers, dict[str, Any]]:
    """confluent-kafka's config dict and keyword configs beside it (merged_client_config): its bootstrap.servers
    and the rest."""
    merged = merged_client_config(kind, conf, kwargs)
    return merged.pop("bootstrap.servers", None), merged


class _OwningProducer(FabricProducer):
    """The fabric's producer over a connection of its own to the fabric `servers` name, closed with it."""

    def __init__(self, servers: Servers, **configs: Any) -> None:
        self._owned = _cluster(servers)
        try:
            super().__init__(self._owned, **configs)
        except BaseException:
            self._owned.close()
            raise

    def close(self, timeout: float | None = None) -> None:
        try:
            super().close(timeout)
        finally:
            self._owned.close()


class KafkaProducer(_OwningProducer):
    """kafka-python's KafkaProducer: the fabric's producer, over the fabric `bootstrap_servers` names."""

    def __init__(self, bootstrap_servers: Servers = None, **configs: Any) -> None:
        super().__init__(bootstrap_servers, **configs)

    def bootstrap_connected(self) -> bool:
        """Whether the fabric answers now."""
        return _connected(self._owned)


class _OwningConsumer:
    """The fabric's consumer (`consumer`) over a connection of its own to the fabric `servers` name, closed with
    it; the calls a subclass does not answer in its client's shape are the consumer's."""

    def __init__(self, servers: Servers, *topics: str, **configs: Any) -> None:
        self._owned = _cluster(servers)
        try:
            self.consumer = Consumer(self._owned, *topics, **configs)
        except BaseException:
            self._owned.close()
            raise

    def close(self, autocommit: bool = True) -> None:
        try:
            self.consumer.close(autocommit)
        finally:
            self._owned.close()

    def __getattr__(self, name: str) -> Any:
        if name == "consumer":  # (not made: the constructor failed)
            raise AttributeError(name)
        return getattr(self.consumer, name)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.consumer)

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KafkaConsumer(_OwningConsumer):
    """kafka-python's KafkaConsumer of `topics`, over the fabric `bootstrap_servers` names: poll(timeout_ms,
    max_records) answers {TopicPartition: [records]}, offsets_for_times() OffsetAndTimestamps, assignment() and
    subscription() sets, committed(tp, metadata=True) an OffsetAndMetadata; iterating it and every other call are
    the fabric consumer's."""

    _iterating: Iterator[Record] | None = None  # next()'s iteration, from its first call to its StopIteration

    def __init__(self, *topics: str, bootstrap_servers: Servers = None, **configs: Any) -> None:
        super().__init__(bootstrap_servers, *topics, **configs)

    def __next__(self) -> Record:
        """next(consumer): the next record; StopIteration once consumer_timeout_ms passed without one (a next
        call waits again), as kafka-python's."""
        if self._iterating is None:
            self._iterating = iter(self.consumer)
        try:
            return next(self._iterating)
        except StopIteration:
            self._iterating = None
            raise

    def commit_async(self, offsets: Any = None, callback: Any = None) -> Future[None]:
        """The fabric consumer's commit_async, its `callback(offsets, error or None)` given kafka-python's
        {TopicPartition: OffsetAndMetadata} (the metadata each offset was committed with)."""
        if not callable(callback):
            return self.consumer.commit_async(offsets, callback)
        noted = partition_args.split_metadata(offsets, "commit_async()")[1] if isinstance(offsets, Mapping) else {}

        def called(sent: Mapping[TopicPartition, int], error: BaseException | None) -> None:
            callback({tp: OffsetAndMetadata(offset, noted.get(tp, "")) for tp, offset in sent.items()}, error)
        return self.consumer.commit_async(offsets, called)

    def poll(self, timeout_ms: int = 0, max_records: int | None = None, update_offsets: bool = True
             ) -> dict[TopicPartition, list[Record]]:
        """The next records by partition, waiting up to `timeout_ms` for the first."""
        if update_offsets is not True:
            raise InvalidArgumentError("poll(update_offsets=False) is not taken: every poll moves the positions "
                                       "past what it returns")
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or not 0 <= timeout_ms < math.inf:
            raise InvalidArgumentError(f"poll() timeout_ms must be a number of milliseconds >= 0, got {timeout_ms!r}")
        out: dict[TopicPartition, list[Record]] = {}
        for record in self.consumer.poll(timeout_ms / 1000, max_records):
            out.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        return out

    def offsets_for_times(self, timestamps: Mapping[Any, int]) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """For each partition, its first record whose timestamp is at or after the given one (ms), as
        OffsetAndTimestamp(offset, timestamp), or None where no record is that late."""
        return self.consumer.records_for_times(timestamps)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now, as kafka-python's set."""
        return set(self.consumer.assignment())

    def subscription(self) -> set[str] | None:
        """The topics subscribed, as kafka-python's set; None while the consumer subscribes to none."""
        topics = self.consumer.subscription()
        return set(topics) if topics else None

    def committed(self, partition: Any = None, *more: Any, metadata: bool = False) -> Any:
        """The group's committed offset of the partition, or None; `metadata=True`, as kafka-python's
        OffsetAndMetadata(offset, metadata, leader_epoch). Lists of partitions take the fabric consumer's forms."""
        if not metadata or partition is None or partition_args.is_list((partition, *more)):
            return self.consumer.committed(partition, *more)
        tp = partition_args.one((partition, *more), "committed()", or_list=True)
        [(key, offset)] = self.consumer.committed([tp]).items()  # (its key carries the commit's metadata)
        return None if offset is None else OffsetAndMetadata(offset, key.metadata or "")

    def bootstrap_connected(self) -> bool:
        """Whether the fabric answers now."""
        return _connected(self._owned)


class KafkaAdminClient(NoAclCalls, Fabric):
    """kafka-python's KafkaAdminClient: the fabric's admin calls (create_topics, delete_topics,
    create_partitions, list_topics, ...), kafka-python's consumer group calls (kafka_groups), config and record
    calls (kafka_python_admin) and leader elections (kafka_elections), over the fabric `bootstrap_servers` names;
    its ACL calls are refused, naming the acl.file that holds the ACLs."""

    def __init__(self, bootstrap_servers: Servers = None, **configs: Any) -> None:
        client_config("admin", ADMIN_SETTINGS, configs)  # (Kafka's connection settings are ignored, with a warning)
        super().__init__(_cluster(bootstrap_servers))

    def list_consumer_groups(self, broker_ids: Any = None) -> list[tuple[str, str]]:
        """(group id, protocol type) of every group."""
        return kafka_groups.python_list_groups(self)

    def describe_consumer_groups(self, group_ids: Sequence[str], group_coordinator_id: Any = None,
                                 include_authorized_operations: bool = False) -> list[kafka_groups.GroupInformation]:
        """Each group's state, assignor and members."""
        return kafka_groups.python_describe_groups(self, group_ids)

    def list_consumer_group_offsets(self, group_id: str, group_coordinator_id: Any = None,
                                    partitions: Sequence[Any] | None = None
                                    ) -> dict[TopicPartition, kafka_groups.OffsetAndMetadata]:
        """The group's committed offsets (of `partitions` only, where given: -1 for one without a commit)."""
        return kafka_groups.python_group_offsets(self, group_id, partitions)

    def delete_consumer_groups(self, group_ids: Sequence[str], group_coordinator_id: Any = None
                               ) -> list[tuple[str, FabricError | None]]:
        """Each group deleted: (group id, None), or (group id, the error that kept it)."""
        return kafka_groups.python_delete_groups(self, group_ids)

    def describe_cluster(self) -> dict[str, Any]:
        """The live data nodes as brokers and the cluster id, as kafka-python's dict."""
        return kafka_metadata.python_describe_cluster(self.cluster)

    def describe_topics(self, topics: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Each topic (every one, if none are named) with its partitions' leader, replicas and ISR."""
        return kafka_metadata.python_describe_topics(self.cluster, topics)

    def describe_configs(self, config_resources: Sequence[ConfigResource], include_synonyms: bool = False
                         ) -> list[kafka_python_admin.DescribeConfigsResponse]:
        """Each topic's configs, as a list of kafka-python's DescribeConfigsResponse (its `.resources` rows)."""
        return kafka_python_admin.describe_configs(self, config_resources, include_synonyms)

    def alter_configs(self, config_resources: Sequence[ConfigResource]) -> kafka_python_admin.AlterConfigsResponse:
        """Each topic's overrides replaced by its `configs`, as kafka-python's AlterConfigsResponse."""
        return kafka_python_admin.alter_configs(self, config_resources)

    def perform_leader_election(self, election_type: Any, topic_partitions: Any = None, timeout_ms: int | None = None,
                                raise_errors: bool = True) -> kafka_elections.ElectLeadersResponse:
        """A preferred (0) or unclean (1) election of {topic: [partitions]} (None: every replicated one), as
        kafka-python's ElectLeadersResponse."""
        return kafka_elections.python_perform_leader_election(self, election_type, topic_partitions, raise_errors)

    def delete_records(self, records_to_delete: Any, timeout_ms: Any = None,  # type: ignore[override]
                       partition_leader_id: Any = None, **native: Any) -> dict[TopicPartition, dict[str, int]] | int:
        """delete_records({tp: offset}): each partition's records below the offset deleted, kafka-python 2.1's
        {tp: {"partition_index", "low_watermark", "error_code"}}; the fabric's delete_records(topic, partition,
        before_offset) answers the new log start."""
        if isinstance(records_to_delete, str):
            given = {k: v for k, v in (("partition", timeout_ms), ("before_offset", partition_leader_id))
                     if v is not None}
            return super().delete_records(records_to_delete, **given, **native)
        return kafka_python_admin.delete_records(self, records_to_delete)


class Producer(_OwningProducer):
    """confluent-kafka's Producer(conf): produce(), poll(), flush(), len() and list_topics() over the fabric its
    `bootstrap.servers` names; the rest of `conf` is the producer's config, with Kafka's names."""

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        servers, configs = _conf(conf, kwargs, "Producer")
        super().__init__(servers, **configs)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """confluent-kafka's cluster metadata (kafka_metadata), of `topic` or of every topic."""
        return cluster_metadata(self._owned, topic)

    def flush(self, timeout: float | None = None) -> int:
        """confluent-kafka's flush: wait up to `timeout` seconds (None or negative: as long as it takes) for every
        record queued to be acknowledged or failed; the number still queued or in flight then (0: none), never
        an error: they stay queued and go in the background."""
        try:
            super().flush(checks.unless_forever(timeout))
        except ClientTimeoutError:
            pass
        return len(self)


class ConsumerClient(_OwningConsumer):
    """confluent-kafka's Consumer(conf) (exported as fabric.kafka.Consumer): poll() answers one Message or None,
    consume() a list of Messages, commit() is asynchronous unless asked (`asynchronous=False`) and takes a
    Message; subscribe() calls its rebalance callbacks with the consumer; position([...]), committed([...]) and
    offsets_for_times([...]) answer its lists of TopicPartitions;
    list_topics(), get_watermark_offsets(), memberid() and the incremental assignment calls are confluent-kafka's
    too; every other call (subscribe, assign, position, seek, pause, close, ...) is the fabric
    consumer's.
    `group.id` and the rest of `conf` are its config, with Kafka's names."""

    _assigning = False  # inside subscribe()'s on_assign: assign() starts the group's partitions at offsets
    _ends: PartitionEnds | None = None  # with enable.partition.eof: the partitions whose end was reported

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        servers, configs = _conf(conf, kwargs, "Consumer")
        own_keys = [key for key in configs if key.replace(".", "_") in CONFLUENT_CONSUMER_SETTINGS]
        own = client_config("Consumer", CONFLUENT_CONSUMER_SETTINGS, {key: configs.pop(key) for key in own_keys})
        super().__init__(servers, **configs)
        if own["enable_partition_eof"]:
            self._ends = PartitionEnds()

    def subscribe(self, topics: Sequence[str], on_assign: Any = None, on_revoke: Any = None, on_lost: Any = None
                  ) -> None:
        """Subscribe to `topics` (one name starting with ^ is a regular expression, as librdkafka's), with the
        rebalance callbacks called as confluent-kafka calls them: callback(this consumer, partitions). Inside
        on_assign, assign(partitions) starts each partition at the offset it carries (OFFSET_BEGINNING, OFFSET_END
        or a number), as librdkafka's rebalance callback does."""
        def assigning(consumer: Any, partitions: list[TopicPartition]) -> None:
            self._assigning = True
            try:
                on_assign(self, _unpositioned(partitions))
            finally:
                self._assigning = False
        names = [topics] if isinstance(topics, str) else list(topics)
        pattern = names[0] if len(names) == 1 and isinstance(names[0], str) and names[0].startswith("^") else None
        revoking = None if on_revoke is None else (lambda _c, parts: on_revoke(self, _unpositioned(parts)))
        losing = None if on_lost is None else (lambda _c, parts: on_lost(self, _unpositioned(parts)))
        self.consumer.subscribe(() if pattern else names, pattern=pattern,
                                on_assign=None if on_assign is None else assigning, on_revoke=revoking, on_lost=losing)

    def assign(self, partitions: Sequence[Any]) -> None:
        """Consume exactly these partitions; inside subscribe()'s on_assign, start the group's partitions at the
        offsets they carry instead (their assignment is the group's)."""
        if not self._assigning:
            self.consumer.assign(partitions)
            return
        for tp in partition_args.partition_list(partitions, "assign()"):
            if tp.offset is not None and tp.offset != OFFSET_INVALID:
                self.consumer.seek(tp)

    def poll(self, timeout: float | None = None) -> ConfluentMessage | None:
        """The next message, waiting up to `timeout` seconds (None or -1: as long as it takes); None if none came."""
        messages = self.consume(1, -1 if timeout is None else timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[ConfluentMessage]:
        """Up to `num_messages` messages, waiting up to `timeout` seconds (-1: as long as it takes) for the first;
        with enable.partition.eof, a partition's EOF event where nothing came (partition_eof)."""
        if self._ends is None:
            return [Message(r) for r in self.consumer.consume(num_messages, timeout)]
        wait = checks.unless_forever(timeout)
        deadline = None if wait is None else time.monotonic() + checks.timeout(wait, "consume() timeout")
        while True:
            left = partition_eof.CHECK_S if deadline is None else max(deadline - time.monotonic(), 0.0)
            records = self.consumer.consume(num_messages, min(left, partition_eof.CHECK_S))
            if records:
                self._ends.moved(records)
                return [Message(r) for r in records]
            ended = self._ends.reached(self.consumer, num_messages)
            if ended or (deadline is not None and time.monotonic() >= deadline):
                return ended

    def commit(self, message: Message | None = None, offsets: Any = None, asynchronous: bool = True
               ) -> list[TopicPartition] | None:
        """Commit the offset after `message`, or `offsets`, or the positions; in the background unless
        `asynchronous=False` (confluent-kafka's default), which answers the partitions committed, each carrying
        its offset, as confluent-kafka's."""
        committed = self.consumer.commit(offsets, asynchronous=asynchronous,
                                         message=None if message is None else message.record)
        return None if committed is None else _listed(committed)

    def store_offsets(self, message: Message | None = None, offsets: Any = None) -> None:
        """The offset after `message`, or `offsets` ([TopicPartition(topic, partition, offset)]), kept for the
        next commit without offsets (with enable.auto.offset.store=False: fabric.client.offset_store)."""
        self.consumer.store_offsets(None if message is None else message.record, offsets)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """confluent-kafka's cluster metadata (kafka_metadata), of `topic` or of every topic."""
        return cluster_metadata(self._owned, topic)

    def position(self, partitions: Any, *more: Any) -> Any:
        """position([tp, ...]): each partition with the offset of the next record poll() returns from it (the
        fabric consumer's one-partition forms answer the offset)."""
        if not partition_args.is_list((partitions, *more)):
            return self.consumer.position(partitions, *more)
        return _listed(self.consumer.position(partition_args.partition_list(partitions, "position()")))

    def committed(self, partitions: Any = None, *more: Any, timeout: float | None = None) -> Any:
        """committed([tp, ...]) or committed() (the assignment): each partition with the group's committed offset
        (OFFSET_INVALID, -1001, where none is); the fabric consumer's one-partition forms answer the offset or
        None."""
        if partitions is not None and not partition_args.is_list((partitions,)):
            return self.consumer.committed(partitions, *more)
        if len(more) > 1:
            raise InvalidArgumentError(f"committed() takes a list of partitions and a timeout, got "
                                       f"{checks.shown((partitions, *more))}")
        for waited in (*more, timeout):  # (confluent-kafka's timeout, positional too: the answer never waits)
            if waited is not None:
                checks.timeout(waited, "committed() timeout")
        return _listed(self.consumer.committed(partitions))

    def offsets_for_times(self, partitions: Sequence[Any] | Mapping[Any, int], timeout: float | None = None
                          ) -> list[TopicPartition]:
        """Each partition, given with a timestamp (ms) as its offset (or as {partition: ms}), with the offset of
        its first record at or after that time (-1 where no record is that late)."""
        times: Mapping[Any, Any] = partitions if isinstance(partitions, Mapping) else \
            {tp: tp.offset for tp in partition_args.partition_list(partitions, "offsets_for_times()")}
        if any(ms is None for ms in times.values()):
            raise InvalidArgumentError("offsets_for_times() takes each partition with its time (ms) as its offset: "
                                       f"[TopicPartition('orders', 0, 1700000000000)]; got {checks.shown(partitions)}")
        found = self.consumer.offsets_for_times(times_wanted(times))
        return [TopicPartition(tp.topic, tp.partition, -1 if offset is None else offset)
                for tp, offset in found.items()]

    def get_watermark_offsets(self, partition: Any, timeout: float | None = None, cached: bool = False
                              ) -> tuple[int, int]:
        """(low, high): the partition's log start and high watermark, asked now; `cached=True`, the high watermark
        this consumer last fetched, the low one unknown (OFFSET_INVALID, -1001, for both when not fetched here)."""
        topic, number = checks.topic_partition(partition, "get_watermark_offsets()")
        if cached:
            tp = TopicPartition(topic, number)
            high = self.consumer.highwater(tp) if tp in self.consumer.assignment() else None
            return OFFSET_INVALID, OFFSET_INVALID if high is None else high
        state = self._owned.partition_state(topic, number)
        return state.start_offset, state.end_offset

    def memberid(self) -> str | None:
        """This consumer's member id in its group; None while it is not a member."""
        member = self.consumer.group_metadata().member_id if self.consumer.group_id is not None else ""
        return member or None

    def unassign(self) -> None:
        """Drop the partitions assign() gave (a subscribed consumer's are its group's: unsubscribe())."""
        self._reassign("unassign()", self.consumer.assignment())

    def incremental_assign(self, partitions: Sequence[Any]) -> None:
        """Add `partitions` to those assign() gave, each read from its TopicPartition's offset where it carries
        one; the others keep their positions."""
        added = partition_args.partition_list(partitions, "incremental_assign()")
        self._reassign("incremental_assign()", added, added)

    def incremental_unassign(self, partitions: Sequence[Any]) -> None:
        """Drop `partitions` from those assign() gave; the others keep their positions."""
        self._reassign("incremental_unassign()", partition_args.partition_list(partitions, "incremental_unassign()"))

    def _reassign(self, call: str, replaced: Sequence[Any], added: Sequence[Any] = ()) -> None:
        """Assign the partitions assign() gave but `replaced`, at their positions, and `added`."""
        if self.consumer.subscription():
            raise InvalidArgumentError(f"{call} changes the partitions assign() gave; this consumer subscribes, and "
                                       "its group assigns its partitions (and calls its rebalance callbacks): "
                                       "unsubscribe() first, or assign() instead of subscribe()")
        positions = {tp: self.consumer.position(tp) for tp in self.consumer.assignment() if tp not in replaced}
        self.consumer.assign([*positions, *added])
        for tp, offset in positions.items():
            self.consumer.seek(tp, offset)


def _unpositioned(partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
    """A rebalance callback's partitions as confluent-kafka hands them over: offset OFFSET_INVALID (-1001)."""
    return _listed({tp: None for tp in partitions})


def _listed(offsets: Mapping[TopicPartition, int | None]) -> list[TopicPartition]:
    """confluent-kafka's list of partitions carrying their offsets (OFFSET_INVALID where none is known) and the
    metadata a key carries (a commit's)."""
    return [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID if offset is None else offset,
                           getattr(tp, "metadata", None)) for tp, offset in offsets.items()]


class AdminClient(NoAclCalls, Fabric):
    """confluent-kafka's AdminClient(conf): the fabric's admin calls, each of create_topics, delete_topics,
    create_partitions and list_offsets answering a dict of futures, confluent-kafka's consumer group calls
    (kafka_groups), its topic config calls (kafka_configs), elect_leaders (kafka_elections) and its list_topics()
    (cluster metadata: topic_names() lists the names), over the fabric `bootstrap.servers` names; its ACL calls
    are refused, naming the acl.file that holds the ACLs."""

    def __init__(self, conf: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        servers, configs = _conf(conf, kwargs, "AdminClient")
        client_config("admin", ADMIN_SETTINGS, configs)
        super().__init__(_cluster(servers))

    def poll(self, timeout: float | None = None) -> int:
        """confluent-kafka's poll() serving the client's callbacks: 0, none wait here (each call's future is done
        when the call returns)."""
        return 0

    def list_topics(self, topic: str | None = None, timeout: float = -1  # type: ignore[override]
                    ) -> ClusterMetadata:
        """confluent-kafka's cluster metadata (kafka_metadata), of `topic` or of every topic; the fabric's own
        callers list names with topic_names()."""
        return cluster_metadata(self.cluster, topic)

    def list_consumer_groups(self, states: Any = None, **kwargs: Any) -> Future:
        """A future of the groups (a ListConsumerGroupsResult), of those in `states` only where given."""
        return kafka_groups.confluent_list_groups(self, states)

    def describe_consumer_groups(self, group_ids: Sequence[str], **kwargs: Any) -> dict[str, Future]:
        """A future of each group's description (state, assignor, members)."""
        return kafka_groups.confluent_describe_groups(self, group_ids)

    def list_consumer_group_offsets(self, list_consumer_group_offsets_request: Sequence[Any],
                                    **kwargs: Any) -> dict[str, Future]:
        """A future of each group's committed offsets (ConsumerGroupTopicPartitions)."""
        return kafka_groups.confluent_group_offsets(self, list_consumer_group_offsets_request)

    def alter_consumer_group_offsets(self, alter_consumer_group_offsets_request: Sequence[Any],
                                     **kwargs: Any) -> dict[str, Future]:
        """A future of each group's offsets committed outside any generation (refused while it has members)."""
        return kafka_groups.confluent_alter_offsets(self, alter_consumer_group_offsets_request)

    def delete_consumer_groups(self, group_ids: Sequence[str], **kwargs: Any) -> dict[str, Future]:
        """A future of each group's deletion."""
        return kafka_groups.confluent_delete_groups(self, group_ids)

    def delete_consumer_group_offsets(self, delete_consumer_group_offsets_request: Sequence[Any],
                                      **kwargs: Any) -> dict[str, Future]:
        """A future of each group's partitions once their committed offsets are deleted."""
        return kafka_groups.confluent_delete_offsets(self, delete_consumer_group_offsets_request)

    def delete_records(self, topic_partition_offsets: Any, partition: int | None = None,  # type: ignore[override]
                       before_offset: int | None = None, **kwargs: Any) -> dict[TopicPartition, Future] | int:
        """delete_records([TopicPartition(topic, p, offset)]): a future per partition of its records below that
        offset deleted (kafka_admin.DeletedRecords); the fabric's own form, delete_records(topic, partition,
        before_offset), answers the new log start."""
        if isinstance(topic_partition_offsets, str):
            return super().delete_records(topic_partition_offsets, partition, before_offset)  # type: ignore[arg-type]
        return kafka_admin.delete_records(self, topic_partition_offsets)

    def describe_cluster(self, **kwargs: Any) -> Future:
        """A future of the live data nodes and the cluster id (kafka_metadata.DescribeClusterResult)."""
        return kafka_metadata.describe_cluster(self.cluster)

    def describe_topics(self, topics: Any, **kwargs: Any) -> dict[str, Future]:
        """A future per topic of a TopicCollection of its description: its partitions' leader, replicas and ISR."""
        return kafka_metadata.describe_topics(self.cluster, topics)

    def describe_configs(self, resources: Sequence[Any], **kwargs: Any) -> dict[Any, Future]:
        """A future of each topic's configs, {name: ConfigEntry} (kafka_configs)."""
        return kafka_configs.describe_configs(self, resources)

    def incremental_alter_configs(self, resources: Sequence[Any], **kwargs: Any) -> dict[Any, Future]:
        """A future of each topic's incremental config changes applied (kafka_configs)."""
        return kafka_configs.incremental_alter_configs(self, resources)

    def alter_configs(self, resources: Sequence[Any], **kwargs: Any) -> dict[Any, Future]:
        """A future of each topic's overrides replaced by those given (kafka_configs)."""
        return kafka_configs.alter_configs(self, resources)

    def elect_leaders(self, election_type: Any = "preferred",  # type: ignore[override]
                      partitions: Sequence[Any] | None = None, **kwargs: Any) -> Future | dict:
        """elect_leaders(ElectionType.PREFERRED, [tp, ...]) (None: every replicated partition): a future of
        {TopicPartition: None or the error}; the fabric's own form, elect_leaders("preferred", ...), answers the
        partitions whose leader changed."""
        if isinstance(election_type, str):
            return super().elect_leaders(election_type, partitions)
        return kafka_elections.confluent_elect_leaders(self, election_type, partitions)
