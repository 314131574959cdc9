"""What a leader and a follower's fetch exchange (Kafka's replica FetchResponse and its delayed fetch): a
partition's answer, the wake-up a held fetch of many partitions waits on (PartitionReplica.watch), and what a
fetch session learns of its partitions between fetches (SessionChanges) and how its epochs go on."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from fabric.common.types import TopicPartition

NO_FRAMES = pa.py_buffer(b"")
MAX_ID = (1 << 31) - 1  # fetch session ids and epochs are int32s, as Kafka's (an epoch wraps back to 1 past it)


def next_epoch(epoch: int) -> int:
    """The fetch session epoch after `epoch`: one more, back to 1 past MAX_ID."""
    return epoch + 1 if epoch < MAX_ID else 1


@dataclass(frozen=True)
class ReplicaFetch:
    """A leader's answer to a follower's fetch: whole frames from the offset asked for (possibly none), and the
    leader's high watermark, log end and log start."""

    frames: pa.Buffer
    high_watermark: int
    log_end: int
    log_start: int


class FetchWaiter:
    """A follower's fetch waiting for frames in any of its partitions (`PartitionReplica.watch`): which woke it;
    `on_wake()` is called at the first wake, on the waking thread (under the partition's lock: it only
    schedules)."""

    def __init__(self, on_wake: Callable[[], None] = lambda: None) -> None:
        self._woken = threading.Event()
        self._on_wake = on_wake
        self.partitions: set[TopicPartition] = set()

    def wake(self, tp: TopicPartition) -> None:
        self.partitions.add(tp)
        if not self._woken.is_set():
            self._woken.set()
            self._on_wake()

    def wait(self, timeout_s: float) -> set[TopicPartition]:
        """The partitions that woke it within `timeout_s` (none: it timed out)."""
        self._woken.wait(timeout_s)
        return set(self.partitions)


class SessionChanges:
    """What a follower's fetch session (fetch_sessions.py) learns of its partitions between two of its fetches,
    told by each partition it joined (PartitionReplica.join_session) on the changing thread, under that
    partition's lock: `wake` for new frames or a change of role (a fetch the session holds is answered), `touch`
    for a high watermark or log start that moved (carried by the session's next answer, worth no wake-up: Kafka's
    delayed fetch). So a fetch looks at the partitions that changed, not at every one the session holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a leaf: taken under partitions' locks, never around them
        self._woken: dict[TopicPartition, None] = {}  # (insertion-ordered: the first woken are served first)
        self._touched: dict[TopicPartition, None] = {}
        self._on_wake: Callable[[], None] | None = None

    def wake(self, tp: TopicPartition) -> None:
        with self._lock:
            self._woken[tp] = None
            on_wake, self._on_wake = self._on_wake, None
        if on_wake is not None:
            on_wake()

    def touch(self, tp: TopicPartition) -> None:
        with self._lock:
            self._touched[tp] = None

    def take(self) -> list[TopicPartition]:
        """The partitions woken or touched since the last take, the woken first; forgotten here."""
        with self._lock:
            woken, touched, self._woken, self._touched = self._woken, self._touched, {}, {}
        return [*woken, *(tp for tp in touched if tp not in woken)]

    def hold(self, on_wake: Callable[[], None]) -> None:
        """Call `on_wake()` once at the next wake, at once if one came since the last take."""
        with self._lock:
            if not self._woken:
                self._on_wake = on_wake
                return
        on_wake()

    def release(self) -> None:
        """The hold is over: no `on_wake()` for it."""
        with self._lock:
            self._on_wake = None
