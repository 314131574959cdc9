"""Offsets of the fabric source: Spark Kafka's JSON format ({"topic":{"0":23}}), start/end resolution,
data-loss checks, admission control (per-trigger limits) and splitting ranges into Spark tasks."""
from __future__ import annotations

import functools
import itertools
import logging
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from fabric.client.cluster import Cluster
from fabric.client.retry import retrying
from fabric.common.errors import FabricError, OffsetOutOfRangeError, UnknownTopicError, UnknownTopicOrPartitionError
from fabric.common.types import PartitionState, TopicPartition
from fabric.sources.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, Subscription, check_topics_exist

Offsets = dict[TopicPartition, int]
PLANNING_TIMEOUT_S = 120.0  # how long the driver waits out a partition without a leader while planning a batch
log = logging.getLogger(__name__)


class DataLossError(FabricError):
    """Offsets the query has not read yet were deleted (retention) or the topic went away."""


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one topic partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Offsets as Spark Kafka's offset JSON object: {"topic": {"partition": offset}}, sorted."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(obj: Mapping[str, Mapping[str, int]]) -> Offsets:
    """The inverse of to_json; FabricError naming the offsets when they are not in that form (a damaged
    checkpoint, or one written by another source)."""
    try:
        return {(topic, int(p)): int(o) for topic, parts in obj.items() for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise FabricError(f"the offsets {str(obj)[:200]} are not the fabric source's {{\"topic\":{{\"0\":23}}}}: "
                          "the query's checkpoint is damaged or was written by another source; restore its "
                          "offsets/ directory or start the query with a new checkpointLocation") from None


def current_partitions(cluster: Cluster, subscription: Subscription,
                       skip: frozenset[str] = frozenset()) -> list[TopicPartition]:
    """The topic partitions the subscription covers now; subscribed or assigned topics must exist, except
    those in `skip` (deleted while a query ran with failOnDataLoss=false)."""
    topics = [t for t in subscription.topic_names(cluster) if t not in skip]
    if subscription.kind != "subscribePattern":
        check_topics_exist(cluster, topics)
    if subscription.kind == "assign":
        for topic, p in [tp for tp in subscription.assigned if tp[0] not in skip]:
            count = cluster.coordinator.topic(topic).partitions
            if p >= count:
                raise FabricError(f"assign names {topic}-{p}, but topic {topic!r} has partitions 0..{count - 1}")
        return [tp for tp in subscription.assigned if tp[0] not in skip]
    out: list[TopicPartition] = []
    for topic in topics:
        try:
            out += [(topic, p) for p in range(cluster.coordinator.topic(topic).partitions)]
        except UnknownTopicError:  # deleted between list and lookup: the caller reports it
            continue
    return out


def states(cluster: Cluster, partitions: list[TopicPartition]) -> dict[TopicPartition, PartitionState]:
    """Log start/end offsets and sizes of the partitions (a leader moving meanwhile is waited out, as tasks do)."""
    return {tp: retrying(cluster, functools.partial(cluster.partition_state, *tp), f"offsets of {tp[0]}-{tp[1]}",
                         PLANNING_TIMEOUT_S) for tp in partitions}


def _by_timestamp(cluster: Cluster, tp: TopicPartition, ts_ms: int, state: PartitionState,
                  strategy: str, option: str) -> int:
    found = cluster.offset_for_time(tp[0], tp[1], ts_ms * 1000)
    if found is not None:
        return found
    if strategy == "error":
        raise FabricError(
            f"{option}: no record in {tp[0]}-{tp[1]} has a timestamp >= {ts_ms} ms; pick an earlier timestamp "
            "or set startingOffsetsByTimestampStrategy=latest to start such partitions at their end")
    return state.end_offset


def resolve(cluster: Cluster, spec: OffsetSpec, now: Mapping[TopicPartition, PartitionState],
            opts: SourceOptions, option: str) -> Offsets:
    """Concrete offsets of every partition for a start or end spec (missing partitions: earliest when
    starting, latest when ending; timestamps with no later record: per the strategy / latest)."""
    starting = option.startswith("starting")
    fallback = "earliest" if starting else "latest"
    named = set(spec.offsets)
    unknown = sorted(tp for tp in named if tp not in now)
    if unknown and spec.kind in ("offsets", "timestamps"):
        raise FabricError(f"{option} names partitions {unknown} the query does not read; "
                          f"it reads {sorted(now)}")
    committed = {}
    if spec.kind == "group":
        assert opts.group_id is not None  # parse_source_options refuses startingOffsets=group without groupId
        committed = {tp: c.offset for tp, c in cluster.coordinator.committed(
            opts.group_id, sorted({t for t, _ in now})).items()}
    out: Offsets = {}
    for tp, state in now.items():
        kind, value = spec.kind, -1
        if kind == "offsets":
            value = spec.offsets.get(tp, EARLIEST if starting else LATEST)
            kind = {EARLIEST: "earliest", LATEST: "latest"}.get(value, "offset")
        elif kind == "timestamps":
            kind = "timestamp" if tp in spec.offsets else fallback
        elif kind == "group":
            kind, value = ("offset", min(committed[tp], state.end_offset)) if tp in committed else (fallback, -1)
        if kind == "earliest":
            out[tp] = state.start_offset
        elif kind == "latest":
            out[tp] = state.end_offset
        elif kind == "timestamp":
            ts = spec.offsets[tp] if spec.kind == "timestamps" else spec.timestamp_ms
            assert ts is not None  # a "timestamp" spec always carries its timestamp
            strategy = opts.timestamp_strategy if starting else "latest"
            out[tp] = _by_timestamp(cluster, tp, ts, state, strategy, option)
        else:
            if value > state.end_offset:
                raise FabricError(f"{option}: offset {value} of {tp[0]}-{tp[1]} is past its end offset "
                                  f"{state.end_offset}; use an offset <= {state.end_offset} or -1 (latest)")
            out[tp] = value
    return out


def report_data_loss(message: str, fail: bool) -> None:
    """Fail the query (failOnDataLoss=true) or log a warning and carry on (false)."""
    if fail:
        raise DataLossError(
            f"{message}. Some data may have been lost. If this is expected, set the option "
            "failOnDataLoss=false to skip it, or start over from a new checkpoint location")
    log.warning("%s; skipping it because failOnDataLoss=false", message)


def lost_range_message(tp: TopicPartition, start: int, log_start: int) -> str:
    """How to name offsets retention deleted before the query read them."""
    return (f"offsets {start} to {log_start - 1} of topic {tp[0]!r} partition {tp[1]} were deleted "
            f"(retention) before the query read them; the log now starts at {log_start}")


def checked_start(tp: TopicPartition, start: int, state: PartitionState, fail: bool) -> int:
    """Where reading really starts: `start`, or the log start if retention deleted offsets in between."""
    if start < state.start_offset:
        report_data_loss(lost_range_message(tp, start, state.start_offset), fail)
        return state.start_offset
    if start > state.end_offset:
        report_data_loss(f"offset {start} of topic {tp[0]!r} partition {tp[1]} is past its end "
                         f"{state.end_offset} (was the topic deleted and re-created?)", fail)
        return state.start_offset
    return start


def vanished(cluster: Cluster, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
    """The `partitions` that no longer exist: their topic was deleted, or deleted and re-created with fewer
    partitions."""
    counts: dict[str, int] = {}
    for topic in sorted({t for t, _ in partitions}):
        try:
            counts[topic] = cluster.coordinator.topic(topic).partitions
        except UnknownTopicError:
            counts[topic] = 0
    return {tp for tp in partitions if tp[1] >= counts[tp[0]]}


def deleted_topics(cluster: Cluster, subscription: Subscription, previous: Mapping[TopicPartition, int],
                   fail: bool) -> frozenset[str]:
    """Topics the query was reading (or subscribed to) that no longer exist: reported as data loss."""
    existing = set(cluster.coordinator.list_topics())
    gone = {t for t, _ in previous if t not in existing}
    if subscription.kind != "subscribePattern":
        gone |= {t for t in subscription.topic_names(cluster) if t not in existing}
    for topic in sorted(gone):
        report_data_loss(f"topic {topic!r} was deleted while the query was reading it", fail)
    return frozenset(gone)


def current_states(cluster: Cluster, subscription: Subscription, previous: Mapping[TopicPartition, int],
                   fail: bool) -> tuple[frozenset[str], dict[TopicPartition, PartitionState]]:
    """The topics the query read that are gone, and the states of the partitions it reads now. A topic deleted
    since the last batch, or while they are looked up (between two listings), is reported as data loss
    (deleted_topics)."""
    gone = deleted_topics(cluster, subscription, previous, fail)
    try:
        return gone, states(cluster, current_partitions(cluster, subscription, gone))
    except UnknownTopicOrPartitionError:
        gone_now = deleted_topics(cluster, subscription, previous, fail)
        if gone_now == gone:
            raise
        return gone_now, states(cluster, current_partitions(cluster, subscription, gone_now))


def rate_limit(cluster: Cluster, begin: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """Cap the total rows at max_rows, split across partitions in proportion to their backlog (Kafka's rule:
    a partition's share is floored, or rounded up when below one row, so every backlog makes progress). A share
    counts records, not offsets: each partition's batch ends after its share of records the readers get, past
    compaction's gaps, markers and aborted records (Kafka's source counts offsets, so its batches come out
    smaller, down to empty, on a compacted topic)."""
    sizes = {tp: end[tp] - begin[tp] for tp in end if end[tp] > begin[tp]}
    total = sum(sizes.values())
    if total <= max_rows:  # never more records than offsets
        return dict(end)
    out = dict(end)
    for tp, size in sizes.items():
        share = max_rows * (size / total)
        rows = int(math.ceil(share) if share < 1 else math.floor(share))
        try:
            out[tp] = retrying(cluster, functools.partial(cluster.offset_after_records, tp[0], tp[1], begin[tp],
                                                          rows, end[tp]),
                               f"the offset after {rows} records of {tp[0]}-{tp[1]}", PLANNING_TIMEOUT_S)
        except OffsetOutOfRangeError:  # retention overtook `begin` meanwhile: partitions() reports the loss
            out[tp] = min(end[tp], begin[tp] + rows)
    return out


def byte_limit(begin: Offsets, end: Offsets, max_bytes: int, now: Mapping[TopicPartition, PartitionState]
               ) -> Offsets:
    """Cap the estimated bytes at max_bytes: each partition's bytes per record comes from its log size."""
    per_record = {}
    for tp in end:
        state = now.get(tp)
        records = state.end_offset - state.start_offset if state else 0
        per_record[tp] = max(state.size_bytes / records, 1.0) if state and records > 0 else 1.0
    sizes = {tp: (end[tp] - begin[tp]) * per_record[tp] for tp in end if end[tp] > begin[tp]}
    total = sum(sizes.values())
    if total <= max_bytes:
        return dict(end)
    out = dict(end)
    for tp, size in sizes.items():
        rows = max_bytes * (size / total) / per_record[tp]
        out[tp] = min(end[tp], begin[tp] + max(int(rows), 1))
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split large ranges so there are at least min_partitions Spark tasks (in proportion to size)."""
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = min(r.size, max(1, math.ceil(r.size * min_partitions / total)))
        bounds = [r.start + (r.size * i) // parts for i in range(parts + 1)]
        out += [OffsetRange(r.topic, r.partition, lo, hi) for lo, hi in itertools.pairwise(bounds)]
    return out
