"""The producer: Kafka's send/flush API over Arrow batches.

send() only appends to per-topic column buffers (cheap enough for hundreds of thousands of calls a second);
a batch is built and appended when it reaches batch_size bytes, when linger_ms passes (a background
thread), or on flush(). A topic's batches are appended one at a time, outside the producer's lock: what is sent
while one is in flight gathers into the next, which goes as soon as it ends (Kafka's accumulator), and send()
waits for an append only when its batch is full before the one in flight ended. Keys are partitioned as Kafka's
Java client does; null keys stick to one partition per batch. A batch goes in appends of at most the topic's
max.message.bytes each (fabric.common.record_sizes). Every send fails or succeeds within delivery_timeout_ms of
its batch's creation, each request of it within request_timeout_ms (fabric.client.send_timeouts). Nothing
buffered is dropped silently: a producer never closed is flushed when it is garbage-collected or, at the latest,
when the interpreter exits.

A producer with a transactional_id (Kafka's transactional.id) sends in transactions instead: init_transactions(),
then begin_transaction(), send() and send_offsets_to_transaction(), and commit_transaction() publishes every
record and the offsets at once, or abort_transaction() drops them (fabric.client.transaction). Its records are
buffered until the commit, never appended one batch at a time.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import threading
import time
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from fabric.client import batching, idempotence, one_record
from fabric.client.appends import Appender
from fabric.client.client_metrics import Metrics, ProducerCounts
from fabric.client.cluster import Cluster
from fabric.client.confluent_producer import ConfluentProducerCalls
from fabric.client.delivery import BatchMetadata, DeliveryCallback, Drain, SendFuture, fail_all
from fabric.client.idempotence import Sequences
from fabric.client.partitioner import StickyPartitioner, assign_listed, assign_partitions
from fabric.client.send_timeouts import Deadline, delivery_timeout_ms
from fabric.client.serializers import Serializer, Serializers
from fabric.client.transaction import Bases, TransactionManager, TxnState
from fabric.client.unclosed import close_at_exit, close_unclosed
from fabric.common import checks, record_checks, trace
from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.config import PRODUCER_SETTINGS, client_config
from fabric.common.errors import (
    ClientTimeoutError,
    FabricError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidRecordError,
    RecordTooLargeError,
    TransactionAbortedError,
)
from fabric.common.names import validate_topic
from fabric.common.record_checks import Headers, TypedValueRule
from fabric.common.records import HEADERS, TIMESTAMP, stored_size, to_storage, typed_rows
from fabric.common.types import TopicInfo, TopicPartition, TransactionalOffsets
from fabric.server.connection import call_deadline
from fabric.storage.batch_encoding import Encoded
from fabric.storage.lock import PartitionBusy, without_waiting

METADATA_MAX_AGE_S = 5.0
log = logging.getLogger(__name__)


class _Buffer:
    """Columns of records waiting to be sent to one topic."""

    __slots__ = ("values", "keys", "headers", "partitions", "timestamps", "size", "created", "due", "drain")

    def __init__(self, topic: str, linger_s: float) -> None:
        self.values: list = []
        self.keys: list = []
        self.headers: list = []
        self.partitions: list = []
        self.timestamps: list = []
        self.size = 0
        self.created = time.monotonic()  # its records' delivery_timeout_ms runs from here
        self.due = self.created + linger_s  # when the linger thread sends it (flush() makes it due at once)
        self.drain = Drain(topic)


@dataclass(frozen=True)
class _TopicMeta:
    """What send() needs of a topic, cached for METADATA_MAX_AGE_S."""

    at: float
    info: TopicInfo
    max_bytes: int
    typed: TypedValueRule | None


class Producer(ConfluentProducerCalls):
    """Sends records to topics of one cluster. Thread-safe; use as a context manager or close().
    `key_serializer` / `value_serializer` (kafka-python's) turn each non-null key / value into what send() takes
    (bytes or str; a typed topic's dict); a None value stays a tombstone."""

    def __init__(self, cluster: Cluster, key_serializer: Serializer | None = None,
                 value_serializer: Serializer | None = None, **config: Any) -> None:
        self.cluster = cluster
        self._serializers = Serializers(key_serializer, value_serializer)
        self.config = client_config("producer", PRODUCER_SETTINGS, config)
        given = {k.replace(".", "_") for k in config}
        self.config["delivery_timeout_ms"] = delivery_timeout_ms(self.config, given)
        self._batch_size = self.config["batch_size"]
        self._linger = self.config["linger_ms"] / 1000.0
        self._codec = self.config["compression_type"]
        self._direct = cluster.appends_in_process and self._codec == "none"  # one record: fabric.client.one_record
        self._acks = "all" if self.config["acks"] == "-1" else self.config["acks"]
        idempotent = idempotence.enabled(self.config, self._acks, given)
        self._sequences = Sequences(cluster) if idempotent else None
        self._transactions: TransactionManager | None = None
        if self.config["transactional_id"]:
            if self._sequences is None:
                raise InvalidConfigError("transactional_id needs acks=all and enable_idempotence=True, as in Kafka "
                                         f"(got acks={self.config['acks']}, enable_idempotence={idempotent}); "
                                         "drop those settings")
            self._transactions = TransactionManager(cluster, self.config["transactional_id"])
        self._buffers: dict[str, _Buffer] = {}
        self._lock = threading.RLock()
        self._sticky = StickyPartitioner()
        self._meta: dict[str, _TopicMeta] = {}
        self._closed = False
        self._draining: dict[str, tuple[Drain, int]] = {}  # each topic's batch in flight: its drain and records
        self._waiting = 0  # threads waiting for a topic's batch in flight to end
        self._wake = threading.Condition(self._lock)
        self._linger_thread: threading.Thread | None = None
        self._counts = ProducerCounts()
        self._appender = Appender(cluster, self.config, self._acks, self._sequences, self._counts)
        self._linger_wakes_at = float("inf")  # when the linger thread wakes next (time.monotonic())
        self._at_exit = functools.partial(close_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)

    # -- metadata ----------------------------------------------------------------------------------
    def _topic(self, topic: str, refresh: bool = False, within: float | None = None) -> _TopicMeta:
        """The topic's metadata, cached for a few seconds, asked for within request_timeout_ms (and `within`
        seconds, if given: a batch's time left); while the coordinator does not answer, a cached copy is used on
        (unless `refresh` insists on a fresh one)."""
        cached = self._meta.get(topic) if type(topic) is str else None
        if refresh or cached is None or time.monotonic() - cached.at > METADATA_MAX_AGE_S:
            budget = self.config["request_timeout_ms"] / 1000
            try:
                with call_deadline(budget if within is None else min(budget, within)):
                    info = self.cluster.coordinator.topic(validate_topic(topic))
            except FabricError as exc:
                if refresh or cached is None or not exc.retriable:
                    raise
                log.info("producer %r: metadata of topic %r not refreshed (%s); using the cached copy",
                         self.config["client_id"], topic, exc)
                cached = self._meta[topic] = _TopicMeta(time.monotonic(), cached.info, cached.max_bytes,
                                                        cached.typed)
                return cached
            typed = TypedValueRule(info.value_schema) if info.value_schema is not None else None
            cached = _TopicMeta(time.monotonic(), info, info.settings["max.message.bytes"], typed)
            self._meta[topic] = cached
        return cached

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of `topic` (kafka-python's partitions_for), from the metadata send() uses."""
        return set(range(self._topic(topic).info.partitions))

    def metrics(self) -> Metrics:
        """What this producer did, as kafka-python's metrics(): {"producer-metrics": {metric name: value}}, with
        Kafka's names (record-send-total, byte-total, record-error-total, record-retry-total, request-total)."""
        return self._counts.report()

    # -- sending -----------------------------------------------------------------------------------
    def send(self, topic: str, value: Any = None, key: bytes | str | None = None, headers: Headers = None,
             partition: int | None = None, timestamp: int | None = None, *, callback: DeliveryCallback | None = None,
             on_delivery: DeliveryCallback | None = None, timestamp_ms: int | None = None) -> SendFuture:
        """Queue one record; timestamp (kafka-python's `timestamp_ms`) is in ms since the epoch (Kafka's
        convention), default now. `callback` / `on_delivery` (confluent-kafka's names) is called with (error,
        metadata) once the outcome is known: (None, RecordMetadata) or (the error, None).

        The record is checked here (types, sizes, partition, timestamp range), so a bad one is refused by
        this call alone and never fails the records buffered with it."""
        if callback is not None and on_delivery is not None:
            raise InvalidConfigError("send() takes callback= or on_delivery= (the same thing), not both")
        if timestamp_ms is not None:
            if timestamp is not None:
                raise InvalidArgumentError("send() takes timestamp= or timestamp_ms= (the same thing), not both")
            timestamp = timestamp_ms
        delivery = callback or on_delivery
        if delivery is not None and not callable(delivery):
            raise InvalidConfigError(f"send(callback=...) must be callable(error, metadata), got "
                                     f"{type(delivery).__name__}")
        if self._closed:
            raise FabricError("send() on a closed producer; create a new one")
        if trace.ON:
            trace.event("send", topic, partition)
        meta = self._topic(topic)
        key, value = self._serializers.apply(key, value)
        if key is not None and type(key) is not bytes:
            key = record_checks.payload(key, "key")
        if meta.typed is None:
            if value is not None and type(value) is not bytes:
                value = record_checks.payload(value, "value")
            size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        else:
            value = meta.typed.check(value)
            size = 64 + (len(key) if key is not None else 0)
        stored_headers, header_bytes = None, -1
        if headers:
            stored_headers, header_bytes = record_checks.headers(headers)
            size += header_bytes
        if size > self.config["max_request_size"]:
            raise RecordTooLargeError(
                f"record of {size} bytes exceeds this producer's max_request_size={self.config['max_request_size']}; "
                "raise max_request_size or send less")
        if size > meta.max_bytes:
            raise RecordTooLargeError(
                f"record of {size} bytes exceeds max.message.bytes={meta.max_bytes} of topic {topic!r}; "
                f"raise it with `fabric topics alter {topic} --config max.message.bytes=N` or send less")
        if partition is not None:
            partition = record_checks.partition(partition, meta.info.partitions, topic)
        if timestamp is not None:
            timestamp = record_checks.timestamp_ms(timestamp)
        with self._lock:
            if self._transactions is not None:
                self._transactions.require("send")
            buf = self._buffers.get(topic)
            if buf is None:
                buf = self._buffers[topic] = _Buffer(topic, self._linger)
                if self._transactions is None:
                    self._ensure_linger_thread()
                    if buf.due < self._linger_wakes_at and topic not in self._draining:  # (else it wakes in time
                        self._wake.notify()  # anyway: no thread switch per send) it times the new batch from now
            index = len(buf.values)
            buf.values.append(value)
            buf.keys.append(key)
            buf.headers.append(stored_headers)
            buf.partitions.append(partition)
            buf.timestamps.append(timestamp)
            buf.size += size
            future = SendFuture(buf.drain, index, self._send_now, (stored_size(key), stored_size(value), header_bytes))
            if delivery is not None:
                future.add_done_callback(delivery)
            full = buf.size >= self._batch_size and self._transactions is None
        if full:  # (after the topic's batch in flight, if any: a full buffer is as far as sends run ahead)
            self._drain_topic(topic, only=buf.drain)
        return future

    def send_batch(self, topic: str, table: pa.Table | pa.RecordBatch) -> list[BatchMetadata]:
        """Append a whole Arrow table (columns value or the typed fields, optional key, headers,
        timestamp, partition); returns where each partition's run landed (a run too large for one request in
        chunks, each where it landed). A bad row refuses the whole table."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        elif not isinstance(table, pa.Table):
            raise InvalidRecordError(
                f"send_batch takes a pyarrow.Table or RecordBatch, got {type(table).__name__}; build one with "
                "pa.table({'value': [...]}), or send() records one at a time")
        if self._closed:
            raise FabricError("send_batch() on a closed producer; create a new one")
        if self._transactions is not None:
            raise IllegalStateError("send_batch() appends at once, outside any transaction: a transactional producer "
                                    "sends with send() between begin_transaction() and commit_transaction()")
        deadline = self._deadline(time.monotonic())
        meta = self._topic(topic, refresh=True)
        info = meta.info
        batching.check_topic_column(topic, table)
        self._drain_topic(topic)
        now_us = SYSTEM_CLOCK.now_us()
        rows = to_storage(table, info.value_schema, now_us)
        explicit = table.column("partition") if "partition" in table.column_names else None
        batching.check_sizes(topic, rows, meta.max_bytes)
        parts = self._partition(topic, rows.column("key"), explicit, info.partitions)
        return self._appender.by_partition(topic, rows, parts, deadline, meta.max_bytes)

    def _deadline(self, began: float) -> Deadline:
        """The delivery deadline of a send that began at `began` (time.monotonic())."""
        return Deadline.starting(began, self.config["delivery_timeout_ms"], self.config["request_timeout_ms"])

    def _partition(self, topic: str, keys: pa.ChunkedArray, explicit: pa.ChunkedArray | None,
                   num_partitions: int) -> np.ndarray:
        return assign_partitions(topic, keys, explicit, num_partitions, self._sticky)

    def _drain_topic(self, topic: str, only: Drain | None = None, wait: bool = True, in_place: bool = False
                     ) -> bool:
        """Append the topic's buffered records now (if `only` is given, only if it is still buffered), after the
        batch of the topic already being appended, if any: a topic's batches go one at a time, in order, and the
        records sent meanwhile gather into the next (as Kafka's accumulator fills batches while requests are in
        flight). Without `wait` (the linger thread), a topic with a batch in flight is left: the end of that
        append wakes the linger thread. Called without the lock held: the append runs outside it, so send() never
        waits for one. A transactional producer's records leave only with their transaction (commit_transaction).
        `in_place` (a get(timeout) on local files): only a one-record batch, appended here if its partition's lock
        is free at once, else on a thread that waits for it (_append_drained). Whether a batch was taken."""
        with self._lock:
            while True:
                buf = self._buffers.get(topic)
                if self._transactions is not None or (only is not None and (buf is None or buf.drain is not only)):
                    return False
                if topic not in self._draining:
                    break
                if not wait:
                    return False
                self._waiting += 1
                try:
                    self._wake.wait()
                finally:
                    self._waiting -= 1
            if buf is None:  # (nothing buffered: the wait above let the batch in flight end first)
                return False
            if in_place and len(buf.values) != 1:  # (a batch of one record goes to one partition: all or nothing)
                return False
            del self._buffers[topic]
            self._draining[topic] = (buf.drain, len(buf.values))
        self._append_drained(buf, in_place)
        return True

    def _append_drained(self, buf: _Buffer, in_place: bool = False) -> None:
        """Append a batch taken from the buffers (_drain_topic), then let the topic's next one go. `in_place`: if
        its partition's lock is busy (nothing written), the append goes on on a thread that waits for the lock, so
        the caller's own wait ends at its timeout (fabric.storage.lock.without_waiting)."""
        topic, drain = buf.drain.topic, buf.drain
        deadline = self._deadline(buf.created)
        try:  # (each call below is bounded by the deadline: a metadata refresh, each append's request)
            meta = self._topic(topic, within=max(deadline.left(), 0))
            rows, parts = self._buffered_rows(buf, meta.info, self._direct)
            with without_waiting() if in_place else contextlib.nullcontext():
                metas = self._appender.by_partition(topic, rows, parts, deadline, meta.max_bytes)
            drain.partitions, drain.offsets = parts, batching.record_offsets(parts, metas)
        except PartitionBusy:  # (a thread of its own, started only then: it may wait as long as the lock is held)
            threading.Thread(target=self._append_drained, args=(buf,), name="fabric-append", daemon=True).start()
            return
        except BaseException as exc:  # noqa: BLE001 (delivered through every future of the batch)
            drain.error = exc
        with self._lock:
            del self._draining[topic]
            following = self._buffers.get(topic)  # the topic's next batch may go now: wake who sends it
            if self._waiting or (following is not None and following.due < self._linger_wakes_at):
                self._wake.notify_all()
        drain.finish()

    def _send_now(self, drain: Drain, timeout: float | None) -> None:
        """Append the batch of a record whose future is waited on (SendFuture.result), unless it has gone: here,
        or with a `timeout`, by the linger thread (so the wait ends at the timeout, whatever the append does); on
        local files, a one-record batch with a `timeout` here too, unless its partition's lock is busy."""
        if self._transactions is not None and timeout is None:
            raise IllegalStateError("a transactional producer's record is written by commit_transaction(): "
                                    "wait for its future after the commit, or give a timeout")
        if timeout is None:
            self._drain_topic(drain.topic, only=drain)
        elif not (self._appender.cluster.appends_in_process
                  and self._drain_topic(drain.topic, only=drain, wait=False, in_place=True)):
            self._hurry(drain, time.monotonic() + timeout)

    def _buffered_rows(self, buf: _Buffer, info: TopicInfo, direct: bool = False
                       ) -> tuple[pa.Table | pa.RecordBatch | Encoded, np.ndarray]:
        """A buffer's records as stored rows of its topic (`info`), and the partition of each; its drain learns how
        they are stamped (the timestamps its RecordMetadata report). `direct`: an append to a log of this process,
        which takes one record as its message (one_record)."""
        now_us = SYSTEM_CLOCK.now_us()
        buf.drain.stamp(buf.timestamps, now_us // 1000, info.settings["message.timestamp.type"] == "CreateTime")
        if info.value_schema is None:  # plain values, each checked by send(): built straight in their stored types
            return (one_record.plain_stored(buf.values, buf.keys, buf.headers, buf.timestamps, now_us, info, direct),
                    assign_listed(buf.drain.topic, buf.keys, buf.partitions, info.partitions, self._sticky))
        values = typed_rows(buf.values, info.value_schema)
        columns = {
            "timestamp": pa.array([None if t is None else t * 1000 for t in buf.timestamps],
                                  pa.int64()).cast(TIMESTAMP),
            "key": pa.array(buf.keys, pa.binary()),
            "headers": pa.array(buf.headers, HEADERS) if any(buf.headers) else pa.nulls(len(buf.keys), HEADERS)}
        columns.update({f.name: values.field(f.name) for f in info.value_schema})
        rows = to_storage(pa.table(columns), info.value_schema, now_us, values.is_null() if values.null_count else None)
        explicit = pa.chunked_array([pa.array(buf.partitions, pa.int32())])
        return rows, self._partition(buf.drain.topic, rows.column("key"), explicit, info.partitions)

    # -- transactions (Kafka's transactional producer; the state machine is fabric.client.transaction) ----
    def _transactional(self, call: str) -> TransactionManager:
        if self._transactions is None:
            raise IllegalStateError(f"{call}() needs a producer created with transactional_id=... (Kafka's "
                                    "transactional.id)")
        return self._transactions

    def init_transactions(self, timeout: float | None = None) -> None:
        """Start this transactional producer: its next transaction follows the last one its transactional_id
        committed. Refused on a cluster with data nodes (not available there yet)."""
        with self._lock:
            self._transactional("init_transactions").init()

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until commit_transaction() are published together."""
        with self._lock:
            self._transactional("begin_transaction").begin()

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any, timeout: float | None = None) -> None:
        """Commit a consumer group's offsets with this transaction: {TopicPartition: next offset to read} (or
        kafka-python's OffsetAndMetadata values, or confluent-kafka's list of TopicPartition with .offset), for
        the group of `group_metadata` (consumer.consumer_group_metadata(): the commit is fenced as the member's
        own; or a group id, for a group without live members). They become visible with the records."""
        with self._lock:
            self._transactional("send_offsets_to_transaction").add_offsets(offsets, group_metadata)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Publish the transaction's records and offsets at once (one publish: all of them become visible, or none);
        then every record's future resolves with its offset and the callbacks run. ProducerFencedError if another
        producer with the same transactional_id committed this transaction's sequence first (this one wrote nothing and
        is fenced for good); another error means nothing was committed: call abort_transaction(). On `file://` a lock
        another process holds is waited for at most `timeout` seconds (None or negative, as librdkafka's -1:
        transaction_timeout_ms), then RequestTimedOutError names it."""
        wait_s = checks.timeout(checks.unless_forever(timeout, self.config["transaction_timeout_ms"] / 1000),
                                "commit_transaction() timeout")
        with self._lock, self.cluster.lock_waits_within(wait_s):
            manager = self._transactional("commit_transaction")
            manager.require("commit_transaction")
            buffers, self._buffers = self._buffers, {}
            built: list[tuple[_Buffer, np.ndarray, list[tuple[int, int, int]]]] = []
            parts: dict[TopicPartition, list[pa.RecordBatch]] = {}

            def publish(txn: str, offsets: TransactionalOffsets | None) -> Bases | None:
                for topic, buf in buffers.items():
                    meta = self._topic(topic)
                    rows, assigned = self._buffered_rows(buf, meta.info)
                    rows, runs = batching.by_partition(rows, assigned)
                    for p, lo, hi in runs:
                        parts[(topic, p)] = batching.chunks(batching.run(rows, lo, hi), self._batch_size,
                                                            meta.max_bytes)
                    built.append((buf, assigned, runs))
                return self.cluster.publish_transaction(txn, parts, self._codec, offsets,
                                                        self.config["transaction_timeout_ms"])
            try:
                bases = manager.commit(publish)
            except BaseException as exc:
                self._counts.failed(sum(len(buf.values) for buf in buffers.values()))
                fail_all((b.drain for b in buffers.values()), exc)
                raise
            self._counts.sent(*(chunk for chunks in parts.values() for chunk in chunks))
            for buf, assigned, runs in built:
                topic = buf.drain.topic
                metas = [BatchMetadata(topic, p, base, chunk.num_rows) for p, _, _ in runs
                         for base, chunk in zip(bases[(topic, p)], parts[(topic, p)], strict=True)]
                buf.drain.partitions, buf.drain.offsets = assigned, batching.record_offsets(assigned, metas)
                buf.drain.finish()

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop the transaction's records and offsets: nothing of it is ever visible; its futures fail with
        TransactionAbortedError."""
        with self._lock:
            manager = self._transactional("abort_transaction")
            manager.begin_abort()
            buffers, self._buffers = self._buffers, {}
            txn = manager.txn
            manager.aborted()
        fail_all((b.drain for b in buffers.values()), TransactionAbortedError(f"transaction {txn} was aborted: "
                                                                              "this record was not written"))

    # -- linger, flush, close ----------------------------------------------------------------------
    def _ensure_linger_thread(self) -> None:
        if self._linger_thread is None:
            # the thread holds the producer weakly, so a producer nobody holds is collected (and flushed)
            self._linger_thread = threading.Thread(target=_linger_loop, args=(weakref.ref(self), self._wake),
                                                   name="fabric-linger", daemon=True)
            self._linger_thread.start()

    def _due_topics(self) -> list[str] | None:
        """The topics whose batches are due, their linger_ms passed or flushed, and none of theirs in flight; None
        once the producer is closed (what is still buffered then fails)."""
        with self._lock:
            if self._closed:
                buffers, self._buffers = self._buffers, {}
            else:
                now = time.monotonic()
                return [t for t, b in self._buffers.items() if b.due <= now and t not in self._draining]
        fail_all((b.drain for b in buffers.values()), ClientTimeoutError(
            "the producer was closed before this record was sent (close(timeout) ran out); it was not written"))
        return None

    def _until_due(self) -> float:
        """Seconds until the next batch not in flight is due (lock held); 0 if one is due now."""
        now = time.monotonic()
        waits = [b.due - now for t, b in self._buffers.items() if t not in self._draining]
        wait = max(min(waits), 0.0) if waits else self._linger or 0.05
        self._linger_wakes_at = now + wait
        return wait

    def _hurry(self, only: Drain | None, deadline: float) -> list[tuple[Drain, int]] | None:
        """Make the buffered batches (only `only`'s, if given) due now and wake the linger thread to send them;
        their drains and record counts, with those of the batches in flight if `only` is None. None if the lock
        was not free by `deadline`."""
        if not self._lock.acquire(timeout=_left(deadline)):
            return None
        try:
            if self._transactions is not None:  # its records go with commit_transaction()
                return []
            hurried = [b for b in self._buffers.values() if only is None or b.drain is only]
            for buf in hurried:
                buf.due = 0.0
            self._wake.notify()
            return [(buf.drain, len(buf.values)) for buf in hurried] + ([] if only else list(self._draining.values()))
        finally:
            self._lock.release()

    def _purge(self, dropped: BaseException | None) -> list[Drain]:
        """purge(): drop the buffered records (if `dropped`: their futures fail with it); the drains in flight."""
        with self._lock:
            buffers, self._buffers = (self._buffers, {}) if dropped is not None else ({}, self._buffers)
            in_flight = [drain for drain, _ in self._draining.values()]
        if dropped is not None:
            fail_all((b.drain for b in buffers.values()), dropped)
        return in_flight

    def __len__(self) -> int:
        """Records queued or in flight, not yet acknowledged (confluent-kafka's len(producer))."""
        with self._lock:
            return sum(len(b.values) for b in self._buffers.values()) + sum(n for _, n in self._draining.values())

    def __bool__(self) -> bool:
        """True: a producer with nothing queued is a producer still (`if not self.producer:` must not make another)."""
        return True

    def flush(self, timeout: float | None = None) -> int:
        """Send everything buffered and wait until it is appended (or has failed: its futures say so); 0, the
        records left queued (confluent-kafka's answer). With a `timeout` (seconds), ClientTimeoutError if records
        are still unsent after it (kafka-python's flush raises KafkaTimeoutError): they stay queued, and go in the
        background, each within delivery_timeout_ms."""
        if timeout is None:
            with self._lock:
                topics = set(self._buffers) | set(self._draining)
            for topic in sorted(topics):
                self._drain_topic(topic)  # (after its batch in flight, if any)
            return 0
        deadline = time.monotonic() + checks.timeout(timeout, "flush() timeout")
        hurried = self._hurry(None, deadline)
        if hurried is None and not self._buffers and not self._draining:  # (read without the lock)
            return 0  # the lock was busy a moment, but nothing is waiting to be sent
        unsent = None if hurried is None else sum(n for drain, n in hurried if not drain.wait(_left(deadline)))
        if unsent is None or unsent:
            what = "the producer busy with another call" if unsent is None else f"{unsent} record(s) unsent"
            raise ClientTimeoutError(f"flush(timeout={timeout:g}) ran out with {what}; the records stay queued "
                                     "and are sent in the background, each within delivery_timeout_ms: call flush() "
                                     "again to wait for them")
        return 0

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the linger thread. With a `timeout` (seconds), stop waiting after it, as Kafka's
        close(timeout): records still unsent then fail (their futures get ClientTimeoutError) and a warning says
        so; a batch being appended then ends within its delivery_timeout_ms."""
        if self._closed:
            return
        deadline = None if timeout is None else time.monotonic() + checks.timeout(timeout, "close() timeout")
        if self._transactions is not None and self._transactions.state in (TxnState.IN_TRANSACTION,
                                                                           TxnState.ABORTABLE):
            log.warning("producer %r closed with transaction %s open: aborting it", self.config["client_id"],
                        self._transactions.txn)
            self.abort_transaction()
        try:
            self.flush(None if deadline is None else _left(deadline))
        except ClientTimeoutError as exc:
            log.warning("producer %r: close(timeout=%s) gave up: %s", self.config["client_id"], timeout, exc)
        self._closed = True  # (unlocked: the linger thread fails what is still buffered when it next wakes)
        if self._lock.acquire(timeout=-1 if deadline is None else _left(deadline)):
            try:
                self._wake.notify_all()
            finally:
                self._lock.release()
        atexit.unregister(self._at_exit)
        if self._linger_thread is not None and self._linger_thread is not threading.current_thread():
            self._linger_thread.join(timeout=5 if deadline is None else _left(deadline))
        self._appender.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):  # (a constructor that raised left no buffers)
            close_unclosed(self)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _left(deadline: float) -> float:
    """Seconds until `deadline` (time.monotonic()), from 0 to threading.TIMEOUT_MAX (a lock's or an event's most)."""
    return min(max(deadline - time.monotonic(), 0.0), threading.TIMEOUT_MAX)


def _linger_loop(ref: weakref.ref[Producer], wake: threading.Condition) -> None:
    """The linger thread: send each batch when its linger_ms passes, until the producer is closed or gone. It
    holds the producer only while sending: a dropped producer is collected (and flushed)."""
    while True:
        producer = ref()
        due = producer._due_topics() if producer is not None else None
        if producer is None or due is None:
            return
        for topic in due:
            if producer._closed:  # (close(timeout) ran out: what is still buffered fails, next turn)
                break
            producer._drain_topic(topic, wait=False)
        with wake:  # (the wait is worked out under the lock a send notifies under: no wake-up is lost)
            wait = producer._until_due()
            del producer
            if wait > 0:
                wake.wait(wait)
