"""Walks of every frame of a log that hand the interpreter lock over often: `scan.frame_headers` (the producer
state, the cleaner's producers), a transaction index or a segment's indexes rebuilt, recovery's walk, the
cleaner's walks of the records.

Such a walk is mostly Python, a few µs a frame: a second or more for a big log. Without hand-overs, every other
thread of the process that blocks in a system call (a server's event loop, at each send and receive) waits for
the interpreter's switch interval, 5 ms, to run again, and a request that makes a few system calls waits that
many times. Handing over costs a system call that sleeps the kernel's timer slack (55 µs here), and more where
another thread takes the lock, so it is made at most every HAND_OVER_S.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
HAND_OVER_S = 0.0005  # the longest stretch a paced pass keeps the interpreter lock (a tenth of the switch interval)


class Pacer:
    """Called once per item of a walk: hands the interpreter lock over (`time.sleep(0)`) whenever HAND_OVER_S
    passed since the last hand-over (or since the pacer was made)."""

    def __init__(self) -> None:
        self._clock = time.perf_counter
        self._last = self._clock()

    def __call__(self) -> None:
        if self._clock() - self._last >= HAND_OVER_S:
            time.sleep(0)
            self._last = self._clock()


def paced(items: Iterable[T], check: Callable[[], None] | None = None) -> Iterator[T]:
    """`items`, with a Pacer called before each, and `check()` (a lock-free walk's cut_barrier check) after each
    is made, before the next is read."""
    pace = Pacer()
    for item in items:
        pace()
        yield item
        if check is not None:
            check()
