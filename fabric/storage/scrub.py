"""Scrubbing a replica's log and repairing what it finds with another replica's copy.

Recovery checks only a log's tail; a flipped bit in an older segment is found only when a reader reaches it.
`scrub` walks every frame below an offset (a replica's high watermark), checking its CRC and that it starts where
the one before it ended, as a filesystem scrub reads every block: the damage is reported as a range of bytes and
the offsets it covers (scan.Damage). A `throttle` callback gets the bytes of each frame walked, for the caller's
rate limit. Segments deleted meanwhile (retention, compaction) are skipped, and one replaced meanwhile (a
cleaner's swap) is walked again, so only damage still on disk is reported.

`repair` replaces the damaged bytes with the frames of those offsets from another replica's log (a leader's
frames are copied byte for byte, so the copies hold the same frames): checked whole first (each CRC-valid, the
offsets following on from the damage's first offset to its end, each frame's leader epoch the one this log holds
for its offsets), then, under the partition lock and only if the damage is still there, written over it: in
place when they take the same bytes, else (a compacted replica's frames, cut differently) the segment is
rewritten with them and its indexes rebuilt. Either way the file is fsynced before the repair is reported.
"""
from __future__ import annotations

import bisect
import errno
import logging
import os
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from fabric.common.errors import InvalidFramesError
from fabric.storage import frame, txn_index
from fabric.storage.durable import fsync_dir
from fabric.storage.mapcache import MAPS
from fabric.storage.replica_frames import check_copied
from fabric.storage.scan import Damage
from fabric.storage.segment import Segment, write_all

if TYPE_CHECKING:
    from fabric.storage.log import Log

log = logging.getLogger(__name__)
WALKS = 3  # a segment replaced this many times while it is walked is skipped until the next pass


def scrub(plog: Log, end: int, throttle: Callable[[int], None] = lambda nbytes: None) -> list[Damage]:
    """The damage among the frames of `plog` holding offsets below `end`, every frame's CRC checked."""
    found: list[Damage] = []
    segs = plog.segments()
    for i, seg in enumerate(segs):
        if seg.base_offset >= end:
            break
        limit = min(end, segs[i + 1].base_offset) if i + 1 < len(segs) else end
        found += _scrub_segment(seg, limit, throttle)
    return found


def _scrub_segment(seg: Segment, limit: int, throttle: Callable[[int], None]) -> list[Damage]:
    for _ in range(WALKS):
        try:
            inode = os.stat(seg.path).st_ino
            start, buf = seg.data_start, seg.view()
            damage, walked = [], start
            for item in seg.walk(start, seg.base_offset, buf, stop=limit, verify_from=seg.base_offset, limit=limit):
                if isinstance(item, Damage):
                    damage.append(item)
                throttle(max(item.end - walked, 0))
                walked = max(walked, item.end)
            if os.stat(seg.path).st_ino == inode:
                return damage
        except FileNotFoundError:
            return []  # deleted meanwhile: nothing of it is served any more
    log.info("segment %s was replaced %d times while it was scrubbed; it is scrubbed again next pass", seg.path,
             WALKS)
    return []


def copy_range(plog: Log, start: int, end: int, max_bytes: int) -> pa.Buffer:
    """The whole, CRC-checked frames of `plog` from the one holding offset `start` to `end` (across segments),
    about `max_bytes` at most (at least one frame): this replica's copy of a range another one repairs with.
    CorruptRecordError if this copy is damaged there too."""
    parts: list[bytes] = []
    size, at = 0, start
    while at < end and (not parts or size < max_bytes):
        chunk = plog.read_frames(at, max_bytes - size if parts else max_bytes, end)
        if not chunk.size:
            break
        parts.append(chunk.to_pybytes())
        size += chunk.size
        at = _frames_end(chunk)
    return pa.py_buffer(b"".join(parts))


def _frames_end(frames: pa.Buffer) -> int:
    """The offset after the last of `frames` (whole frames laid end to end)."""
    pos, end = 0, 0
    while pos < frames.size:
        header = frame.unpack_header(frames, pos)
        pos, end = pos + header.size, header.next_offset
    return end


def repair(plog: Log, damage: Damage, frames: pa.Buffer, source: str) -> bool:
    """Write `frames`, `source`'s copy of the offsets `damage` covers, over the damaged bytes (see the module
    doc); True once repaired, False if the damage is no longer there (nothing written). InvalidFramesError,
    nothing written, if the frames are not a whole, valid copy of exactly those offsets."""
    if damage.next_offset is None:
        raise InvalidFramesError(f"{damage.describe()}: the damage has no known end, so no copy can replace it")
    checked = check_copied(frames, damage.first_offset, -1, plog.name)
    if not checked or checked[-1][0].next_offset != damage.next_offset:
        end = checked[-1][0].next_offset if checked else damage.first_offset
        raise InvalidFramesError(f"partition {plog.name}: {source}'s copy of offsets {damage.first_offset}.."
                                 f"{damage.next_offset - 1} ends at offset {end}; nothing was written")
    _check_epochs(plog, damage, [header for header, _ in checked])
    with plog.lock:
        seg = next((s for s in plog.segments() if s.path == damage.path), None)
        if seg is None or not _still_damaged(seg, damage):
            return False
        txn_index.remove(seg)  # (what it recorded of the damaged bytes' headers may change)
        if damage.end - damage.position == frames.size:
            _overwrite(seg.path, damage.position, frames)
        else:
            _rewrite(plog, seg, damage, frames)
    log.warning("partition %s: repaired %s with %s's copy (%d bytes)", plog.name, damage.describe(), source,
                frames.size)
    return True


def _check_epochs(plog: Log, damage: Damage, headers: list) -> None:
    """InvalidFramesError unless each frame's leader epoch is the one this log holds for its offsets (a copy of
    another leadership's records, after an unclean election, is not ours)."""
    entries = plog.leader_epochs.entries
    starts = [e.start_offset for e in entries]
    for header in headers:
        at = bisect.bisect_right(starts, header.base_offset) - 1
        if at >= 0 and header.leader_epoch >= 0 and entries[at].epoch != header.leader_epoch:
            raise InvalidFramesError(
                f"partition {plog.name}: the copy's frame at offset {header.base_offset} has leader epoch "
                f"{header.leader_epoch}, this log's records there have epoch {entries[at].epoch}; nothing was "
                f"written over {damage.describe()}")


def _still_damaged(seg: Segment, damage: Damage) -> bool:
    """Whether the segment still holds exactly this damage (lock held)."""
    walk = seg.walk(damage.position, damage.first_offset, stop=damage.next_offset, verify_from=damage.first_offset,
                    limit=damage.next_offset)
    first = next(iter(walk), None)
    return isinstance(first, Damage) and (first.position, first.end, first.next_offset) == (
        damage.position, damage.end, damage.next_offset)


def _overwrite(path: str, position: int, frames: pa.Buffer) -> None:
    """The same number of bytes, in place (maps of the file see them at once), fsynced."""
    fd = os.open(path, os.O_WRONLY)
    try:
        view, at = memoryview(frames), position
        while view:
            written = os.pwrite(fd, view, at)
            view, at = view[written:], at + written
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _rewrite(plog: Log, seg: Segment, damage: Damage, frames: pa.Buffer) -> None:
    """A new file of the segment with `frames` instead of the damaged bytes, renamed over it; its indexes rebuilt
    (lock held)."""
    tmp = seg.path + ".repair"
    old = os.open(seg.path, os.O_RDONLY)
    try:
        new = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _copy(old, new, 0, damage.position)
            write_all(new, [frames])
            _copy(old, new, damage.end, os.fstat(old).st_size - damage.end)
            os.fsync(new)
        finally:
            os.close(new)
    finally:
        os.close(old)
    os.replace(tmp, seg.path)
    fsync_dir(os.path.dirname(seg.path))
    MAPS.forget(seg.path)
    seg.forget_writes()
    seg.rebuild_indexes(plog.config["index.interval.bytes"])
    plog.forget_tail()  # the active segment may have changed size: the next append looks again


def _copy(source: int, target: int, offset: int, count: int) -> None:
    """Append bytes [offset, offset + count) of file `source` to file `target` (descriptors)."""
    while count > 0:
        sent = os.sendfile(target, source, offset, count)
        if not sent:
            raise OSError(errno.EIO, f"the segment ended {count} bytes early while it was repaired")
        offset, count = offset + sent, count - sent
