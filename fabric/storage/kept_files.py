"""File descriptors a writer keeps open between a partition's appends, and the bound on how many a process keeps.

An append that trusts this process's view of the tail (LogTail.trusted_tail: the partition lock held, nobody
else took it since) writes the active segment, its indexes and the watermark through descriptors kept from the
appends before it, instead of opening and closing each file every time. A kept descriptor is used only in the
lock epoch it was opened in, through the same lock object: once another holder may have replaced or deleted the
file, it is closed and the file opened again by path. An object that replaces, cuts or deletes its own file
in this process (an index rebuilt, a segment deleted) closes its descriptor first (KeptFile.close).

A process keeps at most MAX_KEPT descriptors (least recently opened closed first; fewer under a low
RLIMIT_NOFILE, lock.descriptor_share), so one writing thousands of partitions never runs out of them; a
descriptor is only closed by another thread while its partition's lock is free (PartitionLock.if_free), so no
append loses the file it is writing.
"""
from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict

from fabric.storage.lock import PartitionLock, descriptor_share

MAX_KEPT = descriptor_share(256)


class KeptFile:
    """One file (`path`, opened with `flags`) of a partition, its descriptor kept between appends."""

    __slots__ = ("path", "flags", "_fd", "_lock", "_epoch")

    def __init__(self, path: str, flags: int) -> None:
        self.path = path
        self.flags = flags
        self._fd: int | None = None
        self._lock: PartitionLock | None = None  # the lock held when it was opened, and that lock's epoch
        self._epoch = -1

    def fd(self, lock: PartitionLock) -> int:
        """A descriptor of the file for a writer holding `lock` whose view of the tail is trusted: the kept one if
        it was opened in this epoch of this lock, else the file opened again by path (and kept)."""
        fd = self._fd
        if fd is not None and self._lock is lock and self._epoch == lock.epoch:
            return fd
        self.close()
        fd = self._fd = os.open(self.path, self.flags, 0o644)
        self._lock, self._epoch = lock, lock.epoch
        KEPT.opened(self)
        return fd

    @property
    def lock(self) -> PartitionLock | None:
        return self._lock

    def close(self) -> None:
        """Close the kept descriptor, if any (the file is about to be replaced, cut or deleted, or is stale)."""
        fd, self._fd, self._lock = self._fd, None, None
        if fd is not None:
            KEPT.closed(self)
            os.close(fd)


class KeptFiles:
    """The process's kept descriptors, at most `capacity` of them: opening one more closes the oldest whose
    partition lock no other thread holds (one in use stays open, over the bound for a while)."""

    def __init__(self, capacity: int = MAX_KEPT) -> None:
        self.capacity = capacity
        self._open: OrderedDict[int, KeptFile] = OrderedDict()
        self._guard = threading.Lock()

    def opened(self, kept: KeptFile) -> None:
        with self._guard:
            self._open[id(kept)] = kept
            over = len(self._open) - self.capacity
            victims = list(itertools.islice((f for f in self._open.values() if f is not kept), max(over, 0)))
        for victim in victims:
            lock = victim.lock
            if lock is not None:
                lock.if_free(victim.close)

    def closed(self, kept: KeptFile) -> None:
        with self._guard:
            self._open.pop(id(kept), None)

    def after_fork_in_child(self) -> None:
        """Close every kept descriptor: a forked child opens its own."""
        self._guard = threading.Lock()
        for kept in list(self._open.values()):
            kept.close()

    def __len__(self) -> int:
        return len(self._open)


KEPT = KeptFiles()
os.register_at_fork(after_in_child=KEPT.after_fork_in_child)
