"""Walking a segment's frames in file order, checking that each follows the one before it.

A frame must parse, lie whole inside the file, pass its CRC check (where the caller asks for it) and start at
the offset the previous frame ended at. Anything else is damage: it is reported as a byte range and the
offsets it covers, and the walk resynchronises on the next valid frame (the position the damaged frame's
length points at, else the next magic that starts a whole, CRC-valid frame), so damage never hides the frames
after it and a reader can skip past it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

import pyarrow as pa

from fabric.common.errors import CorruptRecordError
from fabric.storage import frame
from fabric.storage.frame import FrameError, FrameHeader
from fabric.storage.pacing import paced

if TYPE_CHECKING:
    from fabric.storage.segment import Segment

_SCAN_CHUNK = 1 << 20
_unpack = frame.HEADER.unpack_from


class Frame(NamedTuple):
    """A frame found at byte `position` of a segment. (A named tuple: every walk makes one per frame, and a
    frozen dataclass costs three times as much to make.)"""

    position: int
    header: FrameHeader

    @property
    def end(self) -> int:
        return self.position + self.header.size


@dataclass(frozen=True)
class Damage:
    """Bytes [position, end) of segment `path` hold no valid frame where offsets [first_offset, next_offset)
    should be (next_offset None: up to the end of the segment's offsets)."""

    path: str
    position: int
    end: int
    first_offset: int
    next_offset: int | None
    reason: str

    def covers(self, offset: int) -> bool:
        return self.first_offset <= offset and (self.next_offset is None or offset < self.next_offset)

    def describe(self) -> str:
        offsets = (f"offsets {self.first_offset}..{self.next_offset - 1}" if self.next_offset is not None
                   else f"offsets from {self.first_offset} on")
        return f"{offsets} at byte {self.position} of {self.path} ({self.reason})"


class CorruptRangeError(CorruptRecordError):
    """Records that cannot be served: their frame is damaged or missing. `damage` says where and which."""

    def __init__(self, damage: Damage) -> None:
        skip = (f"seek to offset {damage.next_offset} to skip them" if damage.next_offset is not None
                else "seek past them")
        super().__init__(f"{damage.describe()}: these records are never served; {skip}, or restore the segment "
                         "from a backup")
        self.damage = damage


class Walk:
    """The frames of `buf` (the data of segment `path`) from byte `position`, where offset `expected` should
    start, and the damage between them. Iterating yields Frame and Damage items; afterwards `position` and
    `expected` are where the walk ended.

    stop: end before a frame at or past this offset without reading its bytes (past the watermark they may be a
        tail another process is cutting back). verify_from: CRC-check the frames holding offsets from here on.
    limit: the offset the frames should reach (missing frames at the end are reported as damage up to it)."""

    def __init__(self, path: str, buf: pa.Buffer, position: int, expected: int, *, stop: int | None = None,
                 verify_from: int | None = None, limit: int | None = None) -> None:
        self.path, self.buf = path, buf
        self.position, self.expected = position, expected
        self.stop, self.verify_from, self.limit = stop, verify_from, limit

    def __iter__(self) -> Iterator[Frame | Damage]:
        buf, end, stop, verify_from = self.buf, self.buf.size, self.stop, self.verify_from
        last_header = end - frame.HEADER_SIZE
        while stop is None or self.expected < stop:
            pos, expected = self.position, self.expected
            if pos >= end:
                if self.limit is not None and expected < self.limit:
                    yield Damage(self.path, pos, pos, expected, self.limit, "the segment ends before them")
                    self.expected = self.limit
                return
            if pos <= last_header:  # the usual frame, checked inline (each walk's hot loop); anything else: _check
                fields = _unpack(buf, pos)
                size, next_offset = frame.HEADER_SIZE + fields[1], expected + fields[8]
                if (fields[2] == expected and fields[0] == frame.MAGIC and fields[5] in frame.READABLE_VERSIONS
                        and fields[8] >= 0 and pos + size <= end and not fields[6] & frame.ATTR_SCHEMA
                        and (verify_from is None or next_offset <= verify_from)):
                    yield Frame(pos, frame.header_of(fields))
                    self.position, self.expected = pos + size, next_offset
                    continue
            header, problem = self._check(pos, expected)
            if problem is None and header is not None:
                yield Frame(pos, header)
                self.position, self.expected = pos + header.size, header.next_offset
                continue
            if header is not None and problem == "gap":
                yield Damage(self.path, pos, pos, expected, header.base_offset,
                             f"missing: the next frame starts at offset {header.base_offset}")
                self.expected = header.base_offset
                continue
            if header is not None and problem == "shifted":
                yield Damage(self.path, pos, pos + header.size, expected, expected + header.record_count,
                             f"the frame's base offset field reads {header.base_offset}")
                self.position, self.expected = pos + header.size, expected + header.record_count
                continue
            found = resync(self.buf, pos, expected, header)
            if found is None:
                yield Damage(self.path, pos, end, expected, self.limit, problem or "")
                self.position = end
                if self.limit is not None:
                    self.expected = max(expected, self.limit)
                return
            yield Damage(self.path, pos, found.position, expected, found.header.base_offset, problem or "")
            self.position, self.expected = found.position, found.header.base_offset

    def _check(self, pos: int, expected: int) -> tuple[FrameHeader | None, str | None]:
        """The header at `pos` and what is wrong with it (None: a good frame; "gap"/"shifted": see __iter__)."""
        buf = self.buf
        try:
            header = frame.unpack_header(buf, pos)
        except FrameError as exc:
            return None, "a torn frame header" if str(exc) == "short header" else "no valid frame header"
        if pos + header.size > buf.size:
            return header, f"a torn frame: {buf.size - pos} of its {header.size} bytes"
        if header.is_schema:
            return header, "a schema frame after the segment's start"
        must_verify = self.verify_from is not None and header.next_offset > self.verify_from
        if header.base_offset == expected:
            if must_verify and not frame.verify(buf, pos, header):
                return header, "its CRC check failed"
            return header, None
        if not frame.verify(buf, pos, header):
            return header, "its CRC check failed"
        if header.version == 1:  # version 1 CRCs leave the base offset out: that field alone is damaged
            return header, "shifted"
        if header.base_offset > expected:
            return header, "gap"
        return header, f"a stale frame of offset {header.base_offset} where offset {expected} should start"


def frame_headers(segs: list[Segment], end: int, start: tuple[int, int] | None = None,
                  check: Callable[[], None] | None = None) -> Iterator[FrameHeader]:
    """The headers of the data frames of `segs` below offset `end`, in offset order (damaged frames left out); the
    first segment from `start` (byte position, the offset there) if given. The walk is paced (pacing.py) across
    the segments, however small each is, and calls `check()` between frames (a lock-free walk's, cut_barrier)."""
    starts = [start or (segs[0].data_start, segs[0].base_offset)] if segs else []
    starts += [(seg.data_start, seg.base_offset) for seg in segs[1:]]
    return paced((item.header for seg, (position, offset) in zip(segs, starts, strict=True)
                  for item in seg.walk(position, offset, stop=end) if isinstance(item, Frame)), check)


def resync(buf: pa.Buffer, pos: int, expected: int, header: FrameHeader | None) -> Frame | None:
    """The first whole, CRC-valid data frame after byte `pos` holding offsets from `expected` on: first where
    the damaged frame's own length points, then at each later occurrence of the magic."""
    if header is not None and frame.HEADER_SIZE <= header.size and pos + header.size < buf.size:
        found = _valid_at(buf, pos + header.size, expected)
        if found is not None:
            return found
    view = memoryview(buf)
    start = pos + 1
    while start < buf.size:
        chunk = view[start:start + _SCAN_CHUNK + len(frame.MAGIC) - 1].tobytes()
        hit = chunk.find(frame.MAGIC)
        while hit >= 0:
            found = _valid_at(buf, start + hit, expected)
            if found is not None:
                return found
            hit = chunk.find(frame.MAGIC, hit + 1)
        start += _SCAN_CHUNK
    return None


def _valid_at(buf: pa.Buffer, pos: int, expected: int) -> Frame | None:
    try:
        header = frame.unpack_header(buf, pos)
    except FrameError:
        return None
    if header.is_schema or header.base_offset < expected or not frame.verify(buf, pos, header):
        return None
    return Frame(pos, header)
