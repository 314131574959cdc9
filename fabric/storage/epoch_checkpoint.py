"""The leader-epoch checkpoint file of a partition: which leader epoch starts at which offset.

Text, as Kafka's leader-epoch-checkpoint, with a checksum line so a damaged file is told from a valid one:

    1                  format version
    2                  number of entries
    0 0                epoch start_offset, one line each, both strictly increasing
    3 120
    5d1c0a3e           CRC32C of every byte before this line, 8 hex digits

It is replaced whole (a temporary file, fsynced, renamed over it, then the directory fsynced), so a reader sees
the old file or the new one; a partition without epochs has none. Its owner (fabric.storage.leader_epochs)
holds the partition lock when it writes.
"""
from __future__ import annotations

from typing import NamedTuple

import crc32c

from fabric.common.errors import CorruptRecordError, InvalidLeaderEpochError
from fabric.storage import durable

CHECKPOINT = "leader-epoch-checkpoint"
VERSION = 1


class EpochEntry(NamedTuple):
    """Leader epoch `epoch` wrote the records from offset `start_offset` on (up to the next entry's start)."""

    epoch: int
    start_offset: int


class CorruptCheckpointError(CorruptRecordError):
    """The checkpoint file is not a valid one (torn, damaged, or entries that do not increase); its owner
    rebuilds it from the frame headers of the log."""


def order_problem(entries: list[EpochEntry]) -> str | None:
    """What breaks the file's invariant (epochs >= 0, start offsets >= 0, both strictly increasing), or None."""
    for i, entry in enumerate(entries):
        if entry.epoch < 0 or entry.start_offset < 0:
            return f"entry {entry.epoch} {entry.start_offset} is negative"
        if i and not (entry.epoch > entries[i - 1].epoch and entry.start_offset > entries[i - 1].start_offset):
            return (f"entry {entry.epoch} {entry.start_offset} does not increase on entry {entries[i - 1].epoch} "
                    f"{entries[i - 1].start_offset}")
    return None


def encode(entries: list[EpochEntry]) -> bytes:
    body = f"{VERSION}\n{len(entries)}\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)
    data = body.encode("ascii")
    return data + f"{crc32c.crc32c(data):08x}\n".encode("ascii")


def decode(data: bytes, path: str) -> list[EpochEntry]:
    """The entries of a checkpoint file's bytes; CorruptCheckpointError saying what is wrong if it is not one."""
    def corrupt(problem: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"leader-epoch checkpoint {path} is damaged ({problem})")

    body, sep, trailer = data.rstrip(b"\n").rpartition(b"\n")
    if not sep or trailer != f"{crc32c.crc32c(body + sep):08x}".encode("ascii"):
        raise corrupt(f"{len(data)} bytes, its checksum line does not match")
    try:
        lines = [[int(field) for field in line.split()] for line in body.decode("ascii").split("\n")]
    except ValueError:
        raise corrupt("a line that is not numbers") from None
    if lines[0] != [VERSION] or len(lines) < 2 or lines[1] != [len(lines) - 2]:
        raise corrupt("wrong version or entry count")
    if any(len(line) != 2 for line in lines[2:]):
        raise corrupt("an entry that is not 'epoch start_offset'")
    entries = [EpochEntry(epoch, start) for epoch, start in lines[2:]]
    problem = order_problem(entries)
    if problem:
        raise corrupt(problem)
    return entries


def read(path: str) -> list[EpochEntry] | None:
    """The entries of the file at `path`, None if there is none (CorruptCheckpointError if it is damaged)."""
    try:
        with open(path, "rb") as f:
            return decode(f.read(), path)
    except FileNotFoundError:
        return None


def write(path: str, entries: list[EpochEntry]) -> None:
    """Replace the file with `entries` atomically and durably (refused if they break the invariant); no entries
    remove it, as a log that never had an epoch has none."""
    problem = order_problem(entries)
    if problem:
        raise InvalidLeaderEpochError(f"refused to write leader-epoch checkpoint {path}: {problem}")
    if entries:
        durable.replace_file(path, encode(entries))
    else:
        durable.remove_file(path)
