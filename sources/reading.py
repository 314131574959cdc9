"""Executor side of the fabric source: read one offset range as Arrow batches in Spark's exact types.

Fetched segment batches are zero-copy views of the mapped files; only the columns the query asks for are
built, and small batches are combined (one copy) into a few MB each so Spark sees few, large batches.

Everything a task needs comes in its pickled ReadPlan (the URL and rack resolved on the driver), except the rack
when none was resolved: then the task reads $FABRIC_CLIENT_RACK on its executor, so workers in different racks
read from the in-sync replica nearest each (KIP-392). A retriable error (a leader moving: NotLeaderError,
FencedLeaderEpochError; a leader down until the controller elects another: LeaderNotAvailableError; a coordinator
failing over) is retried within the task, with fresh metadata, for up to the plan's retry_timeout_s per call,
instead of failing the task.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from fabric.client.cluster import Cluster
from fabric.client.retry import retrying
from fabric.client.url import open_cluster
from fabric.common.errors import OffsetNotAvailableError, OffsetOutOfRangeError
from fabric.common.records import output_schema, stored_columns, to_output
from fabric.common.types import Fetched
from fabric.sources.offsets import OffsetRange, lost_range_message, report_data_loss
from fabric.spark.options import task_client_rack

FETCH_BYTES = 32 << 20  # bytes of frames per fetch call
BATCH_BYTES = 8 << 20  # combine smaller fetched batches up to about this size
RETRY_TIMEOUT_S = 120.0  # how long a task retries one call's retriable errors (Spark Kafka's pollTimeoutMs default)

log = logging.getLogger(__name__)

_clusters: dict[tuple[int, str], Cluster] = {}
_clusters_lock = threading.Lock()


def cluster_for(url: str) -> Cluster:
    """The connected cluster for `url`, opened once per process (tasks of a reused worker share it)."""
    key = (os.getpid(), url)
    with _clusters_lock:
        cluster = _clusters.get(key)
        if cluster is None:
            cluster = _clusters[key] = open_cluster(url)
        return cluster


class RangePartition(InputPartition):
    """One Spark task: an OffsetRange (kept in `value`)."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)


@dataclass(frozen=True)
class ReadPlan:
    """What every task of a read needs (picklable): where, which columns, in which Arrow types."""

    url: str
    value_schema: pa.Schema | None
    target: pa.Schema  # Spark's Arrow schema for the query's columns, in order
    fail_on_data_loss: bool
    client_rack: str | None = None  # None: each task reads $FABRIC_CLIENT_RACK on its executor
    retry_timeout_s: float = RETRY_TIMEOUT_S

    @property
    def source_schema(self) -> pa.Schema:
        return output_schema(self.value_schema, self.target.names)


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """The batch with exactly Spark's Arrow types (zero-copy when the types already match)."""
    arrays = [col if col.type == field.type else col.cast(field.type)
              for col, field in zip(batch.columns, target, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _combine(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _fetch(cluster: Cluster, offsets: OffsetRange, at: int, rack: str | None, timeout_s: float) -> list[Fetched]:
    """One fetch of the range from offset `at`, retrying retriable errors: with a rack, at the in-sync replica
    there, or at the leader when that replica has nothing yet (its high watermark, which bounds what a follower
    serves, behind the leader's, which the range's end came from)."""
    def attempt(near: str | None) -> list[Fetched]:
        return retrying(cluster, lambda: cluster.fetch(offsets.topic, offsets.partition, at, FETCH_BYTES, offsets.end,
                                                       client_rack=near),
                        f"fetch {offsets.topic}-{offsets.partition} at {at}", timeout_s)
    fetched = attempt(rack)
    return fetched if fetched or rack is None else attempt(None)


def _fetched(cluster: Cluster, offsets: OffsetRange, plan: ReadPlan) -> Iterator[Fetched]:
    """The committed batches of the range in offset order; skips what retention deleted (or fails)."""
    topic, partition = offsets.topic, offsets.partition
    rack = task_client_rack(plan.client_rack)
    offset = offsets.start
    while offset < offsets.end:
        try:
            fetched = _fetch(cluster, offsets, offset, rack, plan.retry_timeout_s)
        except OffsetOutOfRangeError:
            log_start = retrying(cluster, lambda: cluster.partition_state(topic, partition).start_offset,
                                 f"log start of {topic}-{partition}", plan.retry_timeout_s)
            if offset < log_start:
                report_data_loss(lost_range_message((topic, partition), offset, log_start), plan.fail_on_data_loss)
                offset = log_start
                continue
            fetched = []  # past the log's end: as an answer with nothing
        if not fetched:  # the replica answering is behind the planned end: a new leader yet to learn its high
            try:         # watermark from its followers; lost only if that does not come within the retry time
                # (an unreplicated log has no leader to catch up: ending before the offset, a re-created one, it is
                # lost at once)
                if not cluster.replicated(topic) and cluster.partition_state(topic, partition).end_offset <= offset:
                    raise OffsetNotAvailableError(f"{topic}-{partition} ends before offset {offset + 1}")
                fetched = retrying(cluster, functools.partial(_caught_up, cluster, offsets, offset),
                                   f"{topic}-{partition} to reach offset {offset + 1}", plan.retry_timeout_s)
            except OffsetNotAvailableError:
                report_data_loss(f"offsets {offset} to {offsets.end - 1} of topic {topic!r} partition "
                                 f"{partition} are no longer in the log", plan.fail_on_data_loss)
                return
        yield from fetched
        offset = fetched[-1].offset + fetched[-1].batch.num_rows


def _caught_up(cluster: Cluster, offsets: OffsetRange, at: int) -> list[Fetched]:
    """A fetch at the leader from `at` that returns something; OffsetNotAvailableError (retriable) while the
    partition's end is at or below `at`."""
    try:
        fetched = cluster.fetch(offsets.topic, offsets.partition, at, FETCH_BYTES, offsets.end)
    except OffsetOutOfRangeError:  # (past its end: the same)
        fetched = []
    if not fetched:
        raise OffsetNotAvailableError(f"{offsets.topic}-{offsets.partition} ends at or before offset {at}, below "
                                      f"the {offsets.end} this read was planned to: its leader is catching up")
    return fetched


def _runs(fetched: Iterator[Fetched], columns: list[str]) -> Iterator[tuple[int, int, pa.RecordBatch]]:
    """(first offset, timestamp type, stored `columns`) of runs of adjacent batches with one timestamp type
    and schema, combined (one copy) up to about BATCH_BYTES, so Spark gets few, large batches."""
    pending: list[pa.RecordBatch] = []
    size = first = ts_type = end = 0
    for item in fetched:
        batch = item.batch.select(columns)
        if pending and (item.offset != end or item.timestamp_type != ts_type
                        or not batch.schema.equals(pending[0].schema)):
            yield first, ts_type, _combine(pending)
            pending = []
        if not pending:
            size, first, ts_type = 0, item.offset, item.timestamp_type
        pending.append(batch)
        size += batch.nbytes
        end = item.offset + batch.num_rows
        if size >= BATCH_BYTES:
            yield first, ts_type, _combine(pending)
            pending = []
    if pending:
        yield first, ts_type, _combine(pending)


def read_range(plan: ReadPlan, offsets: OffsetRange, cluster: Cluster | None = None) -> Iterator[pa.RecordBatch]:
    """The records of one offset range, as large Arrow batches with Spark's types, read through `cluster`
    (default: this process's connection to plan.url). Only the stored columns the query needs are combined;
    offset, topic, partition and timestampType are built once per batch."""
    cluster = cluster or cluster_for(plan.url)
    source = plan.source_schema
    fetched = _fetched(cluster, offsets, plan)
    for first, ts_type, stored in _runs(fetched, stored_columns(source.names)):
        yield conform(to_output(stored, first, offsets.topic, offsets.partition, ts_type, source), plan.target)
