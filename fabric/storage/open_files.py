"""The files an append writes (the active segment's data and indexes, the watermark), opened per write or kept open
from one append to the next.

Opening and closing four files cost a one-record `file://` append about a sixth of its time (py-spy, 2026-12-05).
Kafka keeps its active segment open; a process here keeps a partition's tail files open only while its appends
follow each other with nothing else in between: a descriptor opened in one hold of the partition lock is used
again in the next hold only if that is the very next one (`PartitionLock.holds`) in the same epoch
(`PartitionLock.epoch`: no other process or lock object took the lock since, and no hold failed part-way).
Anything else (a recovery, a truncation, an index rebuild, a roll by maintenance, another process's append) closes
them first, so a file that was replaced or cut meanwhile is opened again by its path. At most `CAPACITY`
partitions of a process keep files open (least recently written closed first), so open files do not grow with
the partition count. A data node opens per write (`DIRECT`): a file open for writing keeps its filesystem from
being remounted read-only, which is how an operator takes a failing disk out from under a running node.
"""
from __future__ import annotations

import logging
import os
import threading

from fabric.storage.kept_files import KeptFiles
from fabric.storage.lock import PartitionLock

log = logging.getLogger(__name__)

CAPACITY = 8  # partitions per process whose tail files stay open (a few descriptors each)
_PER_LOG = 4  # files one partition keeps open: the active segment, its two indexes, the watermark
_MODE = 0o644


class DirectFiles:
    """Each write opens its file and closes it (`done`) after."""

    def open(self, path: str, flags: int) -> int:
        return os.open(path, flags, _MODE)

    def done(self, fd: int) -> None:
        os.close(fd)

    def appending(self) -> None:
        """The lock's current hold only appends (Log.appending): nothing to keep here."""


DIRECT = DirectFiles()


class OpenFiles(DirectFiles):
    """The tail files of the partition guarded by `lock`, kept open between consecutive holds of it that write
    (see the module's doc). Every use runs under the partition lock, between `open` and `done`; a process-wide
    LRU closes the files of partitions written least recently, but never while they are in use (`_guard`)."""

    def __init__(self, lock: PartitionLock) -> None:
        self.lock = lock
        self._fds: dict[tuple[str, int], int] = {}
        self._epoch, self._hold = -1, -1  # the lock hold that last wrote through these descriptors
        self._appending = (-1, -1)  # the (epoch, hold) its holder said only appends (appending)
        self._guard = threading.Lock()

    def open(self, path: str, flags: int) -> int:
        """A descriptor of `path` opened with `flags`, for the caller alone until `done`."""
        self._guard.acquire()
        try:
            lock = self.lock
            if lock.holds != self._hold or lock.epoch != self._epoch:
                self._begin(lock)
            fd = self._fds.get((path, flags))
            if fd is None:
                fd = os.open(path, flags, _MODE)
                if self._hold >= 0:
                    if len(self._fds) >= _PER_LOG:  # (a roll: the old segment's files go)
                        self.close()
                    self._fds[(path, flags)] = fd
            return fd
        except BaseException:
            self._guard.release()
            raise

    def appending(self) -> None:
        """The lock's current hold (the caller holds it) only appends: writes within it at any depth keep their
        descriptors, as an outermost hold's do."""
        self._appending = (self.lock.epoch, self.lock.holds)

    def _begin(self, lock: PartitionLock) -> None:
        """The first write of a hold: the descriptors kept stay if the previous hold was the one that wrote
        through them; nothing is kept from a hold that is neither the lock's outermost nor one its holder said
        only appends (a write within a larger operation, a publish say, whose next steps to the files are not
        known here). A hold that failed part-way moved the epoch: nothing of it is kept."""
        if self._fds and not (lock.epoch == self._epoch and lock.holds == self._hold + 1):
            self.close()  # something else held the lock between
        if lock.depth == 1 or self._appending == (lock.epoch, lock.holds):
            self._epoch, self._hold = lock.epoch, lock.holds
            _OPEN.used(self)
        else:
            self.close()
            self._epoch, self._hold = -1, -1

    def done(self, fd: int) -> None:
        try:
            if fd not in self._fds.values():  # (one opened for this write alone)
                os.close(fd)
        finally:
            self._guard.release()

    def close(self) -> None:
        """Close every descriptor kept (caller holds `_guard`); the next write opens its file by its path."""
        fds, self._fds = self._fds, {}
        for (path, _), fd in fds.items():
            try:
                os.close(fd)
            except OSError as exc:  # (a local file reports nothing here; a network filesystem may)
                log.warning("closing %s failed: %s", path, exc)

    def close_unless_busy(self) -> bool:
        """Close the descriptors unless a write is using them now; whether they were closed."""
        if not self._guard.acquire(blocking=False):
            return False
        try:
            self.close()
            return True
        finally:
            self._guard.release()

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's threads are gone, so nothing is in use; start with nothing open."""
        self._guard = threading.Lock()
        self.close()


_OPEN: KeptFiles[OpenFiles] = KeptFiles(lambda: CAPACITY)
