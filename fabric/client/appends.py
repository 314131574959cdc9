"""How a producer's stored rows reach their partitions: each partition's run cut into appends (fabric.client.
batching), the partitions' runs in flight together over a network and each run's appends one after another, an
idempotent batch's producer fields (fabric.client.idempotence), and each append retried within the delivery
deadline (fabric.client.send_timeouts), as Kafka's producer sender does."""
from __future__ import annotations

import concurrent.futures
import contextvars
import logging
import threading
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from fabric.client import batching
from fabric.client.client_metrics import ProducerCounts
from fabric.client.cluster import Cluster
from fabric.client.delivery import BatchMetadata
from fabric.client.idempotence import Sequences
from fabric.client.send_timeouts import Deadline
from fabric.common import trace
from fabric.common.errors import FabricError, UnknownProducerIdError
from fabric.server.connection import call_deadline

log = logging.getLogger(__name__)
APPEND_THREADS = 16  # partitions' runs appended together, at most (each run's chunks go one after another)


class Appender:
    """The appends of one producer over `cluster`, with its `config` (batch_size, compression_type, retries,
    retry_backoff_ms, client_id) and `acks`, its idempotent `sequences` (None without idempotence), counted in
    `counts`."""

    def __init__(self, cluster: Cluster, config: dict[str, Any], acks: str, sequences: Sequences | None,
                 counts: ProducerCounts) -> None:
        self.cluster, self.config, self.acks, self.sequences, self.counts = cluster, config, acks, sequences, counts
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the threads (idle once the producer flushed; a run past a close timeout ends by its own)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)

    def by_partition(self, topic: str, rows: pa.Table | pa.RecordBatch, parts: np.ndarray, deadline: Deadline,
                     max_bytes: int) -> list[BatchMetadata]:
        """Append each partition's run of `rows`, in chunks of at most `max_bytes` (the topic's
        max.message.bytes), by `deadline`; where each chunk landed, in partition order (other producers may append
        between two chunks of one run). Over a network the partitions' runs go together, each run's chunks one
        after another; the first partition's error is raised once every run has ended."""
        rows, runs = batching.by_partition(rows, parts)
        size = self.config["batch_size"]
        work = [(p, batching.chunks(batching.run(rows, lo, hi), size, max_bytes)) for p, lo, hi in runs]
        if len(work) == 1 or not self.cluster.concurrent_appends:
            return [meta for p, chunks in work for meta in self._run(topic, p, chunks, deadline)]
        pool = self._threads()
        runs_sent = [pool.submit(contextvars.copy_context().run, self._run, topic, p, chunks, deadline)
                     for p, chunks in work]
        concurrent.futures.wait(runs_sent)
        return [meta for run in runs_sent for meta in run.result()]

    def _run(self, topic: str, partition: int, chunks: list[pa.RecordBatch], deadline: Deadline
             ) -> list[BatchMetadata]:
        """Append one partition's chunks in order: where each landed."""
        return [BatchMetadata(topic, partition, self.append(topic, partition, chunk, deadline), chunk.num_rows)
                for chunk in chunks]

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        """The threads that append partitions' runs together (made on first use, stopped by close())."""
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(APPEND_THREADS, "fabric-producer-append")
            return self._pool

    def append(self, topic: str, partition: int, rows: pa.RecordBatch, deadline: Deadline) -> int:
        """Append one batch by `deadline`. An idempotent producer's batch carries its producer id and sequence,
        so a retry after a lost answer or a leader failover is not written twice; without idempotence it may be
        (at least once)."""
        if self.sequences is None:
            return self._retrying(topic, partition, rows, deadline, dict)
        tp = (topic, partition)
        in_order = self.sequences.partition_lock(tp)
        if not in_order.acquire(timeout=max(deadline.left(), 0)):
            raise deadline.passed(f"a batch of {rows.num_rows} record(s) to {topic}-{partition}", None)
        try:
            batch = self.sequences.batch(tp)
            try:
                try:
                    base = self._retrying(topic, partition, rows, deadline, batch.fields)
                except UnknownProducerIdError as exc:  # the partition forgot this producer: nothing was written
                    batch.failed(str(exc))
                    batch = self.sequences.batch(tp)
                    base = self._retrying(topic, partition, rows, deadline, batch.fields)
            except FabricError as exc:
                batch.failed(f"a batch to {topic}-{partition} failed: {exc}")
                raise
            batch.written(rows.num_rows)
            return base
        finally:
            in_order.release()

    def _retrying(self, topic: str, partition: int, rows: pa.RecordBatch, deadline: Deadline,
                  producer: Callable[[], dict[str, int]]) -> int:
        """Append one batch (with the `producer()` fields: an idempotent producer's id and sequence, asked for
        within the attempt), each attempt within request_timeout_ms, retrying a retriable error (a coordinator
        failing over, a leader moving or not answering) every retry_backoff_ms, up to `retries` times, until
        `deadline`, as Kafka's producer does."""
        retries, last = 0, None
        while True:
            budget = deadline.request()
            if budget <= 0:
                self.counts.failed(rows.num_rows)
                raise deadline.passed(f"a batch of {rows.num_rows} record(s) to {topic}-{partition}", last)
            try:
                if trace.ON:
                    trace.event("request", topic, partition)
                with call_deadline(budget):
                    base = self.cluster.append(topic, partition, rows, self.config["compression_type"], self.acks,
                                               **producer())
                if trace.ON:
                    trace.event("ack", topic, partition, base, base + rows.num_rows)
                self.counts.sent(rows)
                return base
            except FabricError as exc:
                if not exc.retriable or retries >= self.config["retries"]:
                    self.counts.failed(rows.num_rows)
                    raise
                if last is None or deadline.left() > 0:  # (an attempt the delivery deadline cut off tells less
                    last = exc  # than the answer before it: "offline", not "did not answer in 10 ms")
                retries += 1
                self.counts.retried(rows.num_rows)
                log.info("producer %r: append to %s-%d failed (%s); retry %d", self.config["client_id"], topic,
                         partition, exc, retries)
                time.sleep(min(self.config["retry_backoff_ms"] / 1000, max(deadline.left(), 0)))
