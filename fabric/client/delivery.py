"""What a send() gives back: a future of the record's RecordMetadata, resolved when the batch it was buffered in is
appended (or has failed), with kafka-python's and confluent-kafka's ways to wait for it and to be called back."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from fabric.client.topic_partition import TopicPartition
from fabric.common import checks
from fabric.common.errors import ClientTimeoutError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordMetadata:
    """Where a record landed, and its timestamp in ms since the epoch (kafka-python's `.timestamp`): on a CreateTime
    topic the stored one, given to send() or stamped by the producer; -1 (Kafka's NO_TIMESTAMP) on a LogAppendTime
    topic, whose log stamps the record at the append, a time the append's answer does not carry."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1  # kafka-python's: the key's bytes as sent, -1 for none
    serialized_value_size: int = -1  # the value's, -1 for none or a typed topic's (its columns have no size)
    serialized_header_size: int = -1  # the headers' keys and values, -1 without headers

    @property
    def checksum(self) -> None:
        """kafka-python's: None, as for Kafka's v2 batches (a frame is checked as a whole)."""
        return None

    @property
    def topic_partition(self) -> TopicPartition:
        """kafka-python's RecordMetadata.topic_partition."""
        return TopicPartition(self.topic, self.partition)

    @property
    def log_start_offset(self) -> int:
        """kafka-python's: -1, the append's answer does not carry the log start (end_offsets() and
        beginning_offsets() read it)."""
        return -1


@dataclass(frozen=True)
class BatchMetadata:
    """Where a run of records from send_batch landed: offsets [offset, offset + count)."""

    topic: str
    partition: int
    offset: int
    count: int


DeliveryCallback = Callable[[BaseException | None, "RecordMetadata | None"], Any]


class Drain:
    """The outcome of appending one buffered batch, shared by its records' futures, and the callbacks waiting
    for it: each is called once, when the batch is appended or has failed, or at once if it already was.
    A thread that waits for the outcome before it is known gets an Event to wait on; one that appends the batch
    itself (a send().get()) never needs one."""

    __slots__ = ("topic", "partitions", "offsets", "_given", "_stamped", "error", "finished", "_event", "_waiting",
                 "_guard")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.partitions: np.ndarray | None = None
        self.offsets: np.ndarray | None = None
        self._given: list[int | None] | None = None  # the records' timestamps as sent (see stamp)
        self._stamped = -1
        self.error: BaseException | None = None
        self.finished = False  # the outcome is set
        self._event: threading.Event | None = None
        self._waiting: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` seconds (None: as long as it takes) for the outcome; True once it is set."""
        if self.finished:
            return True
        with self._guard:
            if self.finished:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def when_done(self, call: Callable[[], None]) -> None:
        with self._guard:
            if not self.finished:
                self._waiting.append(call)
                return
        _call_back(call)

    def stamp(self, given: list[int | None], stamped_ms: int, create_time: bool) -> None:
        """How the batch's rows are stamped as they are built: each record's timestamp as sent (`given`, in ms, kept
        as it is: timestamp() reads one), else the producer's `stamped_ms`; on a LogAppendTime topic (not
        `create_time`), by the log instead."""
        self._given, self._stamped = given if create_time else None, stamped_ms

    def timestamp(self, index: int) -> int:
        """The stored timestamp (ms) of the batch's record `index`; -1 where the log stamps it (LogAppendTime)."""
        if self._given is None:
            return -1
        given = self._given[index]
        return self._stamped if given is None else given

    def finish(self) -> None:
        """Mark the outcome set, wake the threads waiting for it, then run the callbacks waiting for it."""
        with self._guard:
            self.finished = True
            event, waiting, self._waiting = self._event, self._waiting, []
        if event is not None:
            event.set()
        for call in waiting:
            _call_back(call)


def fail_all(drains: Iterable[Drain], error: BaseException) -> None:
    """Fail every future of these batches with `error` (their callbacks run)."""
    for drain in drains:
        drain.error = error
        drain.finish()


def _call_back(call: Callable[[], None]) -> None:
    """Run a user's callback; its exception is logged, never raised into the producer (as kafka-python does)."""
    try:
        call()
    except Exception:  # noqa: BLE001 (user code: one failing callback must not fail the others or the send)
        log.exception("a delivery callback raised")


class SendFuture:
    """The result of one send(): `.get()` / `.result()` wait for the batch and return RecordMetadata;
    `add_callback` / `add_errback` (kafka-python's names) run when it is known."""

    __slots__ = ("_drain", "_index", "_send_now", "_sizes")

    def __init__(self, drain: Drain, index: int, send_now: Callable[[Drain, float | None], None],
                 sizes: tuple[int, int, int] = (-1, -1, -1)) -> None:
        self._drain, self._index, self._send_now, self._sizes = drain, index, send_now, sizes

    def done(self) -> bool:
        return self._drain.finished

    is_done = property(done)  # kafka-python's attribute

    def succeeded(self) -> bool:
        return self.done() and self._drain.error is None

    def failed(self) -> bool:
        return self.done() and self._drain.error is not None

    def exception(self) -> BaseException | None:
        """The send's error once it is known (None while pending or if it succeeded)."""
        return self._drain.error if self.done() else None

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the record's batch to be appended (sending it now if needed); ClientTimeoutError (a
        TimeoutError) if its outcome is not known within `timeout` seconds: the record stays queued."""
        deadline = None if timeout is None else time.monotonic() + checks.timeout(timeout, "result() timeout")
        if not self._drain.finished:
            self._send_now(self._drain, timeout)
        if not self._drain.wait(None if deadline is None else max(deadline - time.monotonic(), 0)):
            raise ClientTimeoutError(f"the record was not appended within result(timeout={timeout:g}); it stays "
                                     "queued and is sent within delivery_timeout_ms: wait for it again")
        if self._drain.error is not None:
            raise self._drain.error
        return self._metadata()

    get = result  # kafka-python's FutureRecordMetadata.get(timeout)

    def _metadata(self) -> RecordMetadata:
        drain = self._drain
        assert drain.partitions is not None and drain.offsets is not None  # set with done, unless error is
        index = self._index
        return RecordMetadata(drain.topic, int(drain.partitions[index]), int(drain.offsets[index]),
                              drain.timestamp(index), *self._sizes)

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SendFuture:
        """Call fn(*args, metadata, **kwargs) once the record is appended (not if the send fails)."""
        self._drain.when_done(lambda: None if self._drain.error else fn(*args, self._metadata(), **kwargs))
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> SendFuture:
        """Call fn(*args, error, **kwargs) if the send fails."""
        self._drain.when_done(lambda: fn(*args, self._drain.error, **kwargs) if self._drain.error else None)
        return self

    def add_done_callback(self, on_delivery: DeliveryCallback) -> SendFuture:
        """Call on_delivery(error, metadata) when the outcome is known: (None, metadata) or (error, None), as
        confluent-kafka's on_delivery."""
        self._drain.when_done(lambda: on_delivery(self._drain.error, None if self._drain.error else
                                                  self._metadata()))
        return self
