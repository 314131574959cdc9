"""Exclusive locks across processes (flock): a partition's (appends, rolls and recovery hold it), and a process's
claim on a whole data directory (`claim`)."""
from __future__ import annotations

import contextvars
import fcntl
import os
import random
import threading
import time
from types import TracebackType
from typing import Callable

from fabric.common.errors import RequestTimedOutError
from fabric.storage.kept_files import KeptFiles

TOKEN_SIZE = 8
_tokens = random.Random()  # its own generator: a program seeding `random` cannot make two holders' tokens alike
os.register_at_fork(after_in_child=_tokens.seed)  # nor can a forked child repeat its parent's


# whether this thread's partition locks are taken only if free at once (without_waiting)
_NO_WAIT: contextvars.ContextVar[bool] = contextvars.ContextVar("fabric_lock_no_wait", default=False)
# when this thread's waits for a lock held elsewhere end (time.monotonic(); None: never; waiting_until)
_WAIT_UNTIL: contextvars.ContextVar[float | None] = contextvars.ContextVar("fabric_lock_wait_until", default=None)
POLL_S = 0.02  # the longest pause between two looks at a lock file another process holds, in a bounded wait
# the longest a server's request waits for a lock (for_a_request): Kafka's request.timeout.ms default, past which no
# client waits for its answer (a write done later would be one its client already counted as failed)
REQUEST_WAIT_S = 30.0


class PartitionBusy(Exception):
    """A partition lock taken `without_waiting` was held by another thread or process: nothing was done under
    it. (Not a FabricError: no caller answers it; the one that asked not to wait does the work where it may.)"""


class without_waiting:  # noqa: N801 (used as a function: `with without_waiting():`)
    """Within the block, this thread takes a partition lock it does not hold already only if it is free at once,
    else PartitionBusy: a caller bounded by its own deadline (a producer's get(timeout)) appends in place, or hands
    the append to a thread that may wait. A class, not a generator context manager: every send().get() on local
    files enters one."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _NO_WAIT.set(True)

    def __exit__(self, *exc_info: object) -> None:
        _NO_WAIT.reset(self._token)


class waiting_until:  # noqa: N801 (used as a function: `with waiting_until(deadline):`)
    """Within the block, this thread waits for a partition lock (or the metadata version's) held by another thread
    or process only until `deadline` (time.monotonic(); an enclosing block's if sooner), then RequestTimedOutError
    naming the holder: a process paused (SIGSTOP) or stuck while it holds the lock stalls a caller bounded by its
    own timeout (a producer's request_timeout_ms, a commit) no longer than that."""

    __slots__ = ("_deadline", "_token")

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __enter__(self) -> None:
        outer = _WAIT_UNTIL.get()
        self._token = _WAIT_UNTIL.set(self._deadline if outer is None else min(outer, self._deadline))

    def __exit__(self, *exc_info: object) -> None:
        _WAIT_UNTIL.reset(self._token)


def for_a_request() -> waiting_until:
    """Bound this thread's lock waits within the block to REQUEST_WAIT_S from now (a server serving a request: a
    process paused while it holds a partition's lock in the server's directory holds up a request no longer)."""
    return waiting_until(time.monotonic() + REQUEST_WAIT_S)


def wait_deadline() -> float | None:
    """When this thread's waits for a lock end (waiting_until), None if they do not."""
    return _WAIT_UNTIL.get()


def holders(path: str) -> list[int]:
    """The processes holding a lock on the file at `path` (from /proc/locks, Linux; [] where it cannot tell)."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; a waiter's line has "->"
        fields = line.split()
        if "->" not in fields and len(fields) > 5 and fields[5].endswith(f":{inode}") and fields[4].isdigit():
            found.append(int(fields[4]))
    return sorted(set(found))


def wait_ended(path: str, waited_s: float, holder: str | None = None) -> RequestTimedOutError:
    """The error of a wait for the lock at `path` that ended at its deadline after `waited_s`: who holds it (or
    `holder`), and what to do."""
    advice = ""
    if holder is None:
        pids = ", ".join(map(str, holders(path)))
        holder = f"process {pids}" if pids else "another process"
        advice = (f" (if it is stopped, resume it: kill -CONT {pids or '<pid>'}; a process that ends frees its "
                  "locks)")
    return RequestTimedOutError(f"the lock {path} was not free within {waited_s:.3g} s: {holder} holds it{advice}; "
                                "nothing was done under it, retry once it is free")


def poll_until(take: Callable[[], None], path: str, deadline: float) -> None:
    """`take()` (which raises BlockingIOError while another holds the lock at `path`) until it succeeds, looking
    again at growing pauses (at most POLL_S); RequestTimedOutError (wait_ended) once `deadline` passes."""
    began, pause = time.monotonic(), 0.0005
    while True:
        try:
            take()
            return
        except BlockingIOError:
            now = time.monotonic()
            if now >= deadline:
                raise wait_ended(path, now - began) from None
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, POLL_S)


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


def replaced(fd: int, path: str) -> bool:
    """Whether another file is at `path` than the one the claim `fd` locked: its directory was deleted and made
    again, and another process may hold the new file's lock while this one holds the old's (an flock is on the
    file, not the name). A `path` that is gone is not replaced: nothing else claimed it."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (found.st_dev, found.st_ino) != (own.st_dev, own.st_ino)


class PartitionLock:
    """Re-entrant within a thread, exclusive across threads and processes; released if the holder dies.

    The lock file holds a token of its latest holder: whoever takes the lock after someone else held it writes a
    fresh random one, first. So `epoch` changes each time this object takes the lock after anything else may have
    taken it since its own previous hold (another process, another lock object over the same file, a holder that
    died, a delete and re-create of the partition: a new file holds no token of ours), and when one of its own
    holds fails part-way. What a holder learnt of the partition's files in a hold of the current epoch still
    holds, without reading them again (Log.sync_tail). `holds` counts this object's holds (outermost takes), so a
    holder can tell whether anything else held the lock since its own last hold (open_files).

    With `keep_file`, the lock file stays open between holds, read-only (so it never keeps a filesystem from being
    remounted read-only), and is opened again if it was removed meanwhile; at most KEPT_FILES locks of a process
    keep theirs open, least recently taken closed first. A forked child opens its own: a descriptor shared with
    the parent would share its flock.
    """

    def __init__(self, path: str, keep_file: bool = False) -> None:
        self.path = path
        self.keep_file = keep_file
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None  # the lock file, while held (and between holds, with keep_file)
        self._token: bytes | None = None  # what the file held when this object last took the lock (None: not trusted)
        self._owner: int | None = None  # the thread holding it
        self.epoch = 0
        self.holds = 0

    @property
    def depth(self) -> int:
        """How many times the holder entered the lock (1: this is its outermost hold); 0 if no one holds it."""
        return self._depth

    @property
    def held(self) -> bool:
        """True if the calling thread holds the lock."""
        return self._depth > 0 and self._owner == threading.get_ident()

    def __enter__(self) -> PartitionLock:
        wait = may_wait()
        until = _WAIT_UNTIL.get() if wait else None
        if until is None:
            if not self._thread_lock.acquire(blocking=wait):
                raise PartitionBusy(f"{self.path} is held by another thread")
        else:
            began = time.monotonic()
            if not self._thread_lock.acquire(timeout=min(max(until - began, 0), threading.TIMEOUT_MAX)):
                pids = holders(self.path)  # (the thread may itself wait for another process: that one is named)
                raise wait_ended(self.path, time.monotonic() - began,
                                 None if pids and os.getpid() not in pids else "another thread of this process")
        if self._depth == 0:
            try:  # (a read-only directory fails here or at the token: the caller decides what to do unlocked)
                if until is None:
                    self._lock_file(fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                else:
                    poll_until(lambda: self._lock_file(fcntl.LOCK_EX | fcntl.LOCK_NB), self.path, until)
            except BaseException as exc:
                self._thread_lock.release()
                if isinstance(exc, BlockingIOError):
                    raise PartitionBusy(f"{self.path} is held by another process") from None
                raise
            self._owner = threading.get_ident()
            self.holds += 1
        self._depth += 1
        return self

    def _lock_file(self, operation: int) -> None:
        """flock the lock file and take it (_take); on failure nothing is locked."""
        while True:
            fd, kept = self._fd, self._fd is not None
            if fd is None:
                fd = os.open(self.path, (os.O_RDONLY if self.keep_file else os.O_RDWR) | os.O_CREAT, 0o644)
                self._fd = fd
                if self.keep_file:
                    _KEPT.used(self)
            try:
                fcntl.flock(fd, operation)
                try:
                    if kept and os.fstat(fd).st_nlink == 0:  # removed since (its partition deleted): the one there now
                        self._close_file()
                        continue
                    self._take(fd)
                except BaseException:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    raise
            except BaseException as exc:
                if not (self.keep_file and isinstance(exc, BlockingIOError)):
                    self._close_file()
                raise
            return

    def _take(self, fd: int) -> None:
        """Compare the file's token with ours; unless they match, count a new epoch and write a fresh token (before
        anything else is written)."""
        seen = os.pread(fd, TOKEN_SIZE, 0)
        mine, self._token = self._token, None
        if mine is not None and seen == mine:  # no one took it since our last hold: nothing to write
            self._token = mine
            return
        self.epoch += 1
        token = fresh_token()
        out = os.open(self.path, os.O_WRONLY) if self.keep_file else fd  # (the kept descriptor is read-only)
        try:
            if os.pwrite(out, token, 0) != TOKEN_SIZE:
                raise OSError(f"short write of the lock token {self.path}")
        finally:
            if out != fd:
                os.close(out)
        self._token = token

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._depth -= 1
        if exc_type is not None:  # a hold that failed part-way: what comes next reads the files again
            self._token = None
            self.epoch += 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            if not self.keep_file:
                self._close_file()
            self._owner = None
        self._thread_lock.release()

    def _close_file(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def close_unless_busy(self) -> bool:
        """Close the kept lock file unless the lock is held or being taken now; whether it was closed."""
        if not self._thread_lock.acquire(blocking=False):
            return False
        try:
            if self._depth:  # (held by the calling thread itself, further out)
                return False
            self._close_file()
            return True
        finally:
            self._thread_lock.release()

    def forget_after_fork(self) -> None:
        """In a forked child: close the parent's descriptor without unlocking it (a lock the parent holds stays
        held by it); the child's holds open their own."""
        if self._depth == 0:
            self._close_file()


KEPT_FILES = 64  # locks of a process whose files stay open between holds (one read-only descriptor each)
_KEPT: KeptFiles[PartitionLock] = KeptFiles(lambda: KEPT_FILES)
