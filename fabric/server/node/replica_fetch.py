"""What a leader and a follower's fetch exchange (Kafka's replica FetchResponse and its delayed fetch): a
partition's answer, and the wake-up a held fetch of many partitions waits on (PartitionReplica.watch)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from fabric.common.types import TopicPartition

NO_FRAMES = pa.py_buffer(b"")


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
