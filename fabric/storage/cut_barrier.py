"""Keeping a log's lock-free readers and its truncations apart.

Some walks read a log's files without its lock: a follower's producer-state load reads to the log end (which a
truncation to its leader's end may cut), the scrubber to the high watermark (which an unclean truncation may cut).
Segments are read through shared maps, and on Linux touching a mapped page past a file's end kills the process
(SIGBUS), so no file may shrink under such a walk. Each walk registers (`reading`, which first waits for a cut in
progress to end) and calls `check()` as it goes; a cut (`cutting`, entered under the partition lock) marks itself
pending, so that walks leave at their next check (CutPending, which each takes as the log changing under it), waits
until none is registered, and only then shrinks the file.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator


class CutPending(Exception):
    """A cut of the log is waiting for this walk to leave: the walk stops, and reads the log again later."""


class CutBarrier:
    """The lock-free walks of one log (readers) and its cuts (one at a time, under the partition lock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._cutting = False

    @contextlib.contextmanager
    def reading(self) -> Iterator[CutBarrier]:
        """Registered as a walk for the block (once no cut is in progress); the block calls `check` as it goes."""
        with self._cond:
            self._cond.wait_for(lambda: not self._cutting)
            self._readers += 1
        try:
            yield self
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    def check(self) -> None:
        """CutPending if a cut waits for the walks to leave (a walk calls it before each frame it reads)."""
        if self._cutting:
            raise CutPending()

    @contextlib.contextmanager
    def cutting(self) -> Iterator[None]:
        """The block may shrink the log's files: entered once every registered walk has left."""
        with self._cond:
            self._cutting = True
            self._cond.wait_for(lambda: not self._readers)
        try:
            yield
        finally:
            with self._cond:
                self._cutting = False
                self._cond.notify_all()
