"""Executor side of the fabric source: read one offset range as Arrow batches in Spark's exact types.

Fetched segment batches are zero-copy views of the mapped files; only the columns the query asks for are
built, and small batches are combined (one copy) into a few MB each so Spark sees few, large batches.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from fabric.cluster import Cluster
from fabric.errors import OffsetOutOfRangeError
from fabric.records import output_schema, to_output
from fabric.url import open_cluster
from pyspark.sql.datasource import InputPartition
from sources.offsets import OffsetRange, lost_range_message, report_data_loss

FETCH_BYTES = 32 << 20  # bytes of frames per fetch call
BATCH_BYTES = 8 << 20  # combine smaller fetched batches up to about this size

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

    @property
    def source_schema(self) -> pa.Schema:
        return output_schema(self.value_schema, self.target.names)


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """The batch with exactly Spark's Arrow types (zero-copy when the types already match)."""
    arrays = [col if col.type == field.type else col.cast(field.type)
              for col, field in zip(batch.columns, target)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _combine(pending: list[pa.RecordBatch]) -> pa.RecordBatch:
    return pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def _fetch(cluster: Cluster, offsets: OffsetRange, offset: int, fail: bool) -> tuple[list, int]:
    """(fetched batches, offset they start at): skips to the log start (or fails) if retention ran."""
    topic, partition = offsets.topic, offsets.partition
    while True:
        try:
            return cluster.fetch(topic, partition, offset, FETCH_BYTES, offsets.end), offset
        except OffsetOutOfRangeError:
            log_start = cluster.partition_state(topic, partition).start_offset
            if offset >= log_start:
                raise
            report_data_loss(lost_range_message((topic, partition), offset, log_start), fail)
            offset = log_start


def read_range(plan: ReadPlan, offsets: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of one offset range, as large Arrow batches with Spark's types."""
    cluster = cluster_for(plan.url)
    source = plan.source_schema
    pending: list[pa.RecordBatch] = []
    pending_bytes = 0
    offset = offsets.start
    while offset < offsets.end:
        fetched, offset = _fetch(cluster, offsets, offset, plan.fail_on_data_loss)
        if offset >= offsets.end:
            break
        if not fetched:
            report_data_loss(f"offsets {offset} to {offsets.end - 1} of topic {offsets.topic!r} partition "
                             f"{offsets.partition} are no longer in the log", plan.fail_on_data_loss)
            break
        for item in fetched:
            out = conform(to_output(item.batch, item.offset, offsets.topic, offsets.partition,
                                    item.timestamp_type, source), plan.target)
            pending.append(out)
            pending_bytes += out.nbytes
            if pending_bytes >= BATCH_BYTES:
                yield _combine(pending)
                pending, pending_bytes = [], 0
        offset = fetched[-1].offset + fetched[-1].batch.num_rows
    if pending:
        yield _combine(pending)
