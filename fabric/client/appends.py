"""How a producer's stored rows reach their partitions: each partition's run cut into appends (fabric.client.
batching), the partitions' runs in flight together over a network and each run's appends one after another, an
idempotent batch's producer fields (fabric.client.idempotence), and each append retried within the delivery
deadline (fabric.client.send_timeouts), as Kafka's producer sender does."""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import contextvars
import logging
import threading
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from fabric.client import batching
from fabric.client.client_metrics import ProducerCounts
from fabric.client.cluster import Cluster, PendingAppend
from fabric.client.delivery import BatchMetadata
from fabric.client.idempotence import BatchSequence, Sequences
from fabric.client.send_timeouts import Deadline
from fabric.common import trace
from fabric.common.errors import FabricError, OutOfOrderSequenceError, UnknownProducerIdError
from fabric.common.types import TopicPartition
from fabric.server.connection import call_deadline
from fabric.storage.batch_encoding import Encoded, Rows
from fabric.storage.lock import PartitionBusy, may_wait

log = logging.getLogger(__name__)
APPEND_THREADS = 16  # partitions' runs appended together, at most (each run's chunks go one after another)


def _batch_to(records: int, topic: str, partition: int) -> str:
    """What an append is, in the error of a delivery deadline that passed."""
    return f"a batch of {records} record(s) to {topic}-{partition}"


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

    def by_partition(self, topic: str, rows: pa.Table | Rows, parts: np.ndarray, deadline: Deadline,
                     max_bytes: int) -> list[BatchMetadata]:
        """Append each partition's run of `rows`, in chunks of at most `max_bytes` (the topic's
        max.message.bytes), by `deadline`; where each chunk landed, in partition order (other producers may append
        between two chunks of one run). Over a network the partitions' runs go together, each run's chunks one
        after another; the first partition's error is raised once every run has ended. Rows encoded by their
        maker (one record: fabric.client.one_record) go to their one partition as they are."""
        if isinstance(rows, Encoded):
            partition = int(parts[0])
            return [BatchMetadata(topic, partition, self.append(topic, partition, rows, deadline), rows.num_rows)]
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
        window = min(self.config["max_in_flight_requests_per_connection"], len(chunks))
        if window > 1 and self.cluster.pipelined_appends:
            with self._in_order((topic, partition), chunks[0].num_rows, deadline):
                bases = self._pipelined(topic, partition, chunks, deadline, window)
        else:
            bases = [self.append(topic, partition, chunk, deadline) for chunk in chunks]
        return [BatchMetadata(topic, partition, base, chunk.num_rows)
                for base, chunk in zip(bases, chunks, strict=True)]

    def _pipelined(self, topic: str, partition: int, chunks: list[pa.RecordBatch], deadline: Deadline,
                   window: int) -> list[int]:
        """Append the chunks with up to `window` in flight, sent in order (an idempotent producer's with
        consecutive sequences), as Kafka's max.in.flight.requests.per.connection. An error waits for the answers
        of the chunks sent after it; from the failed chunk on, each is then appended again one at a time (an
        idempotent one the leader did write answers its first offset; one refused only because a chunk before
        it was missing is sent as new), and the rest go in flight again."""
        tp = (topic, partition)
        bases: list[int] = []
        flight: collections.deque[tuple[BatchSequence | None, PendingAppend]] = collections.deque()
        try:
            while len(bases) < len(chunks):
                ahead = sum(chunks[i].num_rows for i in range(len(bases), len(bases) + len(flight)))
                while len(bases) + len(flight) < len(chunks) and len(flight) < window:
                    chunk = chunks[len(bases) + len(flight)]
                    batch = None if self.sequences is None else self.sequences.batch(tp, ahead)
                    flight.append((batch, self._start(topic, partition, chunk, deadline, batch)))
                    ahead += chunk.num_rows
                batch, pending = flight.popleft()
                chunk = chunks[len(bases)]
                answer = self._outcome(pending, deadline, _batch_to(chunk.num_rows, topic, partition))
                if isinstance(answer, int):
                    bases.append(self._acknowledged(topic, partition, chunk, batch, answer))
                    continue
                later = [(b, self._outcome(p, deadline, "an append in flight")) for b, p in flight]
                flight.clear()
                bases.append(self._again(topic, partition, chunk, deadline, batch, answer))
                for b, outcome in later:
                    chunk = chunks[len(bases)]
                    if isinstance(outcome, int):
                        bases.append(self._acknowledged(topic, partition, chunk, b, outcome))
                    else:
                        # refused because the failed one was missing (a producer new to the partition is
                        # unknown to it until its first batch is written)
                        behind = isinstance(outcome, (OutOfOrderSequenceError, UnknownProducerIdError))
                        bases.append(self._again(topic, partition, chunk, deadline, b, None if behind else outcome))
        finally:
            for _, pending in flight:
                pending.cancel()
        return bases

    def _start(self, topic: str, partition: int, rows: pa.RecordBatch, deadline: Deadline,
               batch: BatchSequence | None) -> PendingAppend:
        """One attempt of an append, sent now within the request timeout; a failure to send is its answer."""
        budget = deadline.request()
        if budget <= 0:
            return PendingAppend.failed(deadline.passed(_batch_to(rows.num_rows, topic, partition), None))
        if trace.ON:
            trace.event("request", topic, partition)
        try:
            with call_deadline(budget):
                return self.cluster.start_append(topic, partition, rows, self.config["compression_type"], self.acks,
                                                 **({} if batch is None else batch.fields()))
        except FabricError as exc:
            return PendingAppend.failed(exc)

    @staticmethod
    def _outcome(pending: PendingAppend, deadline: Deadline, what: str) -> int | FabricError:
        """A started append's first offset, or its error (`what` names it if the deadline passed; one made only
        now has a request timeout of its own)."""
        budget = deadline.request()
        if budget <= 0:
            pending.cancel()
            return deadline.passed(what, None)
        try:
            with call_deadline(budget):
                return pending.wait()
        except FabricError as exc:
            return exc

    def _acknowledged(self, topic: str, partition: int, rows: Rows, batch: BatchSequence | None,
                      base: int) -> int:
        """An append was acknowledged at `base`: counted, and an idempotent batch's sequence followed."""
        if trace.ON:
            trace.event("ack", topic, partition, base, base + rows.num_rows)
        self.counts.sent(rows)
        if batch is not None:
            batch.written(rows.num_rows)
        return base

    def _again(self, topic: str, partition: int, rows: pa.RecordBatch, deadline: Deadline,
               batch: BatchSequence | None, failed: FabricError | None) -> int:
        """Append a pipelined chunk again on its own, after its attempt `failed` (None: it was refused only
        because an earlier chunk was missing, so this is not a retry). A retry keeps the batch's producer fields,
        as the one-at-a-time path does, even where the producer dropped that id meanwhile: the leader may have
        written it, and only those fields find it there."""
        if batch is None:
            return self._retrying(topic, partition, rows, deadline, dict, failed)
        return self._sequenced(topic, partition, rows, deadline, batch if failed is not None else batch.renewed(),
                               failed)

    def _threads(self) -> concurrent.futures.ThreadPoolExecutor:
        """The threads that append partitions' runs together (made on first use, stopped by close())."""
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(APPEND_THREADS, "fabric-producer-append")
            return self._pool

    def append(self, topic: str, partition: int, rows: Rows, deadline: Deadline) -> int:
        """Append one batch by `deadline`. An idempotent producer's batch carries its producer id and sequence,
        so a retry after a lost answer or a leader failover is not written twice; without idempotence it may be
        (at least once)."""
        if self.sequences is None:
            return self._retrying(topic, partition, rows, deadline, dict)
        tp = (topic, partition)
        with self._in_order(tp, rows.num_rows, deadline):
            return self._sequenced(topic, partition, rows, deadline, self.sequences.batch(tp))

    def _in_order(self, tp: TopicPartition, records: int, deadline: Deadline
                  ) -> _InOrder | contextlib.nullcontext[None]:
        """Hold an idempotent producer's partition lock (waited for until `deadline`; not at all within
        storage.lock.without_waiting, PartitionBusy instead): its batches, one run at a time. Nothing to hold
        without idempotence."""
        if self.sequences is None:
            return contextlib.nullcontext()
        return _InOrder(self.sequences.partition_lock(tp), tp, records, deadline)

    def _sequenced(self, topic: str, partition: int, rows: Rows, deadline: Deadline,
                   batch: BatchSequence, failed: FabricError | None = None) -> int:
        """Append an idempotent batch with `batch`'s fields (its partition lock held), after an attempt that
        `failed` if any; a partition that forgot the producer makes it take a new id and send once more."""
        assert self.sequences is not None
        try:
            try:
                base = self._retrying(topic, partition, rows, deadline, batch.fields, failed)
            except UnknownProducerIdError as exc:  # the partition forgot this producer: nothing was written
                batch.failed(str(exc))
                batch = self.sequences.batch((topic, partition))
                base = self._retrying(topic, partition, rows, deadline, batch.fields)
        except FabricError as exc:
            batch.failed(f"a batch to {topic}-{partition} failed: {exc}")
            raise
        batch.written(rows.num_rows)
        return base

    def _retrying(self, topic: str, partition: int, rows: Rows, deadline: Deadline,
                  producer: Callable[[], dict[str, int]], failed: FabricError | None = None) -> int:
        """Append one batch (with the `producer()` fields: an idempotent producer's id and sequence, asked for
        within the attempt), each attempt within request_timeout_ms, retrying a retriable error (a coordinator
        failing over, a leader moving or not answering) every retry_backoff_ms, up to `retries` times, until
        `deadline`, as Kafka's producer does; `failed`: the error of an attempt already made."""
        retries, last = 0, None
        while True:
            if failed is None:
                budget = deadline.request()
                if budget <= 0:
                    self.counts.failed(rows.num_rows)
                    raise deadline.passed(_batch_to(rows.num_rows, topic, partition), last)
                try:
                    if trace.ON:
                        trace.event("request", topic, partition)
                    # (on local files, a lock another process holds is waited for within the request too, so a
                    # process paused while it holds one cannot stall this send past its deadline)
                    with call_deadline(budget), self.cluster.lock_waits_within(budget):
                        base = self.cluster.append(topic, partition, rows, self.config["compression_type"],
                                                   self.acks, **producer())
                    return self._acknowledged(topic, partition, rows, None, base)
                except FabricError as exc:
                    failed = exc
            error, failed = failed, None
            if not error.retriable or retries >= self.config["retries"]:
                self.counts.failed(rows.num_rows)
                raise error
            if last is None or deadline.left() > 0:  # (an attempt the delivery deadline cut off tells less
                last = error  # than the answer before it: "offline", not "did not answer in 10 ms")
            retries += 1
            self.counts.retried(rows.num_rows)
            log.info("producer %r: append to %s-%d failed (%s); retry %d", self.config["client_id"], topic,
                     partition, error, retries)
            time.sleep(min(self.config["retry_backoff_ms"] / 1000, max(deadline.left(), 0)))


class _InOrder:
    """Appender._in_order's context: the partition lock of an idempotent producer, held over the block. A class,
    not a generator context manager: every idempotent append enters one, and this costs a tenth of that."""

    __slots__ = ("lock", "tp", "records", "deadline")

    def __init__(self, lock: threading.Lock, tp: TopicPartition, records: int, deadline: Deadline) -> None:
        self.lock, self.tp, self.records, self.deadline = lock, tp, records, deadline

    def __enter__(self) -> None:
        if not may_wait():  # (an append in place: another batch of this producer to tp is being written)
            if not self.lock.acquire(blocking=False):
                raise PartitionBusy(f"{self.tp[0]}-{self.tp[1]}: another batch of this producer is being appended")
        elif not self.lock.acquire(timeout=max(self.deadline.left(), 0)):
            raise self.deadline.passed(_batch_to(self.records, *self.tp), None)

    def __exit__(self, *exc_info: object) -> None:
        self.lock.release()
