"""The version of a metadata database that many processes share: a file beside it whose 8-byte token every write
transaction replaces, so each process may cache what it read (a topic's metadata) and trust it while the token
is the one it read under, at the cost of reading 8 mapped bytes.

A writer takes the file's exclusive flock, writes a fresh token marked in flight (its first byte odd), runs its
transaction, then writes a fresh settled token (first byte even) and lets go. A reader takes no lock, so a reader
paused (SIGSTOP) at any moment stalls nobody: it notes the token before it reads the database (settled()) and
keeps what it read only if the token is still that one after (current()), which no write can leave so. A token
marked in flight whose writer died (no process holds the flock) is settled by the next reader that finds it. A
writer waits for the lock at most WRITE_WAIT_S (less within storage.lock.waiting_until; not at all within
without_waiting), then fails naming the process that holds it: a writer paused mid-transaction stalls others no
longer than that.

A reader's map is of the file it opened: were the file removed (an operator clearing the directory of what
looks like a stray file), writers would make a new one that the map never shows, and readers would trust what
they cached forever. So a reader looks at the file's identity every RECHECK_S and maps the one there now if it
changed: a removal is noticed within that time.
"""
from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import threading
import time
from typing import Iterator

from fabric.storage.lock import TOKEN_SIZE, PartitionBusy, fresh_token, may_wait, poll_until, wait_deadline

log = logging.getLogger(__name__)
RECHECK_S = 0.05  # how often a reader looks whether the file it mapped is still the one at its path
WRITE_WAIT_S = 60.0  # how long a writer waits for the lock another process holds (SQLite's busy timeout, beside it)


class _Depth(threading.local):
    """A thread's depth of writes (a nested one takes no second flock)."""

    depth = 0


class MetadataVersion:
    """The token file at `path` (created if missing). Where it cannot be made or mapped (a read-only
    directory), there is nothing to trust: current() is None and readers read the database every time."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._writing = _Depth()
        self._map: mmap.mmap | None = None
        self._identity = (-1, -1)  # the mapped file's (device, inode)
        self._recheck_at = time.monotonic() + RECHECK_S
        try:
            self._map = self._mapped()
        except OSError as exc:
            log.info("metadata version %s cannot be made or mapped (%s): metadata is read from the database on "
                     "every call", path, exc.strerror)

    def _mapped(self) -> mmap.mmap:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            st = os.fstat(fd)
            self._identity = (st.st_dev, st.st_ino)
            if st.st_size < TOKEN_SIZE:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    if os.fstat(fd).st_size < TOKEN_SIZE:  # (another process may have filled it meanwhile)
                        os.pwrite(fd, _settled(fresh_token()), 0)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)  # (a map holds the open file, so closing would not unlock it)
            return mmap.mmap(fd, TOKEN_SIZE, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def current(self) -> bytes | None:
        """The token now (None: caching is off)."""
        if self._map is None:
            return None
        if time.monotonic() >= self._recheck_at:
            self._recheck()
            if self._map is None:
                return None
        return self._map[:TOKEN_SIZE]

    def _recheck(self) -> None:
        """Map the file at the path if it is not the one mapped (removed, replaced); caching goes off if it cannot
        be made or mapped (a read-only directory)."""
        self._recheck_at = time.monotonic() + RECHECK_S
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._identity:
                return
        except FileNotFoundError:
            pass
        except OSError:
            return  # (the directory cannot be looked at now: keep the map; writers cannot write either)
        log.warning("metadata version %s is not the file this process mapped (removed or replaced): mapping the one "
                    "there now", self.path)
        try:
            self._map = self._mapped()
        except OSError as exc:
            log.warning("metadata version %s cannot be made or mapped again (%s): metadata is read from the "
                        "database on every call", self.path, exc.strerror)
            self._map = None

    def settled(self) -> bytes | None:
        """The token to cache what is read next with, if current() is still it after the read; None while a write
        is in flight (in this thread, or its token showing), or with caching off. A token in flight whose writer
        is gone is settled here."""
        if self._writing.depth:
            return None
        token = self.current()
        if token is None or not token[0] & 1:
            return token
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (held for two syscalls, only after a writer died)
            if os.pread(fd, TOKEN_SIZE, 0) == token:
                log.info("metadata version %s: a writer died mid-transaction; its version is settled", self.path)
                os.pwrite(fd, _settled(fresh_token()), 0)
        except BlockingIOError:  # the writer is alive: its transaction is in flight
            pass
        finally:
            os.close(fd)
        return None

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A write transaction runs inside the block: the token is replaced first, under the exclusive lock held
        until the block ends. OSError (a StorageError to the caller) if the token cannot be written: the write
        must not happen where other processes would not see it."""
        depth = self._writing.depth
        if depth:
            self._writing.depth = depth + 1
            try:
                yield
            finally:
                self._writing.depth = depth
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not may_wait():  # (a producer's append in place: it goes on a thread that may wait instead)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise PartitionBusy(f"{self.path} is held by another process") from None
            else:
                until, limit = wait_deadline(), time.monotonic() + WRITE_WAIT_S
                poll_until(lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB), self.path,
                           limit if until is None else min(until, limit))
            if os.pwrite(fd, _in_flight(fresh_token()), 0) != TOKEN_SIZE:
                raise OSError(f"short write of the metadata version {self.path}")
            self._writing.depth = 1
            try:
                yield
            finally:
                self._writing.depth = 0
                os.pwrite(fd, _settled(fresh_token()), 0)  # (not reached if killed: a reader settles it)
        finally:
            os.close(fd)


def _in_flight(token: bytes) -> bytes:
    """`token` marked as a write's in flight: its first byte odd."""
    return bytes([token[0] | 1]) + token[1:]


def _settled(token: bytes) -> bytes:
    """`token` marked as no write's in flight: its first byte even."""
    return bytes([token[0] & 0xFE]) + token[1:]
