"""A Segment: one data file of frames plus its offset and time indexes, named by its base offset."""
from __future__ import annotations

import logging
import os
from typing import Iterator

import pyarrow as pa

from fabric.common import vectored
from fabric.common.errors import CorruptRecordError
from fabric.storage import frame, txn_index
from fabric.storage.frame import FrameError, FrameHeader
from fabric.storage.index import OffsetIndex, TimeIndex
from fabric.storage.index_builder import IndexBuilder
from fabric.storage.mapcache import MAPS
from fabric.storage.open_files import DIRECT, DirectFiles
from fabric.storage.pacing import paced
from fabric.storage.scan import Damage, Frame, Walk, resync

log = logging.getLogger(__name__)

DATA_SUFFIX = ".arrows"
INDEX_SUFFIX = ".index"
TIME_SUFFIX = ".timeindex"
TXN_SUFFIX = ".txnindex"


def segment_name(base_offset: int) -> str:
    """Kafka's naming: the base offset as 20 zero-padded digits."""
    return f"{base_offset:020d}"


def disk_usage(segments: list[Segment]) -> tuple[int, int]:
    """(segments, bytes) of those still on disk: one that retention or the cleaner deletes after it was listed
    counts as gone, not as an error (describe runs beside them, in this process or another)."""
    count = total = 0
    for seg in segments:
        try:
            total += seg.size
        except FileNotFoundError:
            continue
        count += 1
    return count, total


def write_all(fd: int, parts: list) -> None:
    """Write every byte of `parts` to file descriptor `fd` (os.writev may write less than asked)."""
    vectored.write_all(lambda views: os.writev(fd, views), parts)


class StaleIndexError(CorruptRecordError):
    """An index entry names a frame that is not there (the Log rebuilds the index, or reads without it)."""


class Segment:
    """The frames of offsets [base_offset, next segment's base) and their indexes. `schema` (the topic's
    storage schema) decodes the batches if the segment's own schema frame is damaged."""

    def __init__(self, directory: str, base_offset: int, schema: pa.Schema | None = None) -> None:
        self.base_offset = base_offset
        stem = os.path.join(directory, segment_name(base_offset))
        self.path = stem + DATA_SUFFIX
        self.index = OffsetIndex(stem + INDEX_SUFFIX)
        self.timeindex = TimeIndex(stem + TIME_SUFFIX)
        self.txn_index_path = stem + TXN_SUFFIX  # (txn_index)
        self.fallback_schema = schema
        self._schema: pa.Schema | None = None
        self._data_start = 0
        self._inode = -1  # of the file the schema frame was read from
        self._indexes_checked = False
        self.use_index = True  # False: the index is broken and cannot be rebuilt here (a read-only directory)
        self._first: FrameHeader | None = None  # the first data frame: it never changes while it exists
        self._builder: IndexBuilder | None = None  # this writer's indexing state (see append)
        self._tail_hint: tuple[int, int] | None = None  # (byte position, offset) of the newest frame start seen

    # -- creation and the schema frame ---------------------------------------------------------------
    @classmethod
    def create(cls, directory: str, base_offset: int, schema: pa.Schema) -> Segment:
        """A new segment holding only its schema frame (replacing any torn leftover of the same name)."""
        seg = cls(directory, base_offset, schema)
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
        MAPS.forget(seg.path)
        seg._indexes_checked = True
        return seg

    @property
    def size(self) -> int:
        return os.path.getsize(self.path)

    def view(self) -> pa.Buffer:
        """A zero-copy buffer over the mapped file as it is now (a shared, bounded map: see mapcache)."""
        return MAPS.get(self.path)

    def mapped(self) -> tuple[pa.Buffer, int]:
        """view(), and the inode of the file it maps: a read that looks at the file once (schema_of) and checks
        afterwards that it was not replaced meanwhile stats it no more than that."""
        return MAPS.mapped(self.path)

    def schema_of(self, inode: int) -> pa.Schema:
        """The schema of the file of `inode` (from mapped()); afterwards known_data_start is that file's."""
        return self._schema_frame(inode)[0]

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema every batch in this segment is encoded against (the topic's, if the schema frame is
        damaged; CorruptRecordError if there is none to fall back on)."""
        return self._schema_frame()[0]

    @property
    def data_start(self) -> int:
        """Byte position of the first data frame."""
        return self._schema_frame()[1]

    def _schema_frame(self, inode: int | None = None) -> tuple[pa.Schema, int]:
        """(schema, data start) of the file now (or of `inode`'s, just looked at), read again if the file was
        replaced (a recreated or adopted segment)."""
        inode = os.stat(self.path).st_ino if inode is None else inode
        if self._schema is None or inode != self._inode:
            if self._inode != -1:  # replaced (a compacted copy): its indexes are new files, checked again
                self._indexes_checked = False
                self.forget_writes()
            self._schema, self._data_start = self._read_schema_frame()
            self._inode = inode
        return self._schema, self._data_start

    @property
    def known_schema(self) -> pa.Schema:
        """schema as last read, without checking that the file was not replaced since (as known_data_start)."""
        return self._schema if self._schema is not None else self.schema

    @property
    def known_data_start(self) -> int:
        """data_start as last read, without checking that the file was not replaced since (for a writer whose
        partition lock says no one else took it since: LogTail.trusted_tail)."""
        return self._data_start if self._schema is not None else self.data_start

    @property
    def schema_frame_ok(self) -> bool:
        """True if the file starts with a whole, valid schema frame."""
        buf = self.view()
        try:
            header = frame.unpack_header(buf, 0)
        except FrameError:
            return False
        return header.is_schema and frame.verify(buf, 0, header)

    def _read_schema_frame(self) -> tuple[pa.Schema, int]:
        """Decode the schema frame at byte 0; (schema, position of the first data frame)."""
        buf = self.view()
        try:
            header: FrameHeader | None = frame.unpack_header(buf, 0)
        except FrameError:
            header = None
        if header is not None and header.is_schema and frame.verify(buf, 0, header):
            return frame.decode_schema(buf.slice(frame.HEADER_SIZE, header.length)), header.size
        if self.fallback_schema is None:
            raise CorruptRecordError(f"segment {self.path} has no valid schema frame; restore it from a backup")
        first = resync(buf, 0, self.base_offset, header) if buf.size else None
        start = buf.size if first is None else first.position
        if buf.size:
            log.warning("segment %s: its schema frame is damaged; its batches (from byte %d) are decoded with the "
                        "topic's schema", self.path, start)
        return self.fallback_schema, start

    # -- walking -----------------------------------------------------------------------------------
    def walk(self, position: int, expected: int, buf: pa.Buffer | None = None, **options: int | None) -> Walk:
        """The frames from byte `position` (where offset `expected` starts) of the data file, or of `buf` (a view
        of it taken earlier): see scan.Walk for the options."""
        return Walk(self.path, self.view() if buf is None else buf, position, expected, **options)

    def start(self, offset: int, buf: pa.Buffer | None = None) -> tuple[int, int]:
        """Where to start walking to reach `offset`: (byte position, the offset starting there), from the offset
        index if its entry names the frame found there (StaleIndexError if it does not). `buf`: the file's view
        a read took (mapped(), its schema_of known), else one taken now."""
        if self.use_index:
            hit = self.index.floor(offset - self.base_offset)
            if hit is not None:
                rel, pos = hit
                header = self.header_at(pos, buf)
                if header is None or header.base_offset != self.base_offset + rel:
                    found = "no data frame" if header is None else f"a frame of offset {header.base_offset}"
                    raise StaleIndexError(f"index {self.index.path}: its entry for offset {self.base_offset + rel} "
                                          f"points at byte {pos}, where there is {found}")
                return pos, self.base_offset + rel
        return self.data_start, self.base_offset

    def nearer_start(self, start: tuple[int, int], offset: int, buf: pa.Buffer | None = None) -> tuple[int, int]:
        """Where a read of `offset` walks from: `start` (see start()), or the newest frame start this object saw
        (saw_frame_start) if it lies between them and a frame of that offset is still there. A reader at the
        tail then walks no frame it has read already. `buf`: as for start()."""
        hint = self._tail_hint
        if hint is None or not start[1] < hint[1] <= offset:
            return start
        header = self.header_at(hint[0], buf)
        if header is not None and header.base_offset == hint[1]:
            return hint
        self._tail_hint = None  # the file changed under it (cut back or replaced)
        return start

    def header_at(self, pos: int, buf: pa.Buffer | None = None) -> FrameHeader | None:
        """The header of the data frame starting at byte `pos` (of `buf`, as for start(), else of the file now), or
        None if none does."""
        try:
            header = frame.unpack_header(self.view() if buf is None else buf, pos)
        except FrameError:
            return None
        return None if header.is_schema or pos < (self.data_start if buf is None else self.known_data_start) \
            else header

    def saw_frame_start(self, position: int, offset: int) -> None:
        """Note that a frame of base offset `offset` starts (or the next will) at byte `position`: where the next
        read from `offset` on starts walking if that is past its index entry (nearer_start checks the header
        there first). Kept while it is the newest; forget_writes() drops it."""
        hint = self._tail_hint
        if hint is None or offset >= hint[1]:
            self._tail_hint = position, offset

    def read(self, offset: int, end_offset: int, limit: int, start: tuple[int, int], buf: pa.Buffer | None = None
             ) -> Iterator[Frame | Damage]:
        """The CRC-checked frames overlapping [offset, end_offset), and the damage among them, walking from
        `start` (see start()) in `buf` (default: a view taken now); `limit` is the offset this segment's frames
        reach (the next segment's base, or the watermark)."""
        for item in self.walk(*start, buf, stop=end_offset, verify_from=offset, limit=limit):
            if isinstance(item, Frame):
                if item.header.next_offset <= offset:
                    continue
                self.saw_frame_start(item.position, item.header.base_offset)
            elif item.next_offset is not None and item.next_offset <= offset:
                continue
            yield item

    def frame_of(self, offset: int, start: tuple[int, int]) -> Frame | None:
        """The frame starting at exactly `offset`, by its header, walking from `start` (None if there is none)."""
        for item in self.walk(*start, stop=offset + 1):
            if isinstance(item, Frame) and item.header.base_offset == offset:
                return item
        return None

    def first_frame(self) -> FrameHeader | None:
        """The header of the first data frame, if there is one."""
        if self._first is None:
            self._first = next((item.header for item in self.walk(self.data_start, self.base_offset)
                                if isinstance(item, Frame)), None)
        return self._first

    def end(self, start: tuple[int, int] | None = None) -> Walk:
        """A finished walk from `start` (default: the last indexed frame) to the end of the data: its `position`
        and `expected` say where the frames end, checked by their CRC (this is where a writer appends)."""
        pos, expected = start or self.start(2**62)
        walk = self.walk(pos, expected, verify_from=expected)
        for _ in walk:
            pass
        return walk

    # -- writing (callers hold the partition lock) -------------------------------------------------
    def append(self, header: FrameHeader, payload: pa.Buffer | bytes, index_interval: int,
               position: int | None = None, files: DirectFiles = DIRECT) -> int:
        """Append one sealed frame and index it; returns its byte position. The indexing state is read from the
        index files once, then kept while this object is the only writer (forget_writes() drops it). A caller
        that knows no one else wrote since this object last did (LogTail.trusted_tail) gives the file's
        size as `position`: then nothing is read back, neither the size nor the indexes' last entries. The files
        are opened through `files` (open_files: an append may find them open still)."""
        fd = files.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            pos = os.fstat(fd).st_size if position is None else position
            write_all(fd, [header.pack(), payload])
        finally:
            files.done(fd)
        builder = self._builder  # (a reader may drop it meanwhile: forget_writes, unlocked)
        if builder is None or builder.interval != index_interval:
            builder = self._builder = IndexBuilder.resume(self.base_offset, index_interval, self.index,
                                                          self.timeindex)
        builder.add(pos, header)
        builder.append_to(self.index, self.timeindex, trusted=position is not None, files=files)
        self.saw_frame_start(pos, header.base_offset)
        return pos

    def forget_writes(self) -> None:
        """Drop what this object remembers of its files' tail (another writer, or recovery, changed them)."""
        self._builder = None
        self._first = None
        self._tail_hint = None

    def fsync(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the data file at `position`, where offset `next_offset` would start, and drop the index entries
        of what was cut."""
        txn_index.remove(self)
        with open(self.path, "r+b") as f:
            f.truncate(position)
        MAPS.forget(self.path)
        self.forget_writes()
        self.index.truncate_entries(self.index.count_below(position))
        self.timeindex.truncate_entries(self.timeindex.count_below(next_offset - self.base_offset))

    def indexes_consistent(self) -> bool:
        """True if both indexes exist, are whole and increase, the offset index points inside the data file, and
        the time index's last entry names a frame with that max timestamp which no later frame exceeds (a time
        index cut short would hide the segment's later timestamps from time lookups)."""
        if not (os.path.exists(self.index.path) and os.path.exists(self.timeindex.path)):
            return False
        if not self.index.is_consistent(self.size) or self.timeindex.torn:
            return False
        entries = self.timeindex.entries
        if not len(entries):
            return not any(isinstance(i, Frame) and i.header.record_count and not i.header.is_gap
                           for i in self.walk(self.data_start, self.base_offset))
        if not self.timeindex.is_consistent(2**32):
            return False
        ts, rel = int(entries["ts"][-1]), int(entries["rel"][-1])
        try:
            start = self.start(self.base_offset + rel)
        except StaleIndexError:
            return False
        found = False
        for item in self.walk(*start):
            if isinstance(item, Frame) and item.header.base_offset == self.base_offset + rel:
                found = item.header.max_timestamp == ts
            elif isinstance(item, Frame) and item.header.record_count and item.header.max_timestamp > ts:
                return False
        return found

    def check_indexes(self, index_interval: int = 4096) -> bool:
        """Rebuild the indexes from the frames if they are missing, torn or inconsistent (once per object; the
        caller holds the lock). Returns True if they had to be rebuilt."""
        if self._indexes_checked:
            return False
        ok = self.indexes_consistent()
        if not ok:
            self.rebuild_indexes(index_interval)
        self._indexes_checked = True
        return not ok

    def rebuild_indexes(self, index_interval: int) -> None:
        """Recreate both indexes by walking the frame headers (damaged frames are left out)."""
        builder = IndexBuilder(self.base_offset, index_interval)
        for item in paced(self.walk(self.data_start, self.base_offset)):
            if isinstance(item, Frame):
                builder.add(item.position, item.header)
        builder.write(self.index, self.timeindex)
        self._indexes_checked = True
        self.use_index = True
        self._builder = None

    def delete(self) -> None:
        """Remove the data file and its indexes (buffers readers hold stay readable until dropped)."""
        MAPS.forget(self.path)
        txn_index.remove(self)
        for path in (self.path, self.index.path, self.timeindex.path):
            MAPS.forget(path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
