"""Kafka's topic admin calls in the forms kafka-python's KafkaAdminClient and confluent-kafka's AdminClient users
type from memory, on the fabric's admin client (`Fabric`):

- `create_topics([NewTopic("orders", 3, 1)])`, NewTopic in both its forms (kafka-python's `topic_configs`,
  confluent-kafka's `config`; -1 for a default), `validate_only=True` checking without creating;
- `delete_topics(["orders"])`;
- `create_partitions({"orders": NewPartitions(6)})` (kafka-python) or
  `create_partitions([NewPartitions("orders", 6)])` (confluent-kafka), `validate_only=True` checking without
  growing;
- `list_offsets({TopicPartition("orders", 0): OffsetSpec.latest()})` (confluent-kafka; Kafka's listOffsets, what
  `kafka-get-offsets` prints): each partition's earliest or latest offset, or the first at or after a time.

Each answers as confluent-kafka does: a dict of one future per topic (or partition), already done, whose
`result()` returns the answer (None for a change) or raises that topic's error. Every topic is tried whatever the
others' outcome, as a Kafka request's topics are. kafka-python's callers, which seldom read the answer, see the
same effect. The calls return once done, so their timeouts (`timeout_ms`, `operation_timeout`,
`request_timeout`) are taken and need no waiting.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from fabric.client.lookups import found_at_max_time, found_by_time
from fabric.client.topic_partition import TopicPartition
from fabric.common import checks
from fabric.common.errors import FabricError, InvalidArgumentError, LeaderNotAvailableError, TopicExistsError
from fabric.coordinator import validation

if TYPE_CHECKING:
    from fabric.client.admin import Fabric

DEFAULT = -1  # Kafka's "the broker's default" for a partition count or a replication factor


class NewTopic:
    """A topic to create: kafka-python's NewTopic(name, num_partitions, replication_factor, replica_assignments,
    topic_configs) and confluent-kafka's NewTopic(topic, num_partitions=-1, replication_factor=-1,
    replica_assignment=None, config=None). -1 asks for the fabric's default (1 partition; the coordinator's
    default.replication.factor). Where the fabric has no data nodes, a replication factor of 1 is its one copy in
    the fabric's directory, as a one-broker Kafka takes it."""

    def __init__(self, name: str | None = None, num_partitions: int = DEFAULT, replication_factor: int = DEFAULT,
                 replica_assignments: Any = None, topic_configs: Mapping[str, Any] | None = None, *,
                 topic: str | None = None, config: Mapping[str, Any] | None = None,
                 replica_assignment: Any = None) -> None:
        named = name if topic is None else topic
        if named is None or None not in (name, topic):
            raise InvalidArgumentError("NewTopic takes the topic's name once: NewTopic('orders', 3, 1) (or name= / "
                                       "topic=)")
        if topic_configs is not None and config is not None:
            raise InvalidArgumentError("NewTopic takes its configs once: topic_configs= (kafka-python) or config= "
                                       "(confluent-kafka)")
        self.name: str = named
        self.topic: str = named
        self.num_partitions, self.replication_factor = num_partitions, replication_factor
        self.replica_assignments = replica_assignments or replica_assignment
        self.topic_configs = self.config = dict(topic_configs or config or {})

    def __repr__(self) -> str:
        return (f"NewTopic(topic={self.topic!r}, num_partitions={self.num_partitions!r}, "
                f"replication_factor={self.replication_factor!r}, config={self.config!r})")


class NewPartitions:
    """A topic's new partition count: kafka-python's NewPartitions(total_count), the value of a {topic: ...}
    dict, and confluent-kafka's NewPartitions(topic, new_total_count), an item of a list."""

    def __init__(self, *args: Any, total_count: int | None = None, new_total_count: int | None = None,
                 topic: str | None = None, new_assignments: Any = None, replica_assignment: Any = None) -> None:
        if args and isinstance(args[0], str):
            topic, args = args[0], args[1:]
        given = [*args, *(n for n in (total_count, new_total_count) if n is not None)]
        if len(given) != 1:
            raise InvalidArgumentError("NewPartitions takes the new partition count once: NewPartitions(6) "
                                       "(kafka-python) or NewPartitions('orders', 6) (confluent-kafka)")
        self.topic = topic
        self.total_count = self.new_total_count = given[0]
        self.new_assignments = new_assignments or replica_assignment

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic!r}, new_total_count={self.new_total_count!r})"


class OffsetSpec:
    """Which offset list_offsets gives, confluent-kafka's OffsetSpec: `earliest()` (the log start), `latest()`
    (the log end: the high watermark of a replicated partition), `for_timestamp(ms)` (the first record whose
    timestamp is at or after it; -1 where none is) or `max_timestamp()` (the first record of the largest
    timestamp, KIP-734; -1 where the partition holds none)."""

    def __init__(self, kind: str, timestamp_ms: int = -1) -> None:
        self.kind, self.timestamp_ms = kind, timestamp_ms

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls("earliest")

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls("latest")

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return cls("max_timestamp")

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> OffsetSpec:
        return cls("timestamp", checks.integer(timestamp_ms, "OffsetSpec.for_timestamp's milliseconds", 0,
                                               checks.LONG_MAX // 1000))

    def __repr__(self) -> str:
        return f"OffsetSpec.for_timestamp({self.timestamp_ms})" if self.kind == "timestamp" else \
            f"OffsetSpec.{self.kind}()"


@dataclass(frozen=True)
class ListOffsetsResultInfo:
    """A partition's offset as list_offsets found it (confluent-kafka's name): the offset (-1: none), and the
    leader epoch of a replicated partition (None for one that is not). `timestamp`: the found record's (ms), for
    `for_timestamp` and `max_timestamp`; -1 for the earliest and latest offsets, as Kafka answers."""

    offset: int
    timestamp: int = -1
    leader_epoch: int | None = None


def list_offsets(fab: Fabric, specs: Mapping[tuple[str, int], OffsetSpec]) -> dict[TopicPartition, Future]:
    """Each partition's offset by its OffsetSpec, as the module says."""
    if not isinstance(specs, Mapping):
        raise InvalidArgumentError("list_offsets takes {TopicPartition('orders', 0): OffsetSpec.latest()}, got "
                                   f"{specs!r}")

    def find(tp: TopicPartition, spec: OffsetSpec) -> ListOffsetsResultInfo:
        if not isinstance(spec, OffsetSpec):
            raise InvalidArgumentError(f"list_offsets takes an OffsetSpec for {tp}, e.g. OffsetSpec.latest(); got "
                                       f"{spec!r}")
        state = fab.cluster.partition_state(*checks.topic_partition(tp, "list_offsets"))
        if state.replicas and state.leader is None:
            raise LeaderNotAvailableError(f"partition {tp[0]}-{tp[1]} has no leader now (every replica in its ISR "
                                          "is down); retry once one is back")
        offset, timestamp = state.start_offset if spec.kind == "earliest" else state.end_offset, -1
        if spec.kind in ("timestamp", "max_timestamp"):
            found = found_by_time(fab.cluster, tp[0], tp[1], spec.timestamp_ms) if spec.kind == "timestamp" \
                else found_at_max_time(fab.cluster, tp[0], tp[1])
            offset, timestamp = (-1, -1) if found is None else found[:2]
        return ListOffsetsResultInfo(offset, timestamp, state.leader_epoch if state.leader_epoch >= 0 else None)
    return {TopicPartition(*tp): done_future(find, tp, spec) for tp, spec in specs.items()}


def one_copy_factors(fab: Fabric) -> tuple[int, ...]:
    """The replication factors that ask `fab` for a topic kept in its one directory (no replication_factor):
    Kafka's default (-1), and on a fabric without data nodes 1, as a one-broker Kafka takes it."""
    return (DEFAULT,) if fab.list_nodes() else (DEFAULT, 1)


def create_topics(fab: Fabric, new_topics: Iterable[NewTopic], validate_only: bool = False) -> dict[str, Future]:
    """Each NewTopic created (or with `validate_only`, checked and its name found free), as the module says."""
    topics = listed(new_topics, NewTopic, "create_topics", "[NewTopic('orders', 3, 1)]")
    one_copy = one_copy_factors(fab) if topics else (DEFAULT,)
    existing = set(fab.topic_names()) if validate_only else set()  # (listed once for every topic checked)

    def create(new: NewTopic) -> None:
        _no_assignment(new.replica_assignments, "create_topics")
        partitions = 1 if new.num_partitions == DEFAULT else new.num_partitions
        factor = None if new.replication_factor in one_copy else new.replication_factor
        if not validate_only:
            fab.create_topic(new.topic, partitions, new.config, replication_factor=factor)
            return
        fab.check_new_topic(new.topic, partitions, new.config, replication_factor=factor)
        if new.topic in existing:
            raise TopicExistsError.of(new.topic)
    return {new.topic: done_future(create, new) for new in topics}


def delete_topics(fab: Fabric, topics: Iterable[str]) -> dict[str, Future]:
    """Each named topic deleted, as the module says."""
    names = listed(topics, str, "delete_topics", "['orders']")
    return {name: done_future(fab.delete_topic, name) for name in names}


def create_partitions(fab: Fabric, new_partitions: Mapping[str, NewPartitions] | Iterable[NewPartitions],
                      validate_only: bool = False) -> dict[str, Future]:
    """Each topic grown to its NewPartitions' count, as the module says: a {topic: NewPartitions(n)} dict or a
    [NewPartitions(topic, n)] list; with `validate_only`, only checked (the topic there, the count one it may
    grow to)."""
    if isinstance(new_partitions, Mapping):
        pairs = [(topic, new) for topic, new in new_partitions.items()]
    else:
        given = listed(new_partitions, NewPartitions, "create_partitions", "[NewPartitions('orders', 6)]")
        pairs = [(new.topic, new) for new in given]
    for topic, new in pairs:
        if not isinstance(topic, str) or not isinstance(new, NewPartitions):
            raise InvalidArgumentError(f"create_partitions takes {{'orders': NewPartitions(6)}} or "
                                       f"[NewPartitions('orders', 6)], got {topic!r}: {new!r}")

    def grow(topic: str, new: NewPartitions) -> None:
        _no_assignment(new.new_assignments, "create_partitions")
        if not validate_only:
            fab.create_partitions(topic, new.new_total_count)
            return
        total = validation.partition_count(topic, new.new_total_count)
        validation.partition_growth(topic, fab.cluster.coordinator.topic(topic).partitions, total)
    return {topic: done_future(grow, topic, new) for topic, new in pairs}


@dataclass(frozen=True)
class DeletedRecords:
    """What delete_records left of a partition (confluent-kafka's): its new log start offset."""

    low_watermark: int


def delete_records(fab: Fabric, partitions: Iterable[Any]) -> dict[TopicPartition, Future]:
    """confluent-kafka's delete_records([TopicPartition(topic, p, offset)]): each partition's records below its
    offset deleted (-1, OFFSET_END: every record), a future of its DeletedRecords per partition."""
    chosen: dict[TopicPartition, int] = {}
    for tp in listed(partitions, tuple, "delete_records", "[TopicPartition('orders', 0, 42)]"):
        topic, partition = checks.topic_partition(tp, "delete_records")
        offset = getattr(tp, "offset", None)
        if offset is None:
            raise InvalidArgumentError(f"delete_records takes each partition with the offset to delete below, e.g. "
                                       f"TopicPartition({topic!r}, {partition}, 42) (-1: every record); "
                                       f"{topic}-{partition} has none")
        chosen[TopicPartition(topic, partition, offset)] = offset
    return records_deleted(fab, chosen)


def records_deleted(fab: Fabric, chosen: Mapping[TopicPartition, int]) -> dict[TopicPartition, Future]:
    """Each partition's records below its offset deleted (-1: every record), a future of its DeletedRecords:
    what both clients' delete_records do, each then answering in its own shape."""
    def delete(tp: TopicPartition, before: int) -> DeletedRecords:
        return DeletedRecords(fab.delete_records(tp.topic, tp.partition, before))
    return {tp: done_future(delete, tp, before) for tp, before in chosen.items()}


def listed(values: Any, kind: type, call: str, example: str) -> list[Any]:
    """`values` as a list of `kind`: a collection of them, never one alone or a string."""
    if isinstance(values, (str, bytes, kind)) or not isinstance(values, Iterable):
        raise InvalidArgumentError(f"{call} takes a list, e.g. {call}({example}); got {values!r}")
    out = list(values)
    wrong = [v for v in out if not isinstance(v, kind)]
    if wrong:
        raise InvalidArgumentError(f"{call} takes a list of {kind.__name__}, e.g. {call}({example}); got "
                                   f"{wrong[0]!r}")
    return out


def _no_assignment(assignment: Any, call: str) -> None:
    if assignment:
        raise InvalidArgumentError(f"{call} takes no replica assignment here: give a replication factor, then move "
                                   "replicas with reassign_partition (`fabric partitions reassign`)")


def done_future(call: Callable[..., object], *args: Any) -> Future:
    """A future already done with call(*args)'s outcome: what it returned, or the FabricError it raised."""
    future: Future = Future()
    try:
        future.set_result(call(*args))
    except FabricError as exc:
        future.set_exception(exc)
    return future
