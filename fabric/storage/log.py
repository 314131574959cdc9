"""A Log: one partition's ordered segments, its high watermark and its lock.

Appends (from any process) take the partition lock, bring this process's view of the tail up to date,
recover it if a previous writer died mid-append, write the frame, then advance the high watermark.
Reads take no lock (beyond a one-time index check per segment): they read whole, CRC-checked frames below
the high watermark.
"""
from __future__ import annotations

import bisect
import json
import os
import struct
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.codecs import CODECS
from fabric.common.config import TopicConfig
from fabric.common.errors import CorruptRecordError, OffsetOutOfRangeError
from fabric.common.records import LOG_APPEND_TIME, TIMESTAMP, TIMESTAMP_TYPES
from fabric.storage import frame
from fabric.storage.frame import FrameHeader
from fabric.storage.index import OffsetIndex, TimeIndex
from fabric.storage.lock import PartitionLock
from fabric.storage.segment import DATA_SUFFIX, INDEX_SUFFIX, TIME_SUFFIX, Segment
from fabric.storage.watermark import HighWatermark

PENDING = "pending-publish"
RETENTION_CHECK_MS = 30_000
_BASE_OFFSET = struct.Struct("<q")  # a frame header's base offset, at byte 8 (outside the CRC)


class Log:
    """The partition log in `directory`, whose batches are stored with `schema`."""

    def __init__(self, directory: str, schema: pa.Schema, config: TopicConfig,
                 resolve_pending: Callable[[str], bool] | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.directory = directory
        self.schema = schema
        self.config = config
        os.makedirs(directory, exist_ok=True)
        self.lock = PartitionLock(os.path.join(directory, ".lock"))
        self.hw = HighWatermark(os.path.join(directory, "high-watermark"))
        self._resolve_pending = resolve_pending or (lambda txn: False)
        self._segments: dict[int, Segment] = {}
        self._tail_state: tuple | None = None
        self._unflushed = 0
        self.clock = clock
        self._last_flush = self._last_retention = clock.now_ms()

    # -- segments ----------------------------------------------------------------------------------
    def segments(self) -> list[Segment]:
        """The segments on disk now, oldest first (objects are cached per base offset)."""
        bases = sorted(int(name[:-len(DATA_SUFFIX)]) for name in os.listdir(self.directory)
                       if name.endswith(DATA_SUFFIX) and name[:-len(DATA_SUFFIX)].isdigit())
        cache = {b: self._segments.get(b) or Segment(self.directory, b) for b in bases}
        self._segments = cache
        return list(cache.values())

    @property
    def start_offset(self) -> int:
        """The log start offset: the first offset not yet deleted by retention."""
        segs = self.segments()
        return min(segs[0].base_offset, self.end_offset) if segs else self.end_offset

    @property
    def end_offset(self) -> int:
        """The high watermark: one past the last committed offset."""
        return self.hw.value

    @property
    def timestamp_type(self) -> int:
        """CreateTime (0) or LogAppendTime (1), from the topic's message.timestamp.type."""
        return TIMESTAMP_TYPES[self.config["message.timestamp.type"]]

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments())

    # -- recovery ----------------------------------------------------------------------------------
    def sync_tail(self) -> Segment:
        """Bring the tail up to date under the lock; remove anything a dead writer left past the
        high watermark (or roll it forward if its publish was committed). Returns the active segment."""
        segs = self.segments()
        hw = self.end_offset
        state = (segs[-1].base_offset, segs[-1].size, hw) if segs else None
        if state is not None and state == self._tail_state:
            return segs[-1]
        marker = self.pending()
        if marker is not None:
            if self._resolve_pending(marker["txn"]) and marker["end"] > hw:
                hw = marker["end"]
                self.hw.set(hw)
            os.unlink(os.path.join(self.directory, PENDING))
        for seg in segs[1:]:
            if seg.base_offset > hw:
                seg.delete()
        segs = [s for s in segs if s.base_offset <= hw] or []
        if not segs:
            active = Segment.create(self.directory, hw, self.schema)
            segs = [active]
        active = segs[-1]
        try:
            active.data_start  # noqa: B018 (reads and checks the schema frame)
        except CorruptRecordError:
            if active.base_offset != hw:
                raise
            active = Segment.create(self.directory, hw, self.schema)
            self._segments[hw] = active
        self._check_indexes(segs[:-1] + [active])
        pos, _ = active.locate(hw, active.size)
        if active.size > pos:
            active.truncate(pos)
        self._tail_state = (active.base_offset, active.size, hw)
        return active

    def _check_indexes(self, segs: list[Segment]) -> None:
        """Rebuild any missing or broken index, once per segment object (under the lock: a rebuild
        rewrites the index files). Lookups through a broken index would skip or misplace records."""
        unchecked = [s for s in segs if not s._indexes_checked]
        if unchecked:
            with self.lock:
                for seg in unchecked:
                    try:
                        seg.check_indexes()
                    except FileNotFoundError:
                        pass  # deleted by retention meanwhile; reads report that themselves

    # -- appends -----------------------------------------------------------------------------------
    @staticmethod
    def encode(batch: pa.RecordBatch, codec: str = "none", timestamp_type: int = 0, clock: Clock = SYSTEM_CLOCK
               ) -> tuple[FrameHeader, pa.Buffer]:
        """Encode stored rows into an unsealed frame header (base offset 0) and its payload; with LogAppendTime
        every row is stamped with `clock`'s time now."""
        if timestamp_type == LOG_APPEND_TIME:
            stamp = pa.scalar(clock.now_us(), TIMESTAMP)
            batch = batch.set_column(0, "timestamp", pa.repeat(stamp, batch.num_rows))
        ts = batch.column(0)
        if batch.num_rows:
            first, max_ts = ts[0].value, pc.max(ts).value
        else:
            first = max_ts = -1
        attrs = CODECS[codec].attribute | (frame.ATTR_LOG_APPEND_TIME if timestamp_type == LOG_APPEND_TIME else 0)
        return FrameHeader(0, 0, batch.num_rows, first, max_ts, attrs), frame.encode_batch(batch, codec)

    def append(self, batch: pa.RecordBatch, codec: str = "none", timestamp_type: int = 0) -> int:
        """Append a batch of stored rows; returns the offset of its first row."""
        template, payload = self.encode(batch, codec, timestamp_type, self.clock)
        with self.lock:
            base = self.end_offset
            self.write_frame(frame.seal(template.rebased(base), payload), payload)
            self.commit(base + batch.num_rows)
        return base

    def write_frame(self, header: FrameHeader, payload: pa.Buffer | bytes) -> None:
        """Write one sealed frame at the tail, rolling first if due (caller holds the lock)."""
        active = self.sync_tail()
        has_data = active.size > active.data_start
        if has_data and self._roll_due(active, header):
            active = Segment.create(self.directory, header.base_offset, self.schema)
            self._segments[header.base_offset] = active
            self._maybe_retain(force=True)
        active.append(header, payload, self.config["index.interval.bytes"])
        self._tail_state = (active.base_offset, active.size, self._tail_state[2] if self._tail_state else 0)
        self._unflushed += header.record_count

    def commit(self, end_offset: int) -> None:
        """Advance the high watermark to `end_offset`, fsyncing if the flush policy asks (lock held)."""
        self.hw.set(end_offset)
        if self._tail_state:
            self._tail_state = self._tail_state[:2] + (end_offset,)
        now = self.clock.now_ms()
        if self._unflushed >= self.config["flush.messages"] or now - self._last_flush >= self.config["flush.ms"]:
            self.flush()
        self._maybe_retain()

    def flush(self) -> None:
        """fsync the active segment, the high watermark and the directory (so a rolled or adopted
        segment's name is durable too)."""
        segs = self.segments()
        if segs:
            segs[-1].fsync()
        self.hw.fsync()
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unflushed = 0
        self._last_flush = self.clock.now_ms()

    def _roll_due(self, active: Segment, header: FrameHeader) -> bool:
        if active.size + header.size > self.config["segment.bytes"]:
            return True
        first = next(active.headers(active.data_start, active.size), None)
        return first is not None and self.clock.now_ms() - first[1].max_timestamp // 1000 >= self.config["segment.ms"]

    def pending(self) -> dict | None:
        """The pending-publish marker ({"txn", "end"}) a publish left here, if any (read without the lock it
        is a hint; recovery under the lock decides)."""
        try:
            with open(os.path.join(self.directory, PENDING)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def begin_publish(self, txn: str, end_offset: int) -> None:
        """Mark that frames of transaction `txn` up to `end_offset` are being written (lock held)."""
        path = os.path.join(self.directory, PENDING)
        with open(path + ".tmp", "w") as f:
            json.dump({"txn": txn, "end": end_offset}, f)
        os.replace(path + ".tmp", path)

    def adopt_segment(self, path: str, frames: list[tuple[FrameHeader, pa.Buffer]], base_offset: int) -> bool:
        """Make the staged file `path` the new active segment at `base_offset` instead of copying it (lock
        held, under a pending-publish marker). `frames` are its verified frames: a schema frame, then data
        frames based from 0. Returns False (nothing done) if it cannot be adopted; copy its frames then.

        Steps: re-base the frames in place (the CRC leaves the base offset out), write the indexes beside
        it, drop an empty active segment, rename the file into the partition, then its indexes. A crash at
        any step leaves a state sync_tail recovers like a copied publish: a renamed segment whose indexes
        did not follow gets them rebuilt; an uncommitted one is cut back to its schema frame or deleted."""
        active = self.sync_tail()
        schema_header, schema_payload = frames[0]
        if (not schema_header.is_schema or base_offset != active.last_frame_end(active.size)[1]
                or os.path.getsize(path) >= min(self.config["segment.bytes"], 1 << 32)
                or not frame.decode_schema(schema_payload).equals(self.schema)):
            return False
        offsets, times, max_ts, pos, last_pos = [], [], None, 0, None
        interval = self.config["index.interval.bytes"]
        fd = os.open(path, os.O_RDWR)
        try:
            for header, _ in frames:
                os.pwrite(fd, _BASE_OFFSET.pack(base_offset + header.base_offset), pos + 8)
                if not header.is_schema:
                    if last_pos is None or pos - last_pos >= interval:
                        offsets.append((header.base_offset, pos))
                        last_pos = pos
                    if header.record_count and (max_ts is None or header.max_timestamp > max_ts):
                        times.append((header.max_timestamp, header.base_offset))
                        max_ts = header.max_timestamp
                pos += header.size
            if pos != os.fstat(fd).st_size:
                raise CorruptRecordError(f"staged segment {path} has bytes after its last frame")
        finally:
            os.close(fd)
        index, timeindex = OffsetIndex(path + INDEX_SUFFIX), TimeIndex(path + TIME_SUFFIX)
        index.reset(offsets)
        timeindex.reset(times)
        if active.size == active.data_start:
            active.delete()
            self._segments.pop(active.base_offset, None)
        seg = Segment(self.directory, base_offset)
        os.rename(path, seg.path)
        os.rename(index.path, seg.index.path)
        os.rename(timeindex.path, seg.timeindex.path)
        seg._indexes_checked = True
        self._segments[base_offset] = seg
        self._tail_state = (base_offset, seg.size, self._tail_state[2] if self._tail_state else self.end_offset)
        self._unflushed += sum(h.record_count for h, _ in frames)
        return True

    def forget_tail(self) -> None:
        """Drop the cached tail state, so the next writer recovers the tail (after a failed publish)."""
        self._tail_state = None

    def finish_publish(self, end_offset: int) -> None:
        """Make a committed transaction's frames visible and drop its marker (lock held)."""
        self.commit(end_offset)
        os.unlink(os.path.join(self.directory, PENDING))

    # -- retention ---------------------------------------------------------------------------------
    def _maybe_retain(self, force: bool = False) -> None:
        if force or self.clock.now_ms() - self._last_retention >= RETENTION_CHECK_MS:
            if os.path.exists(os.path.join(self.directory, PENDING)):
                return  # our own publish is mid-way (frames past the watermark): its sync_tail would undo it
            self.enforce_retention()

    def enforce_retention(self) -> int:
        """Delete whole old segments past retention.ms / retention.bytes; returns how many."""
        deleted = 0
        with self.lock:
            self._last_retention = self.clock.now_ms()
            active = self.sync_tail()
            segs = self.segments()
            retention_ms, retention_bytes = self.config["retention.ms"], self.config["retention.bytes"]
            expired = lambda s: (retention_ms >= 0 and s.timeindex.max_timestamp() is not None
                                 and s.timeindex.max_timestamp() // 1000 < self._last_retention - retention_ms)
            if expired(active) and active.size > active.data_start and len(segs) >= 1:
                active = Segment.create(self.directory, self.end_offset, self.schema)
                segs = self.segments()
            total = sum(s.size for s in segs)
            for seg in segs[:-1]:
                over = retention_bytes >= 0 and total - seg.size >= retention_bytes
                if not (expired(seg) or over):
                    break
                total -= seg.size
                seg.delete()
                deleted += 1
            self._tail_state = None
        return deleted

    # -- reads -------------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, end_offset: int | None = None
             ) -> Iterator[tuple[int, pa.RecordBatch, int]]:
        """(first offset, stored rows, timestamp type) of committed batches from `offset`, up to about
        `max_bytes` of frames (at least one batch) and below `end_offset` (default: the watermark)."""
        hw = self.end_offset
        end = hw if end_offset is None else min(end_offset, hw)
        segs = self.segments()
        start = min(segs[0].base_offset, hw) if segs else hw
        if not start <= offset <= hw:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the log's range [{start}, {hw}] in {self.directory}")
        bases = [s.base_offset for s in segs]
        i = max(bisect.bisect_right(bases, offset) - 1, 0)
        self._check_indexes(segs[i:])
        budget = max_bytes
        for seg in segs[i:]:
            if offset >= end or budget <= 0:
                return
            try:
                frames = list(self._frames(seg, offset, end, budget))
            except FileNotFoundError:
                raise OffsetOutOfRangeError(
                    f"offset {offset} was deleted by retention while being read in {self.directory}") from None
            for header, payload in frames:
                batch = frame.decode_batch(payload, seg.schema)
                lo = max(offset - header.base_offset, 0)
                hi = min(end - header.base_offset, header.record_count)
                if lo or hi < header.record_count:
                    batch = batch.slice(lo, hi - lo)
                ts_type = 1 if header.attributes & frame.ATTR_LOG_APPEND_TIME else 0
                yield header.base_offset + lo, batch, ts_type
                offset = header.base_offset + hi
                budget -= header.size

    @staticmethod
    def _frames(seg: Segment, offset: int, end: int, budget: int) -> Iterator[tuple[FrameHeader, pa.Buffer]]:
        for header, payload in seg.read(offset, end, seg.size):
            yield header, payload
            budget -= header.size
            if budget <= 0:
                return

    def offset_for_time(self, timestamp_us: int) -> int | None:
        """The earliest committed offset whose timestamp is >= timestamp_us, or None."""
        segs = self.segments()
        self._check_indexes(segs)
        maxima, running = [], None
        for seg in segs:
            ts = seg.timeindex.max_timestamp()
            running = ts if running is None else max(running, ts if ts is not None else running)
            maxima.append(-1 if running is None else running)
        i = bisect.bisect_left(maxima, timestamp_us)
        hw = self.end_offset
        for seg in segs[i:]:
            rel = seg.timeindex.first_at_or_after(timestamp_us)
            if rel is None:
                continue
            if seg.base_offset + rel >= hw:  # only uncommitted batches (past the watermark) reach it
                return None
            for base, batch, _ in self.read(max(seg.base_offset + rel, self.start_offset), 1, hw):
                mask = pc.greater_equal(batch.column(0), pa.scalar(timestamp_us, TIMESTAMP))
                idx = pc.index(mask, True).as_py()
                if idx >= 0:
                    return base + idx
        return None

    def sync_tail_locked(self) -> None:
        """Create or recover the tail under the lock (used when a partition is created or opened)."""
        with self.lock:
            self.sync_tail()
