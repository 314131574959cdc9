"""Reads of a partition: committed batches from an offset, the raw frames from an offset (what a leader serves
its followers), and the offset for a time.

Only whole, CRC-checked frames below the high watermark are served, each one checked to start where the one
before it ended. Damaged or missing records raise CorruptRangeError naming the segment, the byte and the
offsets, so a consumer can seek past them; the frames after them stay readable. Reads write nothing (an index
found broken is rebuilt under the lock where the directory can be written, else bypassed).
"""
from __future__ import annotations

import bisect
import functools
import logging
import os
import time
from typing import TYPE_CHECKING, Iterator, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from fabric.common.errors import CorruptRecordError, OffsetOutOfRangeError
from fabric.common.records import TIMESTAMP
from fabric.common.types import Fetched
from fabric.storage import frame
from fabric.storage.frame import FrameHeader
from fabric.storage.scan import CorruptRangeError, Damage, Frame
from fabric.storage.segment import Segment

if TYPE_CHECKING:
    from fabric.storage.log import Log


log = logging.getLogger(__name__)
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
FOREIGN_APPEND_POLL_S = 0.05  # how often a waiting reader looks for appends by other processes (not notified)
SCAN_BYTES = 1 << 20  # the most a time lookup reads at a time, when the frame its index named is not the one


class LogRange(NamedTuple):
    """One look at a log's files, for one request: its segments listed once and its log start and end offsets
    from one read of the watermark (never kept between requests: other processes append to the same files)."""

    segments: list[Segment]
    start: int
    end: int


def read(plog: Log, offset: int, max_bytes: int, end_offset: int | None = None,
         isolation: str = READ_COMMITTED, within: LogRange | None = None) -> Iterator[Fetched]:
    """See Log.read."""
    segs, end = _range(plog, offset, end_offset, within)
    return _batches(plog, segs, offset, end, max_bytes, isolation == READ_COMMITTED)


def fetch(plog: Log, offset: int, max_bytes: int, end_offset: int | None = None,
          isolation: str = READ_COMMITTED, within: LogRange | None = None) -> list[Fetched]:
    """See Log.fetch."""
    out: list[Fetched] = []
    try:
        for fetched in read(plog, offset, max_bytes, end_offset, isolation, within):
            out.append(fetched)
    except CorruptRecordError as exc:
        if not out:
            raise
        log.debug("%s: fetch from offset %d stops before damaged records: %s", plog.name, offset, exc)
    return out


def wait_for_records(plog: Log, offset: int, timeout_s: float) -> bool:
    """See Log.wait_for_records."""
    deadline = time.monotonic() + timeout_s
    with plog.appended:
        while plog.end_offset <= offset:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            plog.appended.wait(min(left, FOREIGN_APPEND_POLL_S))
    return True


def read_frames(plog: Log, offset: int, max_bytes: int, end_offset: int | None = None,
                within: LogRange | None = None) -> pa.Buffer:
    """See Log.read_frames."""
    segs, end = _range(plog, offset, end_offset, within)
    if offset >= end or not segs:
        return pa.py_buffer(b"")
    kept = plog.recent.read(segs[-1].base_offset, offset, end, max_bytes) if plog.recent is not None else None
    if kept is not None:
        return kept
    found = _frames_in(plog, segs, offset, end, max_bytes)
    if found is None:  # nothing where the log has records: its directory changed unseen (_listed_again)
        found = _frames_in(plog, _listed_again(plog, offset, end, segs), offset, end, max_bytes)
    if found is None:
        return pa.py_buffer(b"")
    buf, first, stop = found
    return buf.slice(first, stop - first)


def _frames_in(plog: Log, segs: list[Segment], offset: int, end: int, max_bytes: int
               ) -> tuple[pa.Buffer, int, int] | None:
    """The whole, CRC-checked frames from the one holding `offset`, within the segment of `segs` holding it: its
    buffer and their span in it; None if there are none (CorruptRangeError if the first is damaged)."""
    i = _holding(segs, offset)
    limit = min(end, segs[i + 1].base_offset) if i + 1 < len(segs) else end
    frames: list[Frame] = []
    _, buf, _, items = _segment_items(plog, segs[i], offset, end, limit, max_bytes)
    for item in items:
        if isinstance(item, Damage):
            if not frames:
                raise CorruptRangeError(item)
            break
        frames.append(item)
    return (buf, frames[0].position, frames[-1].end) if frames else None


def _holding(segs: list[Segment], offset: int) -> int:
    """The index of the segment of `segs` holding `offset` (the last based at or below it; the first if none is),
    by bisection: no pass over a partition's segments."""
    return max(bisect.bisect_right(segs, offset, key=_base) - 1, 0)


def _base(seg: Segment) -> int:
    return seg.base_offset


def _range(plog: Log, offset: int, end_offset: int | None, within: LogRange | None = None
           ) -> tuple[list[Segment], int]:
    """The segments to read `offset` from and the offset to read up to (`end_offset`, at most the end offset), as
    `within` (the caller's look at the log in this request) or the files now show them; OffsetOutOfRangeError if
    `offset` is outside the log."""
    segs, start, hw = within or plog.log_range()
    end = hw if end_offset is None else min(end_offset, hw)
    if not start <= offset <= hw:
        raise OffsetOutOfRangeError(f"offset {offset} is outside the log's range [{start}, {hw}] of partition "
                                    f"{plog.name} ({plog.directory})")
    return segs, end


def _batches(plog: Log, segs: list[Segment], offset: int, end: int, budget: int,
             committed_only: bool) -> Iterator[Fetched]:
    """The batches from `offset` to `end`. Markers, compaction's gaps, and with `committed_only` the records of
    aborted transactions, are left out; a read ending on some yields an empty batch at the offset after them, so
    the reader's position moves past them (the offsets they take are gaps to the reader)."""
    skipped: tuple[Segment, int] | None = None  # (segment, offset after the frames left out since the last batch)
    relisted = False
    while True:
        for i in range(_holding(segs, offset), len(segs)):
            if offset >= end or budget <= 0:
                break
            limit = min(end, segs[i + 1].base_offset) if i + 1 < len(segs) else end
            seg, schema, stored = _stored(plog, segs[i], offset, end, limit, budget, i + 1 == len(segs))
            for item, payload in stored:
                header = item.header
                if not header.delivered or (committed_only and header.is_transactional
                                            and plog.transactions.aborted(header)):
                    offset = min(end, header.next_offset)
                    skipped = (seg, offset)
                    budget -= header.size
                    continue
                skipped = None
                batch = _decode(seg, schema, item, payload)
                lo = max(offset - header.base_offset, 0)
                hi = min(end - header.base_offset, header.record_count)
                message = None
                if lo or hi < header.record_count:
                    batch = batch.slice(lo, hi - lo)
                elif not header.attributes & frame.ATTR_CODEC:
                    message = payload
                yield Fetched(header.base_offset + lo, batch,
                              1 if header.attributes & frame.ATTR_LOG_APPEND_TIME else 0, message)
                offset = header.base_offset + hi
                budget -= header.size
        if offset >= end or budget <= 0 or relisted:
            break
        relisted, segs = True, _listed_again(plog, offset, end, segs)
    if skipped is not None:
        yield Fetched(skipped[1], pa.RecordBatch.from_pylist([], schema=skipped[0].schema), 0)


def _listed_again(plog: Log, offset: int, end: int, segs: list[Segment] | None = None) -> list[Segment]:
    """The segments listed afresh, for a read that stopped at `offset` short of the log end `end` with room left:
    the segments it was given (`segs`) end there, so the directory changed in a way its time did not show. If the
    log's listing is no longer `segs` (this read's look at a segment already listed it again), that one."""
    if segs is not None:
        listed = plog.segments()
        if listed is not segs:
            return listed
    log.info("%s: the segments listed end at offset %d, the log at %d: listing its directory again", plog.name,
             offset, end)
    return plog.segments(fresh=True)


def _stored(plog: Log, seg: Segment, offset: int, end: int, limit: int, budget: int, active: bool
            ) -> tuple[Segment, pa.Schema, Iterator[tuple[Frame, pa.Buffer]]]:
    """The frames of `seg` to serve from `offset` with their payloads (see _segment_items), and the segment and
    schema they belong to: from the frames kept in memory (recent_frames) where `seg` is the `active` one and
    they hold `offset`, else from its file (CorruptRangeError at damage)."""
    kept = plog.recent.frames(seg.base_offset, offset, end, budget) if active and plog.recent is not None else None
    if kept is not None:
        schema, frames = kept
        return seg, schema, ((k.frame, pa.py_buffer(k.payload)) for k in frames)
    seg, buf, schema, items = _segment_items(plog, seg, offset, end, limit, budget)
    return seg, schema, _payloads(buf, items)


def _payloads(buf: pa.Buffer, items: list[Frame | Damage]) -> Iterator[tuple[Frame, pa.Buffer]]:
    """Each frame of `items` with its payload in `buf`; CorruptRangeError where damage is."""
    for item in items:
        if isinstance(item, Damage):
            raise CorruptRangeError(item)
        yield item, buf.slice(item.position + frame.HEADER_SIZE, item.header.length)


def offset_after_records(plog: Log, offset: int, count: int, end_offset: int | None = None,
                         isolation: str = READ_COMMITTED) -> int:
    """See Log.offset_after_records."""
    segs, end = _range(plog, offset, end_offset)
    at, left = offset, count
    if left <= 0:
        return offset
    relisted = False
    for _ in range(3):
        try:
            for header in _headers_from(plog, segs, at, end):
                lo, hi = max(at, header.base_offset), min(end, header.next_offset)
                if header.delivered and not (isolation == READ_COMMITTED and header.is_transactional
                                             and plog.transactions.aborted(header)):
                    if hi - lo >= left:
                        return lo + left
                    left -= hi - lo
                at = hi
            if at >= end or relisted:
                return end
            relisted, segs = True, _listed_again(plog, at, end, segs)
        except FileNotFoundError:  # the cleaner merged a segment meanwhile: count on where the offsets are now
            if at < plog.start_offset:
                raise OffsetOutOfRangeError(f"offset {at} of partition {plog.name} was deleted by retention "
                                            "while its records were counted; seek to the log start") from None
            segs = plog.segments(fresh=True)
    raise OffsetOutOfRangeError(f"offset {at} of partition {plog.name}: its segment kept changing while its records "
                                "were counted; retry")


def _headers_from(plog: Log, segs: list[Segment], offset: int, end: int) -> Iterator[FrameHeader]:
    """The headers of the frames holding offsets [offset, end), walked from the offset index's entry without
    reading their payloads (damaged frames are left out: a read reports them)."""
    for seg in segs[_holding(segs, offset):]:
        if seg.base_offset >= end:
            return
        plog.indexes.check([seg])
        for item in seg.walk(*plog.indexes.start(seg, offset), stop=end):
            if isinstance(item, Frame) and item.header.next_offset > offset:
                yield item.header


def _segment_items(plog: Log, seg: Segment, offset: int, end: int, limit: int, budget: int
                   ) -> tuple[Segment, pa.Buffer, pa.Schema, list[Frame | Damage]]:
    """The frames (and damage) to serve from `offset`, found in `seg` (its indexes checked first) or, if the
    cleaner replaced or merged it meanwhile, in the segment holding `offset` now; with that segment, the buffer
    their positions refer to and its schema (read again if the file was replaced while being walked)."""
    for _ in range(3):
        try:
            plog.indexes.check([seg])
            buf, inode = seg.mapped()
            schema = seg.schema_of(inode)
            items = list(_frames(plog, seg, offset, end, limit, budget, buf))
            if limit == end and items and _cut_by_unseen_segment(plog, seg, items[-1], buf):
                items.pop()  # (the caller reads on from the segment it did not see: see _batches)
            if os.stat(seg.path).st_ino == inode:
                return seg, buf, schema, items
        except FileNotFoundError:
            if offset < plog.start_offset:
                raise OffsetOutOfRangeError(f"offset {offset} of partition {plog.name} was deleted by retention "
                                            "while being read; seek to the log start") from None
        segs = plog.segments(fresh=True)  # the cleaner swapped segments: read the offsets where they are now
        i = _holding(segs, offset)
        seg = segs[i]
        limit = min(end, segs[i + 1].base_offset) if i + 1 < len(segs) else end
    raise OffsetOutOfRangeError(f"offset {offset} of partition {plog.name}: its segment kept changing while being "
                                "read; retry the read")


def _cut_by_unseen_segment(plog: Log, seg: Segment, last: Frame | Damage, buf: pa.Buffer) -> bool:
    """Whether `seg`, read as the log's last segment, ends at its file's end before the log does (`last` is that
    damage) because a later segment holds the rest: one the listing missed (_listed_again), so not damage."""
    if not isinstance(last, Damage) or last.position != buf.size:
        return False
    listed = _listed_again(plog, last.first_offset, last.next_offset or 0)
    return bool(listed) and listed[-1].base_offset > seg.base_offset


def _frames(plog: Log, seg: Segment, offset: int, end: int, limit: int, budget: int, buf: pa.Buffer
            ) -> Iterator[Frame | Damage]:
    """The frames (and damage) of `seg` (whose data `buf` holds) to serve from `offset`, within about `budget`
    bytes."""
    start = seg.nearer_start(plog.indexes.start(seg, offset, buf), offset, buf)
    for item in seg.read(offset, end, limit, start, buf):
        yield item
        if isinstance(item, Damage):
            return
        budget -= item.header.size
        if budget <= 0:
            return


def _decode(seg: Segment, schema: pa.Schema, item: Frame, payload: pa.Buffer) -> pa.RecordBatch:
    header = item.header
    try:
        return frame.decode_batch(payload, schema)
    except (pa.ArrowException, ValueError) as exc:
        raise CorruptRangeError(Damage(seg.path, item.position, item.end, header.base_offset, header.next_offset,
                                       f"its batch does not decode against the segment's schema: {exc}")) from None


def offset_for_time(plog: Log, timestamp_us: int) -> int | None:
    """See Log.offset_for_time."""
    segs = plog.segments()
    plog.indexes.check(segs)
    maxima, running = [], None
    for seg in segs:
        ts = seg.timeindex.max_timestamp()
        running = ts if running is None else max(running, ts if ts is not None else running)
        maxima.append(-1 if running is None else running)
    i = bisect.bisect_left(maxima, timestamp_us)
    hw = plog.end_offset
    for j in range(i, len(segs)):
        seg = segs[j]
        rel = _time_entry(plog, seg, timestamp_us)
        if rel is None:
            continue
        if seg.base_offset + rel >= hw:  # only uncommitted batches (past the watermark) reach it
            return None
        limit = min(hw, segs[j + 1].base_offset) if j + 1 < len(segs) else hw
        found = _first_reaching(plog, timestamp_us, max(seg.base_offset + rel, plog.start_offset), limit)
        if found is not None:
            return found
    return None


def _first_reaching(plog: Log, timestamp_us: int, offset: int, end: int) -> int | None:
    """The first offset in [offset, end) whose record's timestamp is >= timestamp_us, read forward from the frame
    the time index named (which holds it) or from the log start, where that cut into the segment after the frame
    (then any later frame may): one batch first, then ever more bytes at a time, up to SCAN_BYTES."""
    budget = 1
    while offset < end:
        before = offset
        for fetched in plog.read(offset, budget, end):
            mask = pc.greater_equal(fetched.batch.column(0), pa.scalar(timestamp_us, TIMESTAMP))
            idx = pc.index(mask, True).as_py()
            if idx >= 0:
                return fetched.offset + idx
            offset = fetched.offset + fetched.batch.num_rows
        if offset == before:
            break
        budget = 64 << 10 if budget == 1 else min(budget * 8, SCAN_BYTES)
    return None


def _time_entry(plog: Log, seg: Segment, timestamp_us: int) -> int | None:
    """The relative offset the time index names for `timestamp_us`, its entry checked against the frame it
    names (the index is rebuilt if they disagree)."""
    for attempt in (1, 2):
        entry = seg.timeindex.entry_at_or_after(timestamp_us)
        if entry is None:
            return None
        ts, rel = entry
        if not _time_entry_wrong(plog, seg, ts, rel):
            return rel
        if attempt == 2:
            raise CorruptRecordError(f"time index {seg.timeindex.path} names offset {seg.base_offset + rel} with "
                                     f"max timestamp {ts}, which its frame does not have, even once rebuilt")
        plog.indexes.repair(seg, f"its time entry for offset {seg.base_offset + rel} disagrees with the frame",
                          functools.partial(_time_entry_wrong, plog, seg, ts, rel))
    return None


def _time_entry_wrong(plog: Log, seg: Segment, ts: int, rel: int) -> bool:
    found = seg.frame_of(seg.base_offset + rel, plog.indexes.start(seg, seg.base_offset + rel))
    return found is None or found.header.max_timestamp != ts
