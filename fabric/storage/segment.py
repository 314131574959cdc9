"""A Segment: one data file of frames plus its offset and time indexes, named by its base offset."""
from __future__ import annotations

import mmap
import os
from typing import Iterator

import pyarrow as pa

from fabric.common.errors import CorruptRecordError
from fabric.storage import frame
from fabric.storage.frame import FrameError, FrameHeader
from fabric.storage.index import OffsetIndex, TimeIndex

DATA_SUFFIX = ".arrows"
INDEX_SUFFIX = ".index"
TIME_SUFFIX = ".timeindex"


def segment_name(base_offset: int) -> str:
    """Kafka's naming: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}"


def write_all(fd: int, parts: list) -> None:
    """Write every byte of `parts` (os.writev may write less than asked)."""
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]


class Segment:
    """The frames of offsets [base_offset, next segment's base) and their indexes."""

    def __init__(self, directory: str, base_offset: int) -> None:
        self.base_offset = base_offset
        stem = os.path.join(directory, segment_name(base_offset))
        self.path = stem + DATA_SUFFIX
        self.index = OffsetIndex(stem + INDEX_SUFFIX)
        self.timeindex = TimeIndex(stem + TIME_SUFFIX)
        self._buffer: pa.Buffer | None = None
        self._schema: pa.Schema | None = None
        self._data_start = 0
        self._indexes_checked = False

    # -- creation and the schema frame ---------------------------------------------------------------
    @classmethod
    def create(cls, directory: str, base_offset: int, schema: pa.Schema) -> Segment:
        """A new segment holding only its schema frame (replacing any torn leftover of the same name)."""
        seg = cls(directory, base_offset)
        header, payload = frame.schema_frame(schema, base_offset)
        tmp = seg.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, [header.pack(), payload])
        finally:
            os.close(fd)
        seg.index.reset([])
        seg.timeindex.reset([])
        os.replace(tmp, seg.path)
        return seg

    @property
    def size(self) -> int:
        return os.path.getsize(self.path)

    def view(self, upto: int | None = None) -> pa.Buffer:
        """A zero-copy buffer over the mapped file, covering at least `upto` bytes (default: all)."""
        if self._buffer is None or (upto or self.size) > self._buffer.size:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._buffer = pa.py_buffer(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)) \
                    if size else pa.py_buffer(b"")
        return self._buffer

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema every batch in this segment is encoded against (CorruptRecordError if its schema
        frame is missing or damaged)."""
        if self._schema is None:
            self._schema = self._read_schema_frame()
        return self._schema

    def _read_schema_frame(self) -> pa.Schema:
        """Decode the schema frame at byte 0 and note where the data frames start."""
        buf = self.view(frame.HEADER_SIZE)
        try:
            header = frame.unpack_header(buf)
        except FrameError:
            raise CorruptRecordError(f"segment {self.path} has no valid schema frame") from None
        if not header.is_schema or not frame.verify(buf, 0, header):
            raise CorruptRecordError(f"segment {self.path} has a corrupt schema frame")
        self._data_start = header.size
        return frame.decode_schema(buf.slice(frame.HEADER_SIZE, header.length))

    @property
    def data_start(self) -> int:
        """Byte position of the first data frame."""
        if self._schema is None:
            self._schema = self._read_schema_frame()
        return self._data_start

    # -- scanning ----------------------------------------------------------------------------------
    def headers(self, pos: int, end: int) -> Iterator[tuple[int, FrameHeader]]:
        """(position, header) of each whole frame from `pos` while it ends at or before byte `end`."""
        buf = self.view(end)
        while pos + frame.HEADER_SIZE <= end:
            try:
                header = frame.unpack_header(buf, pos)
            except FrameError:
                return
            if pos + header.size > end:
                return
            yield pos, header
            pos += header.size

    def locate(self, offset: int, end: int) -> tuple[int, FrameHeader | None]:
        """The frame holding `offset` (position, header), or (position after the last frame, None)."""
        hit = self.index.floor(offset - self.base_offset)
        pos = max(hit[1], self.data_start) if hit else self.data_start
        for at, header in self.headers(pos, end):
            if header.next_offset > offset:
                return at, header
            pos = at + header.size
        return pos, None

    def read(self, offset: int, end_offset: int, end: int) -> Iterator[tuple[FrameHeader, pa.Buffer]]:
        """Verified (header, payload) of the frames overlapping [offset, end_offset)."""
        pos, header = self.locate(offset, end)
        if header is None:
            return
        buf = self.view(end)
        for at, header in self.headers(pos, end):
            if header.base_offset >= end_offset:
                return
            if not frame.verify(buf, at, header):
                raise CorruptRecordError(
                    f"batch at offset {header.base_offset} in {self.path} failed its CRC check; "
                    "it will not be served (restore the segment or skip past it with a seek)")
            yield header, buf.slice(at + frame.HEADER_SIZE, header.length)

    def last_frame_end(self, end: int) -> tuple[int, int]:
        """(position after the last whole frame below byte `end`, the next offset there)."""
        last = self.index.last()
        pos = max(last[1], self.data_start) if last else self.data_start
        next_offset = self.base_offset
        for at, header in self.headers(pos, end):
            next_offset = header.next_offset
            pos = at + header.size
        if last and next_offset == self.base_offset:
            next_offset = self.base_offset + last[0]
        return pos, next_offset

    # -- writing (callers hold the partition lock) -------------------------------------------------
    def append(self, header: FrameHeader, payload: pa.Buffer | bytes, index_interval: int) -> int:
        """Append one sealed frame and index it; returns its byte position."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            pos = os.fstat(fd).st_size
            write_all(fd, [header.pack(), payload])
        finally:
            os.close(fd)
        rel = header.base_offset - self.base_offset
        last = self.index.last()
        if last is None or pos - last[1] >= index_interval:
            self.index.append(rel, pos)
        max_ts = self.timeindex.max_timestamp()
        if header.record_count and (max_ts is None or header.max_timestamp > max_ts):
            self.timeindex.append(header.max_timestamp, rel)
        return pos

    def fsync(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def truncate(self, position: int) -> None:
        """Cut the data file at `position` and drop index entries pointing at or past it."""
        pos, next_offset = self.last_frame_end(position)
        with open(self.path, "r+b") as f:
            f.truncate(position)
        self._buffer = None
        self.index.truncate_entries(self.index.count_below(position))
        self.timeindex.truncate_entries(self.timeindex.count_below(next_offset - self.base_offset))

    def check_indexes(self) -> bool:
        """Rebuild the indexes from the frames if they are missing, torn or inconsistent.

        Returns True if they had to be rebuilt."""
        if self._indexes_checked:
            return False
        self._indexes_checked = True
        size = self.size
        ok = (os.path.exists(self.index.path) and os.path.exists(self.timeindex.path)
              and self.index.is_consistent(size) and self.timeindex.is_consistent(2**32))
        last = self.index.last() if ok else None
        if last is not None:
            rel, pos = last
            try:
                header = frame.unpack_header(self.view(pos + frame.HEADER_SIZE), pos)
                ok = header.base_offset == self.base_offset + rel
            except FrameError:
                ok = False
        if ok:  # the time index may only name batches that exist (2**32 let any stale entry through)
            _, next_offset = self.last_frame_end(size)
            ok = self.timeindex.is_consistent(next_offset - self.base_offset - 1) or not len(self.timeindex)
        if not ok:
            self.rebuild_indexes(index_interval=4096)
        return not ok

    def rebuild_indexes(self, index_interval: int) -> None:
        """Recreate both indexes by scanning the frame headers (no payload is read)."""
        offsets, times = [], []
        last_pos, max_ts = None, None
        for pos, header in self.headers(self.data_start, self.size):
            rel = header.base_offset - self.base_offset
            if last_pos is None or pos - last_pos >= index_interval:
                offsets.append((rel, pos))
                last_pos = pos
            if header.record_count and (max_ts is None or header.max_timestamp > max_ts):
                times.append((header.max_timestamp, rel))
                max_ts = header.max_timestamp
        self.index.reset(offsets)
        self.timeindex.reset(times)
        self._indexes_checked = True

    def delete(self) -> None:
        """Remove the data file and both indexes (open maps stay readable until dropped)."""
        for path in (self.path, self.index.path, self.timeindex.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
