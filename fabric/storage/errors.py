"""Disk failures as StorageError: a full or read-only filesystem, a quota, a foreign directory or an I/O error
(and, for a client's call, a directory where a file belongs or the reverse) while the fabric writes or reads its
files, told as what failed, the file, the problem (a full or read-only filesystem named as such, whatever error
reported it) and the fix, instead of an OSError. Reads go on where a write is refused."""
from __future__ import annotations

import contextlib
import errno
import functools
import os
from typing import Any, Callable, Iterator, TypeVar, cast

from fabric.common.errors import StorageError

OS_PROBLEMS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
               errno.EROFS: "the filesystem is read-only", errno.EIO: "the disk reported an I/O error",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied"}
# An operator's mistake rather than the disk's (a data node does not take it for a failure of its storage)
MISPLACED = {errno.EISDIR: "a directory is where the fabric keeps a file",
             errno.ENOTDIR: "a file is where the fabric keeps a directory"}
# What a write to a read-only, full or foreign directory fails with (a reader falls back to memory on these).
UNWRITABLE = frozenset(OS_PROBLEMS) - {errno.EIO}
FIX = "free space on that filesystem or make it writable, then retry"
_MISPLACED_FIX = "move it aside (the fabric makes what belongs there again, or recovery says what is lost), then retry"
_Write = TypeVar("_Write", bound=Callable[..., Any])


def os_problem(exc: BaseException) -> str | None:
    """What disk problem an OSError reports (None if it is not one)."""
    return OS_PROBLEMS.get(exc.errno) if isinstance(exc, OSError) and exc.errno is not None else None


def state_of(path: str) -> str | None:
    """"the filesystem is read-only" or "the disk is full" if the filesystem holding `path` (or its nearest
    existing parent) is, else None."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return OS_PROBLEMS[errno.EROFS]
    return OS_PROBLEMS[errno.ENOSPC] if stats.f_bavail == 0 else None


def storage_error(problem: str, path: str, doing: str) -> StorageError:
    """The error to raise: what failed, where, why and the fix."""
    misplaced = problem in MISPLACED.values()
    fix = _MISPLACED_FIX if misplaced else FIX
    return StorageError(f"cannot {doing}: {(None if misplaced else state_of(path)) or problem} ({path}); {fix}")


def told(exc: OSError, path: str, doing: str, misplaced: bool = False) -> BaseException:
    """`exc` as the StorageError of its disk problem (naming its file, else `path`), or `exc` itself if it reports
    none: for an `except OSError` clause that costs the calls through it nothing while nothing fails. With
    `misplaced`, a directory where a file belongs (and the reverse) is told too (a client's call)."""
    problem = os_problem(exc) or (MISPLACED.get(exc.errno or 0) if misplaced else None)
    return exc if problem is None else storage_error(problem, exc.filename or path, doing)


@contextlib.contextmanager
def disk_errors(path: str, doing: str) -> Iterator[None]:
    """Raise StorageError for a disk problem inside the block (other errors pass through unchanged)."""
    try:
        yield
    except OSError as exc:
        raise told(exc, path, doing) from exc


def writes(method: _Write) -> _Write:
    """A partition's write (the object's `name` and `directory`) that fails on a disk problem raises the
    StorageError of disk_errors, naming the partition."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:  # (not disk_errors: no context manager, and no message built, on the way of every append)
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise told(exc, self.directory, f"write partition {self.name}") from exc
    return cast(_Write, wrapper)
