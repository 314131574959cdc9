"""A segment's transaction index (after Kafka's `.txnindex`, but of every transactional and control frame, not only
the aborted transactions): what a partition's TransactionState takes from the segment's frames up to a byte
position. Rebuilding the state (after a restart, on a new leader, or after another process wrote an embedded log)
then walks only the frames past that position, instead of every frame header of the log under the partition lock:
3.7 µs a frame, so minutes for a partition of small batches, with its appends waiting.

The file `<base>.txnindex` beside the segment holds: a magic, the data file's inode, the byte position P and the
offset starting there, one entry per transactional or control frame below P (producer id, base offset,
attributes), and a CRC32 of all that. It is a cache of what the frames say, never the only copy:
- written whole (a temporary file renamed over it) by a rebuild that walked a sealed segment or WRITE_AFTER_BYTES
  of the active one, under the partition lock; not written past damage (a repair may change what is there);
- trusted only if it is whole (its CRC), names the data file's inode (a cleaner's swap makes a new file) and
  P is within the file;
- removed with its segment and whenever the segment is truncated, replaced or repaired (Segment.truncate,
  Segment.delete, segment_swap.swap_in, scrub.repair): frames below P never change otherwise.
A missing, stale or unreadable index is walked instead; one that cannot be written (a read-only disk) is left
out, and the reads go on.
"""
from __future__ import annotations

import logging
import os
import struct
from typing import TYPE_CHECKING

from fabric.storage import cache_file
from fabric.storage.frame import ATTR_CONTROL, ATTR_SCHEMA, ATTR_TRANSACTIONAL
from fabric.storage.pacing import Pacer
from fabric.storage.scan import Damage, Frame
from fabric.storage.transactions import TransactionState

if TYPE_CHECKING:
    from fabric.storage.segment import Segment

log = logging.getLogger(__name__)
MAGIC = b"FTXNIDX1"
_HEAD = struct.Struct("<8sQQqI")  # magic, inode, position, offset at the position, entry count
_ENTRY = struct.Struct("<qqB")  # producer id, base offset, attributes
WRITE_AFTER_BYTES = 1 << 20  # an active segment's index is written again once a rebuild walked this much past it
Entry = tuple[int, int, int]


def read(seg: Segment) -> tuple[int, int, list[Entry]] | None:
    """(position, offset there, entries below it) from the segment's index, or None if it has none it can trust."""
    data = cache_file.read(seg.txn_index_path)
    if data is None or len(data) < _HEAD.size:
        return None
    try:
        inode, size = _data_file(seg)
    except OSError:
        return None
    magic, recorded_inode, position, offset, count = _HEAD.unpack_from(data)
    if magic != MAGIC or recorded_inode != inode or position > size or len(data) != _HEAD.size + count * _ENTRY.size:
        return None
    return position, offset, list(_ENTRY.iter_unpack(data[_HEAD.size:]))


def write(seg: Segment, position: int, offset: int, entries: list[Entry]) -> None:
    """Replace the segment's index with one covering its frames below byte `position` (lock held); a failure
    (a read-only or full disk) leaves the index out: it is a cache."""
    try:
        inode, _ = _data_file(seg)
    except OSError as exc:
        log.debug("segment %s: its transaction index is left out (%s)", seg.path, exc)
        return
    body = _HEAD.pack(MAGIC, inode, position, offset, len(entries)) + b"".join(_ENTRY.pack(*e) for e in entries)
    cache_file.write(seg.txn_index_path, body)


def remove(seg: Segment) -> None:
    """Drop the segment's index (its frames are about to change, or go)."""
    for path in (seg.txn_index_path, seg.txn_index_path + ".tmp"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _data_file(seg: Segment) -> tuple[int, int]:
    stat = os.stat(seg.path)
    return stat.st_ino, stat.st_size


def rebuild(name: str, segments: list[Segment], end: int) -> TransactionState:
    """The transaction state of partition `name`'s frames below offset `end`, from each segment's index and a
    walk of the frames past it; indexes written where a walk went far enough (see the module doc)."""
    state, pace = TransactionState(name), Pacer()
    for i, seg in enumerate(segments):
        if seg.base_offset >= end:
            break
        sealed = i + 1 < len(segments) and segments[i + 1].base_offset <= end
        known = read(seg)
        position, offset, entries = known if known is not None else (seg.data_start, seg.base_offset, [])
        walk = seg.walk(position, offset, stop=end)
        damaged = False
        for item in walk:
            pace()
            if isinstance(item, Damage):
                damaged = True
            elif isinstance(item, Frame):
                attributes = item.header.attributes
                if not attributes & ATTR_SCHEMA and attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL):
                    entries.append((item.header.producer_id, item.header.base_offset, attributes))
        for entry in entries:
            state.take(*entry)
        walked = walk.position - position
        if not damaged and walked > 0 and (sealed or walked >= WRITE_AFTER_BYTES):
            write(seg, walk.position, walk.expected, entries)
    return state
