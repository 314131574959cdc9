"""Replacing a small file atomically, and durably unless told not to: what the partition's checkpoint files (leader
epochs, cleaner passes, log start), the cleaner's swap marker, the cache files, a rebuilt index and the data
directory's ids are written with.

The bytes go to `<path>.tmp`, which is renamed over `path`: a reader (or a process after a crash) sees the old file
or the whole new one. Durably, the temporary file is fsynced before the rename and the directory after it, so once
this returns the new file survives a power loss. A write that fails part-way (a full disk) removes what it wrote:
the file there before stays as it was, and the space comes back.
"""
from __future__ import annotations

import os


def replace_file(path: str, data: bytes, durably: bool = True) -> None:
    """Make `path` hold `data`, atomically and (`durably`) durably; OSError, with nothing left behind, if it
    cannot be written (see the module doc)."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durably:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durably:
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
