"""Disk failures as StorageError: a full or read-only filesystem, a quota or an I/O error while the fabric
writes its metadata database or its partition files, told as the problem, the file and the fix instead of an
OSError or sqlite3 traceback.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from typing import Iterator

from fabric.common.errors import StorageError

OS_PROBLEMS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
               errno.EROFS: "the filesystem is read-only", errno.EIO: "the disk reported an I/O error",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied"}
SQLITE_PROBLEMS = {"SQLITE_FULL": "the disk is full", "SQLITE_READONLY": "the database cannot be written "
                   "(read-only filesystem or file)", "SQLITE_IOERR": "the disk reported an I/O error "
                   "(often a full disk)", "SQLITE_CANTOPEN": "the database file cannot be opened"}
FIX = "free space on that filesystem or make it writable, then retry"


def sqlite_problem(exc: BaseException) -> str | None:
    """What disk problem a sqlite3 error reports (None if it is not one)."""
    if not isinstance(exc, sqlite3.Error):
        return None
    name = getattr(exc, "sqlite_errorname", "") or ""
    for prefix, problem in SQLITE_PROBLEMS.items():
        if name.startswith(prefix):
            return problem
    text = str(exc).lower()  # Python < 3.11 has no sqlite_errorname
    for marker, problem in (("disk is full", "the disk is full"), ("readonly", SQLITE_PROBLEMS["SQLITE_READONLY"]),
                            ("disk i/o", SQLITE_PROBLEMS["SQLITE_IOERR"]), ("unable to open", "the database file "
                            "cannot be opened")):
        if marker in text:
            return problem
    return None


def os_problem(exc: BaseException) -> str | None:
    """What disk problem an OSError reports (None if it is not one)."""
    return OS_PROBLEMS.get(exc.errno) if isinstance(exc, OSError) and exc.errno is not None else None


def storage_error(problem: str, path: str, doing: str) -> StorageError:
    """The error to raise: what failed, where, why (a full or read-only filesystem named as such, whatever
    error reported it) and the fix."""
    return StorageError(f"cannot {doing}: {state_of(path) or problem} ({path}); {FIX}")


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


@contextlib.contextmanager
def disk_errors(path: str, doing: str) -> Iterator[None]:
    """Raise StorageError for a disk problem inside the block (other errors pass through unchanged)."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        problem = os_problem(exc) or sqlite_problem(exc)
        if problem is None:
            raise
        raise storage_error(problem, getattr(exc, "filename", None) or path, doing) from exc
