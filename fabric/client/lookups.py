"""What a consumer looks up about topics and partitions without reading them: the topics it may read, a topic's
partitions, a partition's offsets (first, end, by time) as kafka-python's and confluent-kafka's consumers answer
them, and where a partition without a position is read from (the group's commit, else auto_offset_reset). Every
end offset looked up is noted as the partition's last known high watermark."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from fabric.client import partition_args
from fabric.client.client_metrics import ConsumerCounts
from fabric.client.cluster import Cluster
from fabric.client.topic_partition import OFFSET_BEGINNING, OFFSET_END, named_keys
from fabric.client.topic_partition import TopicPartition as NamedPartition
from fabric.common import checks
from fabric.common.errors import AuthorizationError, NoOffsetForPartitionError
from fabric.common.names import INTERNAL_PREFIX, validate_topic
from fabric.common.record_checks import MAX_TIMESTAMP_MS, MAX_TIMESTAMP_US
from fabric.common.types import PartitionState, TopicPartition


class OffsetAndTimestamp(NamedTuple):
    """A record found by its time (kafka-python's offsets_for_times answer): its offset, its timestamp (ms) and
    its leader epoch (-1: not known)."""

    offset: int
    timestamp: int
    leader_epoch: int = -1


def found_at_max_time(cluster: Cluster, topic: str, partition: int) -> OffsetAndTimestamp | None:
    """The partition's first record of its largest timestamp (Kafka's ListOffsets MAX_TIMESTAMP, KIP-734), or
    None where it holds no committed record. Found with time lookups alone (binary search for the latest time some
    record reaches: about 60 lookups, each a request to the partition's leader), so it needs no more than they do:
    `describe` on the topic, and no scan of the records."""
    lo, found = 0, cluster.offset_for_time(topic, partition, 0)
    if found is None:
        return None
    hi = MAX_TIMESTAMP_US + 1  # lo: a time some record reaches (found: the first such); hi: one none reaches
    while hi - lo > 1:
        mid = (lo + hi) // 2
        offset = cluster.offset_for_time(topic, partition, mid)
        lo, hi, found = (mid, hi, offset) if offset is not None else (lo, mid, found)
    return OffsetAndTimestamp(found, lo // 1000)


def found_by_time(cluster: Cluster, topic: str, partition: int, timestamp_ms: int) -> OffsetAndTimestamp | None:
    """The partition's first record whose timestamp is at or after `timestamp_ms`, with that record's own
    timestamp (Kafka's ListOffsets by time answers both; a second read of the one record finds it), or None where
    no record is that late. The timestamp is -1 where the offset holds no record a reader gets (a marker), and
    for a principal that may describe the topic (all a time lookup needs) but not read it."""
    offset = cluster.offset_for_time(topic, partition, timestamp_ms * 1000)
    if offset is None:
        return None
    try:
        runs = cluster.fetch(topic, partition, offset, 1, end_offset=offset + 1, isolation_level="read_uncommitted")
    except AuthorizationError:
        return OffsetAndTimestamp(offset, -1)
    for run in runs:
        if run.offset <= offset < run.offset + run.batch.num_rows:
            return OffsetAndTimestamp(offset, run.batch.column("timestamp")[offset - run.offset].value // 1000)
    return OffsetAndTimestamp(offset, -1)


class Lookups:
    """The consumer's lookups (a base of fabric.client.consumer.Consumer, whose cluster and counts they use)."""

    cluster: Cluster
    group_id: str | None
    config: dict[str, Any]
    _counts: ConsumerCounts

    def topics(self) -> set[str]:
        """The names of the topics this consumer may read (kafka-python's topics(); internal ones left out)."""
        return {t for t in self.cluster.coordinator.list_topics() if not t.startswith(INTERNAL_PREFIX)}

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of `topic` (kafka-python's partitions_for_topic)."""
        return set(range(self.cluster.coordinator.topic(validate_topic(topic)).partitions))

    partitions_for_topic = partitions_for

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[NamedPartition, int]:
        """Each partition's first offset (its log start)."""
        tps = partition_args.partition_list(partitions, "beginning_offsets()")
        return named_keys({tp: self._partition_state(tp).start_offset for tp in tps})

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[NamedPartition, int]:
        """Each partition's end offset: the offset its next record will get."""
        tps = partition_args.partition_list(partitions, "end_offsets()")
        return named_keys({tp: self._partition_state(tp).end_offset for tp in tps})

    def offsets_for_times(self, timestamps: dict[TopicPartition, int]) -> dict[NamedPartition, int | None]:
        """For each partition, the earliest offset whose timestamp (ms) is >= the given one, or None."""
        wanted = times_wanted(timestamps)
        return named_keys({tp: self.cluster.offset_for_time(tp[0], tp[1], ts * 1000) for tp, ts in wanted.items()})

    def records_for_times(self, timestamps: Mapping[Any, int]) -> dict[NamedPartition, OffsetAndTimestamp | None]:
        """offsets_for_times() with each found record's timestamp: an OffsetAndTimestamp, or None (kafka-python's
        answer)."""
        wanted = times_wanted(timestamps)
        return named_keys({tp: found_by_time(self.cluster, tp[0], tp[1], ts) for tp, ts in wanted.items()})

    def _initial_position(self, tp: TopicPartition) -> int:
        """Where a partition without a position is read from: the group's committed offset, else
        auto_offset_reset's end of the log."""
        if self.group_id is not None:
            committed = self.cluster.coordinator.committed(self.group_id, [tp[0]]).get(tp)
            if committed is not None:
                return self._clamp(tp, committed.offset)
        return self._reset(tp)

    def _reset(self, tp: TopicPartition, state: PartitionState | None = None) -> int:
        state = self._partition_state(tp) if state is None else state
        policy = self.config["auto_offset_reset"]
        if policy == "none":
            raise NoOffsetForPartitionError(
                f"no committed offset for {tp[0]}-{tp[1]} and auto_offset_reset=none; "
                "seek() first or set auto_offset_reset to earliest or latest")
        return state.start_offset if policy == "earliest" else state.end_offset

    def _clamp(self, tp: TopicPartition, offset: int) -> int:
        state = self._partition_state(tp)
        return offset if state.start_offset <= offset <= state.end_offset else self._reset(tp, state)

    def _logical(self, tp: TopicPartition, offset: int) -> int:
        """confluent-kafka's logical offset as a position: OFFSET_BEGINNING the log start, OFFSET_END its end,
        OFFSET_STORED and OFFSET_INVALID where a partition without a position is read from."""
        if offset in (OFFSET_BEGINNING, OFFSET_END):
            state = self._partition_state(tp)
            return state.start_offset if offset == OFFSET_BEGINNING else state.end_offset
        return self._initial_position(tp)

    def _partition_state(self, tp: TopicPartition) -> PartitionState:
        """The partition's offsets, asked of the fabric (its end noted as the last known high watermark)."""
        state = self.cluster.partition_state(*tp)
        self._counts.saw_end(tp, state.end_offset)
        return state


def times_wanted(timestamps: Any) -> dict[TopicPartition, int]:
    """offsets_for_times()'s {partition: ms}, each a time a record may carry."""
    return checks.by_partition(timestamps, "offsets_for_times()",
                               lambda ts, what: checks.integer(ts, f"{what} (ms)", 0, MAX_TIMESTAMP_MS))
