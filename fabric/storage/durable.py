"""Replacing a small file atomically and durably: what the partition's checkpoint files (leader epochs, cleaner
passes, log start) and the cleaner's swap marker are written with.

The bytes go to `<path>.tmp`, which is fsynced and renamed over `path`, then the directory is fsynced: a reader (or
a process after a crash) sees the old file or the whole new one, and once this returns the new one survives a
power loss.
"""
from __future__ import annotations

import os


def replace_file(path: str, data: bytes) -> None:
    """Make `path` hold `data`, atomically and durably (see the module doc)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def remove_file(path: str) -> None:
    """Remove `path` if it is there, durably (the directory fsynced)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(directory: str) -> None:
    """fsync `directory`, so the names created, renamed or removed in it are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
