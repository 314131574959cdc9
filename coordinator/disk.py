"""Disk failures of the metadata database as StorageError: what SQLite reports (a full disk, a read-only
file, an I/O error) told as fabric.storage.errors tells an OSError, instead of a sqlite3 traceback.
"""
from __future__ import annotations

import contextlib
import sqlite3
from typing import Iterator

from fabric.storage.errors import os_problem, state_of, storage_error

__all__ = ["disk_errors", "sqlite_problem", "state_of", "storage_error"]

SQLITE_PROBLEMS = {"SQLITE_FULL": "the disk is full", "SQLITE_READONLY": "the database cannot be written "
                   "(read-only filesystem or file)", "SQLITE_IOERR": "the disk reported an I/O error "
                   "(often a full disk)", "SQLITE_CANTOPEN": "the database file cannot be opened"}


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


@contextlib.contextmanager
def disk_errors(path: str, doing: str) -> Iterator[None]:
    """Raise StorageError for a disk problem (OSError or sqlite3) inside the block (other errors pass through
    unchanged)."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        problem = os_problem(exc) or sqlite_problem(exc)
        if problem is None:
            raise
        raise storage_error(problem, getattr(exc, "filename", None) or path, doing) from exc
