"""Exclusive locks across processes (flock): a partition's (appends, rolls and recovery hold it), and a process's
claim on a whole data directory (`claim`)."""
from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
import random
import threading
from types import TracebackType
from typing import Iterator

TOKEN_SIZE = 8
_tokens = random.Random()  # its own generator: a program seeding `random` cannot make two holders' tokens alike
os.register_at_fork(after_in_child=_tokens.seed)  # nor can a forked child repeat its parent's


# whether this thread's partition locks are taken only if free at once (without_waiting)
_NO_WAIT: contextvars.ContextVar[bool] = contextvars.ContextVar("fabric_lock_no_wait", default=False)


class PartitionBusy(Exception):
    """A partition lock taken `without_waiting` was held by another thread or process: nothing was done under
    it. (Not a FabricError: no caller answers it; the one that asked not to wait does the work where it may.)"""


@contextlib.contextmanager
def without_waiting() -> Iterator[None]:
    """Within the block, this thread takes a partition lock it does not hold already only if it is free at once,
    else PartitionBusy: a caller bounded by its own deadline (a producer's get(timeout)) appends in place, or hands
    the append to a thread that may wait."""
    token = _NO_WAIT.set(True)
    try:
        yield
    finally:
        _NO_WAIT.reset(token)


def may_wait() -> bool:
    """Whether this thread may wait for a lock of a partition's writes (False within without_waiting: other such
    locks, a producer's per-partition order, raise PartitionBusy instead, as a partition lock does)."""
    return not _NO_WAIT.get()


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
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._token: bytes | None = None  # what this object wrote when it last took the lock (None: not trusted)
        self._owner: int | None = None  # the thread holding it
        self.epoch = 0

    @property
    def held(self) -> bool:
        """True if the calling thread holds the lock."""
        return self._depth > 0 and self._owner == threading.get_ident()

    def __enter__(self) -> PartitionLock:
        wait = may_wait()
        if not self._thread_lock.acquire(blocking=wait):
            raise PartitionBusy(f"{self.path} is held by another thread")
        if self._depth == 0:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except BaseException:  # e.g. a read-only directory: the caller decides what to do without the lock
                self._thread_lock.release()
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._take(fd)
            except BaseException as exc:
                os.close(fd)
                self._thread_lock.release()
                if isinstance(exc, BlockingIOError):
                    raise PartitionBusy(f"{self.path} is held by another process") from None
                raise
            self._fd, self._owner = fd, threading.get_ident()
        self._depth += 1
        return self

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

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._depth -= 1
        if exc_type is not None:  # a hold that failed part-way: what comes next reads the files again
            self._token = None
            self.epoch += 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = self._owner = None
        self._thread_lock.release()
