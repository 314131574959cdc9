"""Exclusive locks across processes (flock): a partition's (appends, rolls and recovery hold it), and a process's
claim on a whole data directory (`claim`)."""
from __future__ import annotations

import fcntl
import os
import random
import resource
import threading
import weakref
from types import TracebackType
from typing import Callable

TOKEN_SIZE = 8


def descriptor_share(most: int) -> int:
    """How many descriptors a process may keep open for one purpose: `most`, or an eighth of its soft
    RLIMIT_NOFILE if that is less (so a process under `ulimit -n 256` still serves thousands of partitions)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return most if soft == resource.RLIM_INFINITY else max(min(most, soft // 8), 0)


MAX_KEPT_LOCKS = descriptor_share(256)  # lock files a process keeps open between holds
_tokens = random.Random()  # its own generator: a program seeding `random` cannot make two holders' tokens alike
os.register_at_fork(after_in_child=_tokens.seed)  # nor can a forked child repeat its parent's


def fresh_token() -> bytes:
    """TOKEN_SIZE random bytes, told apart from any other process's or holder's."""
    return _tokens.getrandbits(8 * TOKEN_SIZE).to_bytes(TOKEN_SIZE, "little")


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
    """Re-entrant within a thread, exclusive across threads and processes; released if the holder dies.

    The lock file holds a token of its latest holder: whoever takes the lock writes a fresh random one, first. So
    `epoch` changes each time this object takes the lock after anything else may have taken it since its own
    previous hold (another process, another lock object over the same file, a holder that died, a delete and
    re-create of the partition: a new file holds no token of ours), and when one of its own holds fails part-way.
    What a holder learnt of the partition's files in a hold of the current epoch still holds, without reading
    them again (Log.sync_tail).

    Between holds the lock file stays open, unlocked (at most MAX_KEPT_LOCKS per process, and never in a forked
    child, which would share its flock): the next hold locks it again unless it was deleted meanwhile (then the
    file at the path is opened, as the first hold did).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None  # the lock file, locked, while held
        self._kept: int | None = None  # the lock file, unlocked, between holds
        self._counted = False  # its descriptor (kept, or held after being kept) counts against MAX_KEPT_LOCKS
        self._token: bytes | None = None  # what this object wrote when it last took the lock (None: not trusted)
        self._owner: int | None = None  # the thread holding it
        self.epoch = 0

    @property
    def held(self) -> bool:
        """True if the calling thread holds the lock."""
        return self._depth > 0 and self._owner == threading.get_ident()

    def __enter__(self) -> PartitionLock:
        self._thread_lock.acquire()
        if self._depth == 0:
            try:  # (an error opening it, e.g. a read-only directory: the caller decides what to do without the lock)
                fd = self._locked()
            except BaseException:
                self._thread_lock.release()
                raise
            try:
                self._take(fd)
            except BaseException:
                self._close(fd)
                self._thread_lock.release()
                raise
            self._fd, self._owner = fd, threading.get_ident()
        self._depth += 1
        return self

    def _locked(self) -> int:
        """The lock file, open and flocked: the descriptor kept from the last hold if its file was not deleted
        since, else the file at the path."""
        fd, self._kept = self._kept, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_nlink:
                    return fd
            except BaseException:
                self._close(fd)
                raise
            self._close(fd)  # deleted (and maybe created again): lock the file there now
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _take(self, fd: int) -> None:
        """Compare the file's token with ours, then write a fresh one (before anything else is written)."""
        seen = os.pread(fd, TOKEN_SIZE, 0)
        mine, self._token = self._token, None
        if mine is None or seen != mine:
            self.epoch += 1
        token = fresh_token()
        if os.pwrite(fd, token, 0) != TOKEN_SIZE:
            raise OSError(f"short write of the lock token {self.path}")
        self._token = token

    def if_free(self, action: Callable[[], None]) -> bool:
        """Run `action` now unless another thread of this process holds the lock (not waiting for it, and
        taking no flock); True if it ran."""
        if not self._thread_lock.acquire(blocking=False):
            return False
        try:
            action()
        finally:
            self._thread_lock.release()
        return True

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._depth -= 1
        if exc_type is not None:  # a hold that failed part-way: what comes next reads the files again
            self._token = None
            self.epoch += 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            if exc_type is None and (self._counted or _KEPT_LOCKS.take(self)):
                self._kept, self._counted = self._fd, True
            else:
                self._close(self._fd)
            self._fd = self._owner = None
        self._thread_lock.release()

    def forget_kept(self) -> None:
        """Close the lock file kept between holds (a forked child's copy of it, or one the object is dropped with)."""
        fd, self._kept = self._kept, None
        if fd is not None:
            self._close(fd)

    def _close(self, fd: int) -> None:
        """Close a descriptor of the lock file, no longer counted as kept."""
        os.close(fd)
        if self._counted:
            self._counted = False
            _KEPT_LOCKS.release(self)

    def __del__(self) -> None:
        if getattr(self, "_kept", None) is not None:
            self.forget_kept()


class _KeptLocks:
    """The lock objects keeping their file open between holds, at most MAX_KEPT_LOCKS (the rest close it)."""

    def __init__(self) -> None:
        self._locks: weakref.WeakSet[PartitionLock] = weakref.WeakSet()
        self._guard = threading.RLock()  # (re-entrant: a lock collected while this thread counts drops its file)

    def take(self, lock: PartitionLock) -> bool:
        """Count `lock` as keeping its file; False if MAX_KEPT_LOCKS already do."""
        with self._guard:
            if len(self._locks) >= MAX_KEPT_LOCKS:
                return False
            self._locks.add(lock)
            return True

    def release(self, lock: PartitionLock) -> None:
        with self._guard:
            self._locks.discard(lock)

    def after_fork_in_child(self) -> None:
        """Close every kept lock file: the child's descriptor shares the parent's flock, so it cannot exclude it."""
        self._guard = threading.RLock()
        for lock in list(self._locks):
            lock.forget_kept()


_KEPT_LOCKS = _KeptLocks()
os.register_at_fork(after_in_child=_KEPT_LOCKS.after_fork_in_child)
