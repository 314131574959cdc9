"""A partition's idempotent producer state as of an offset, kept in a file beside its segments (after Kafka's
producer-state `.snapshot` files): a process that opens the partition loads it and walks only the frame headers
written after it, instead of every header of the last segments (seconds for segments of small batches, which the
first idempotent append of every new process waited for).

`producer-state.snapshot` holds the state of the frames below offset S: where the frame just before S lies
(segment, byte position) and its CRC, then each producer's epoch, last frame's offset and kept batches (in the order
of their last writes), and a CRC32 of it all. It is a cache that checks itself when read: it is used only if that
frame is still where it was, with that CRC, ending at S (a log cut below S and written again, or a segment rewritten
or deleted, is seen there), and only if S lies within the segments a rebuild reads; otherwise the state is rebuilt
from the headers as before. It is written under the partition lock, where the state is up to date with the log end:
after the first write of a process to each segment (so a crash leaves at most a segment to walk) and when the
process closes the partition (`Log.closing`: nothing to walk at its next start).
"""
from __future__ import annotations

import os
import struct
from collections import deque
from typing import TYPE_CHECKING, Callable

from fabric.storage import cache_file
from fabric.storage.frame import FrameHeader
from fabric.storage.producer_state import BATCHES_KEPT, BatchEntry, ProducerEntry, ProducerStateTable
from fabric.storage.scan import frame_headers

if TYPE_CHECKING:
    from fabric.storage.segment import Segment

FILE = "producer-state.snapshot"
MAGIC = b"FPS1"
_HEAD = struct.Struct("<4sqqqIi")  # magic, S, the previous frame's segment base and position, its CRC, producers
_PRODUCER = struct.Struct("<qhqB")  # producer id, epoch, last frame's offset, kept batches
_BATCH = struct.Struct("<iiq")  # first and last sequence, base offset


def path_of(directory: str) -> str:
    return os.path.join(directory, FILE)


def write(directory: str, table: ProducerStateTable, last: FrameHeader, segment_base: int, position: int) -> None:
    """Replace the snapshot with `table`, the state of the frames up to `last` (lock held), the frame at byte
    `position` of the segment at `segment_base`. A failure (a read-only or full disk) leaves it out: it is a
    cache."""
    entries = table.entries()
    parts = [_HEAD.pack(MAGIC, last.next_offset, segment_base, position, last.crc, len(entries))]
    for producer_id, entry in entries:
        parts.append(_PRODUCER.pack(producer_id, entry.epoch, entry.last_offset, len(entry.batches)))
        parts += [_BATCH.pack(b.first_sequence, b.last_sequence, b.base_offset) for b in entry.batches]
    cache_file.write(path_of(directory), b"".join(parts))


def load(name: str, directory: str, segments: list[Segment], end: int, since: int, now_ms: int,
         check: Callable[[], None] | None = None) -> ProducerStateTable | None:
    """Partition `name`'s producer state below offset `end`, as a rebuild from the frames from offset `since` on
    makes it (producer_state.restore), from the snapshot and a walk of the frames after it; None where there is
    no snapshot this log still matches (see the module doc). `segments`: the log's, listed under the lock;
    `check`: a lock-free walk's (frame_headers)."""
    found = _read(path_of(directory))
    if found is None:
        return None
    offset, segment_base, position, crc, entries = found
    if not since <= offset <= end:
        return None
    segment = next((seg for seg in segments if seg.base_offset == segment_base), None)
    if segment is None:
        return None
    try:
        before = segment.header_at(position)
    except OSError:
        return None
    if before is None or before.crc != crc or before.next_offset != offset:
        return None
    table = ProducerStateTable.restore(name, entries, since, now_ms)
    later = [seg for seg in segments if seg.base_offset > segment_base]
    for header in frame_headers([segment, *later], end, start=(position + before.size, offset), check=check):
        table.update(header, now_ms)
    return table


def _read(path: str) -> tuple[int, int, int, int, list[tuple[int, ProducerEntry]]] | None:
    """(S, the previous frame's segment base, position and CRC, the entries) from the file; None if there is none
    or it is damaged."""
    data = cache_file.read(path)
    if data is None or len(data) < _HEAD.size:
        return None
    magic, offset, segment_base, position, crc, count = _HEAD.unpack_from(data)
    if magic != MAGIC:
        return None
    entries: list[tuple[int, ProducerEntry]] = []
    at = _HEAD.size
    try:
        for _ in range(count):
            producer_id, epoch, last_offset, kept = _PRODUCER.unpack_from(data, at)
            at += _PRODUCER.size
            batches: deque[BatchEntry] = deque(maxlen=BATCHES_KEPT)
            for _ in range(kept):
                batches.append(BatchEntry(*_BATCH.unpack_from(data, at)))
                at += _BATCH.size
            entries.append((producer_id, ProducerEntry(epoch, 0, batches, last_offset)))
    except struct.error:
        return None
    if at != len(data):
        return None
    return offset, segment_base, position, crc, entries
