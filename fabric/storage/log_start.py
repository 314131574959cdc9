"""The log-start-offset checkpoint of a partition: the first offset records were deleted up to (Kafka's
log-start-offset-checkpoint, written by DeleteRecords; ours holds one partition's offset, in its directory).

A follower's full truncation (truncation.truncate_fully) writes it too, before it deletes every segment.
Without the file the log starts at its first segment's base offset, as retention leaves it. Log.delete_records
writes it before deleting the whole segments below the offset, so a process killed in between leaves a log whose
start is already the offset (Log.start_offset is the larger of the two) and whose leftover segments the next
delete_records or retention pass removes.

Text, replaced atomically and durably (fabric.storage.durable), with a checksum line so a damaged file is told
from a valid one:

    1                  format version
    1200               the log start offset
    5d1c0a3e           CRC32C of every byte before this line, 8 hex digits

A file that cannot be read is logged at WARNING and ignored: the log then starts at its first segment, so records
deleted inside it are readable again until the next delete_records (Kafka, losing its checkpoint, does the same).
"""
from __future__ import annotations

import logging
import os

import crc32c

from fabric.storage import durable

log = logging.getLogger(__name__)

CHECKPOINT = "log-start-offset-checkpoint"
VERSION = 1


def encode(offset: int) -> bytes:
    body = f"{VERSION}\n{offset}\n".encode("ascii")
    return body + f"{crc32c.crc32c(body):08x}\n".encode("ascii")


def decode(data: bytes) -> int | None:
    """The offset in a checkpoint file's bytes, or None if they are not a valid one."""
    body, sep, trailer = data.rstrip(b"\n").rpartition(b"\n")
    if not sep or trailer != f"{crc32c.crc32c(body + sep):08x}".encode("ascii"):
        return None
    lines = body.split(b"\n")
    if len(lines) != 2 or lines[0] != str(VERSION).encode() or not lines[1].isdigit():
        return None
    return int(lines[1])


def read(directory: str) -> int:
    """The checkpointed log start offset of the partition in `directory`; 0 if it has none (or, logged at WARNING,
    one that cannot be read)."""
    path = os.path.join(directory, CHECKPOINT)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    offset = decode(data)
    if offset is None:
        log.warning("log-start-offset checkpoint %s is damaged (%d bytes that are not a valid checkpoint): the log "
                    "starts at its first segment until the next delete_records", path, len(data))
        return 0
    return offset


def write(directory: str, offset: int) -> None:
    """Replace the partition's checkpoint with `offset`, atomically and durably."""
    durable.replace_file(os.path.join(directory, CHECKPOINT), encode(offset))


class CachedCheckpoint:
    """The checkpoint of the partition in `directory`, read again only when the file changed (a stat per call:
    the log start is asked for on every fetch)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._last: tuple[tuple[int, int, int], int] | None = None  # (the file's inode, mtime and size; offset)

    def offset(self) -> int:
        """The checkpointed log start offset (0 without a checkpoint)."""
        try:
            st = os.stat(os.path.join(self.directory, CHECKPOINT))
        except FileNotFoundError:
            return 0
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._last is None or self._last[0] != key:
            self._last = (key, read(self.directory))
        return self._last[1]
