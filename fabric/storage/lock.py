"""Exclusive locks across processes (flock): a partition's (appends, rolls and recovery hold it), and a process's
claim on a whole data directory (`claim`)."""
from __future__ import annotations

import fcntl
import os
import threading
from types import TracebackType


def claim(path: str) -> int | None:
    """Lock `path` (created if need be) exclusively without waiting, until the returned descriptor is closed or the
    process ends; None if another process holds it. The descriptor is read-only: a claim writes nothing, and a
    filesystem with a file open for writing cannot be remounted read-only."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class PartitionLock:
    """Re-entrant within a thread, exclusive across threads and processes; released if the holder dies."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def __enter__(self) -> PartitionLock:
        self._thread_lock.acquire()
        if self._depth == 0:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except BaseException:  # e.g. a read-only directory: the caller decides what to do without the lock
                self._thread_lock.release()
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                self._thread_lock.release()
                raise
            self._fd = fd
        self._depth += 1
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        self._thread_lock.release()
