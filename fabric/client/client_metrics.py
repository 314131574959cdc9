"""What a producer or a consumer counts of its own work, and `metrics()` reporting it the way kafka-python does:
a dict of metric groups, each a dict of Kafka's metric names to values.

Totals only, counted since the client was created (Kafka's *-total metrics); rates are for the caller to take
between two calls. The consumer's lag per partition is its last known high watermark minus its position.
"""
from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from fabric.client.fetch_buffer import FetchedRun
from fabric.client.topic_partition import TopicPartition as NamedPartition
from fabric.common.types import TopicPartition
from fabric.storage.batch_encoding import Encoded, Rows

Metrics = dict[str, dict[str, Any]]


class ConsumerCounts:
    """A consumer's counts: records and bytes handed to the application, fetches, commits, poll errors retried
    and raised, and the highest end offset (high watermark) seen of each partition."""

    def __init__(self) -> None:
        self.records = self.bytes = self.fetches = self.commits = self.retries = self.errors = 0
        self.highwater: dict[TopicPartition, int] = {}

    def handed_out(self, runs: Iterable[FetchedRun]) -> None:
        for run in runs:
            self.records += run.batch.num_rows
            self.bytes += run.nbytes

    def saw_end(self, tp: TopicPartition, end_offset: int) -> None:
        """The partition's log ends at `end_offset` or later (a lookup said so, or a fetch read up to there)."""
        self.highwater[tp] = max(end_offset, self.highwater.get(tp, end_offset))

    def report(self, positions: Mapping[TopicPartition, int], assigned: int) -> Metrics:
        """The metric groups, with the lag of each partition whose position and high watermark are known."""
        lag = {NamedPartition(*tp): max(end - positions[tp], 0) for tp, end in sorted(self.highwater.items())
               if tp in positions}
        return {
            "consumer-fetch-manager-metrics": {
                "records-consumed-total": self.records, "bytes-consumed-total": self.bytes,
                "fetch-total": self.fetches, "fetch-retry-total": self.retries, "fetch-error-total": self.errors,
                "records-lag-max": max(lag.values(), default=None), "records-lag": lag},
            "consumer-coordinator-metrics": {"commit-total": self.commits, "assigned-partitions": assigned},
        }


class ProducerCounts:
    """A producer's counts: records, bytes and batches appended, records whose append failed, and records whose
    append was retried.
    Thread-safe: the linger thread and the application's threads both send."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records = self.bytes = self.batches = self.errors = self.retries = 0

    def sent(self, *batches: Rows) -> None:
        with self._lock:
            for rows in batches:
                self.records += rows.num_rows
                # (nbytes walks the columns: 30x the cost per send; an Encoded batch: its message)
                self.bytes += rows.payload.size if isinstance(rows, Encoded) else rows.get_total_buffer_size()
                self.batches += 1

    def failed(self, records: int) -> None:
        with self._lock:
            self.errors += records

    def retried(self, records: int) -> None:
        with self._lock:
            self.retries += records

    def report(self) -> Metrics:
        """The metric group (each append of a batch is one request)."""
        with self._lock:
            return {"producer-metrics": {
                "record-send-total": self.records, "byte-total": self.bytes, "request-total": self.batches,
                "record-error-total": self.errors, "record-retry-total": self.retries}}
