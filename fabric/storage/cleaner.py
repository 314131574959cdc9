"""The log cleaner: compaction of one partition's closed segments, as Kafka's LogCleaner does it.

A pass keeps, in the segments it may clean, the latest record of each key and drops the rest:
- It may clean whole closed segments below the first unstable offset (no open transaction's records) and the
  high watermark, whose newest record is older than min.compaction.lag.ms. On a replica log (a data node's)
  the high watermark is the replication one as this node knows it (Log.replication_high_watermark: the
  leader's, or a follower's as its last fetch told it), not the log end. It runs when the bytes not yet
  cleaned are at least min.cleanable.dirty.ratio of those segments, when a record has waited longer than
  max.compaction.lag.ms, or when asked (force: `fabric topics compact`).
- The key is the record's `key` column, for plain and typed topics alike. A record whose value is null is a
  tombstone: it deletes its key, and is itself dropped once delete.retention.ms has passed since a pass first
  cleaned it (cleaner_checkpoint). Records without a key, and records of aborted transactions, are dropped.
- Kept: transaction markers, and the last batch of each producer (under PRODUCER_ID_EXPIRATION_MS old) whole,
  so the producer and transaction states rebuilt from the headers stay what they were.
- Offsets keep their values. Removed records become gap frames (frame.gap_frame: a header, no payload), one per
  run of removed offsets in the same leader epoch, so a cleaned segment is as contiguous as any other and
  readers, followers and the leader-epoch cache see the same offsets and epochs as before. Frames whose records
  all stay are copied byte for byte; the others are re-encoded with their codec, header fields kept.

Consecutive segments are cleaned into one copy of at most segment.bytes, swapped in by segment_swap (crash-safe
at every step). The copy is written without the partition lock; the swap takes it and first checks that no
source changed meanwhile (retention, truncation or another cleaner), else the group is left for the next pass.
One cleaner runs per partition at a time, across processes (a lock file tried without waiting). Its walks are paced
(pacing.py): of every frame header (the producers' last batches), and the two of the records (the keys' latest
offsets, then the copy), which decide what to keep in plain Python over each frame's keys (a frame holds few
records: a compute call per frame cost more than the comparisons) and so hold the interpreter lock throughout.

Invariant (replica logs): every offset a pass rewrites is below the replication high watermark, so a cleaned
record is one every in-sync replica holds, and nothing a new leader could truncate (the uncommitted tail) is
ever cleaned. The plan stops there, and the swap refuses (AssertionError, nothing swapped) a copy that would
reach past the bound read again under the partition lock. While the bound is unknown nothing is cleaned.
"""
from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from fabric.common.codecs import CODECS
from fabric.storage import frame, segment_swap
from fabric.storage.cleaner_checkpoint import CleanerCheckpoint
from fabric.storage.frame import FrameHeader
from fabric.storage.index_builder import IndexBuilder
from fabric.storage.pacing import Pacer
from fabric.storage.scan import Damage, Frame
from fabric.storage.segment import Segment, write_all
from fabric.storage.segment_swap import CrashHook, Swap

if TYPE_CHECKING:
    from fabric.storage.log import Log

log = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_MS = 24 * 3600 * 1000  # Kafka's producer.id.expiration.ms: a producer silent this long
CLEANER_LOCK = ".cleaner-lock"
BUSY = "another process is cleaning it"  # the reason of a pass that found CLEANER_LOCK held
_CODEC_BY_ATTRIBUTE = {c.attribute: c.name for c in CODECS.values()}


@dataclass
class CleanReport:
    """What one pass over partition `partition` found and did (`reason` says why it cleaned or not)."""

    partition: str
    reason: str = ""
    cleaned_to: int = 0  # the pass cleaned the offsets below this
    segments_before: int = 0
    segments_after: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    skipped: list[str] = field(default_factory=list)  # groups left for a later pass, and why

    @property
    def cleaned(self) -> bool:
        return self.segments_before > 0

    def describe(self) -> str:
        if not self.cleaned:
            return f"{self.partition}: not compacted ({self.reason})"
        return (f"{self.partition}: compacted offsets below {self.cleaned_to} ({self.reason}): "
                f"{self.segments_before} segments into {self.segments_after}, {self.records_removed} records "
                f"removed ({self.tombstones_removed} tombstones), {self.bytes_before} -> {self.bytes_after} bytes"
                + "".join(f"; {s}" for s in self.skipped))


@dataclass(frozen=True)
class _Plan:
    """The segments a pass cleans and what it knows of them."""

    segments: list[Segment]
    ends: list[int]  # each segment's end offset (the next segment's base)
    stats: list[tuple[int, int]]  # each data file's (inode, size) when planned
    checkpoint: CleanerCheckpoint


class LogCleaner:
    """One cleaning pass over `plog` at time `now_ms`. `crash` is called at each swap step (tests only)."""

    def __init__(self, plog: Log, now_ms: int, crash: CrashHook = segment_swap._no_crash) -> None:
        self.log = plog
        self.now_ms = now_ms
        self.crash = crash
        self.report = CleanReport(plog.name)

    def run(self, force: bool = False) -> CleanReport:
        """Clean what is due (everything cleanable with `force`); returns the report, also logged at INFO."""
        report = self.report
        if "compact" not in self.log.config["cleanup.policy"]:
            report.reason = f"cleanup.policy is {self.log.config['cleanup.policy']}"
            return report
        lock_fd = os.open(os.path.join(self.log.directory, CLEANER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                report.reason = BUSY
                return report
            self._run_locked(force)
        finally:
            os.close(lock_fd)
        if report.cleaned:
            log.info("%s", report.describe())
        return report

    def _run_locked(self, force: bool) -> None:
        plog, report = self.log, self.report
        with plog.lock:
            done = segment_swap.complete(plog)
            if done:
                log.warning("%s: %s", plog.name, done)
            for path in segment_swap.remove_leftovers(plog.directory):
                log.warning("%s: removed %s, a cleaned copy a dead cleaner left unfinished", plog.name, path)
            if force:
                plog.roll()
            plan = self._plan()
        if plan is None:
            return
        due = self._due(plan)
        if due is None and not force:
            return
        report.reason = due or "asked for"
        latest = self._latest_offsets(plan)
        if latest is None:
            return
        producers = self._producers_last_batches(plan)
        for group in self._groups(plan):
            self._clean_group(plan, group, latest, producers)
        if not report.skipped:
            report.cleaned_to = plan.ends[-1]
            plan.checkpoint.after_pass(plan.ends[-1], self.now_ms,
                                       plog.config["delete.retention.ms"]).write(plog.directory)

    # -- planning ----------------------------------------------------------------------------------
    def _plan(self) -> _Plan | None:
        """The closed segments this pass may clean (lock held), or None with the reason in the report."""
        plog, report = self.log, self.report
        segs = plog.segments()
        if len(segs) < 2:
            report.reason = "only the active segment, which is never cleaned"
            return None
        bound = self._upper_bound()
        if bound is None:
            report.reason = "a replica log whose replication high watermark is not known yet"
            return None
        end = plog.last_stable_offset(bound)
        lag_ms = plog.config["min.compaction.lag.ms"]
        chosen: list[Segment] = []
        ends: list[int] = []
        for seg, nxt in zip(segs, segs[1:], strict=False):
            newest = seg.timeindex.max_timestamp()
            if nxt.base_offset > end or (newest is not None and newest // 1000 > self.now_ms - lag_ms):
                break
            chosen.append(seg)
            ends.append(nxt.base_offset)
        if not chosen:
            report.reason = ("no closed segment is below the high watermark and the first unstable offset and "
                             f"older than min.compaction.lag.ms ({lag_ms} ms)")
            return None
        stats = []
        for seg in chosen:
            st = os.stat(seg.path)
            stats.append((st.st_ino, st.st_size))
        return _Plan(chosen, ends, stats, CleanerCheckpoint.read(plog.directory))

    def _upper_bound(self) -> int | None:
        """The offset a pass cleans below: the log end, or on a replica log its replication high watermark
        (None while unknown)."""
        if not self.log.replica:
            return self.log.end_offset
        known = self.log.replication_high_watermark
        hw = known() if known is not None else -1
        return min(hw, self.log.end_offset) if hw >= 0 else None

    def _due(self, plan: _Plan) -> str | None:
        """Why the plan is due for cleaning (None, with the reason in the report, if it is not)."""
        config = self.log.config
        first_dirty = plan.checkpoint.first_dirty
        total = sum(size for _, size in plan.stats)
        dirty = sum(size for (_, size), end in zip(plan.stats, plan.ends, strict=True) if end > first_dirty)
        ratio = dirty / total if total else 0.0
        if dirty and ratio >= config["min.cleanable.dirty.ratio"]:
            return f"dirty ratio {ratio:.2f} >= min.cleanable.dirty.ratio {config['min.cleanable.dirty.ratio']}"
        max_lag = config["max.compaction.lag.ms"]
        for seg, end in zip(plan.segments, plan.ends, strict=True):
            first = seg.first_frame() if end > first_dirty else None
            if first is not None and first.first_timestamp >= 0 and \
                    self.now_ms - first.first_timestamp // 1000 >= max_lag:
                return f"records older than max.compaction.lag.ms ({max_lag} ms) are not compacted yet"
        self.report.reason = (f"dirty ratio {ratio:.2f} below min.cleanable.dirty.ratio "
                              f"{config['min.cleanable.dirty.ratio']}")
        return None

    def _frames(self, seg: Segment, buf: pa.Buffer, end: int) -> Iterator[Frame]:
        """The frames of `seg` (mapped as `buf`), which end at offset `end`; ValueError naming the damage if any."""
        for item in seg.walk(seg.known_data_start, seg.base_offset, buf, verify_from=seg.base_offset, limit=end):
            if isinstance(item, Damage):
                raise ValueError(item.describe())
            yield item

    def _records(self, plan: _Plan) -> Iterator[tuple[pa.Buffer, Frame, pa.RecordBatch | None]]:
        """Every frame of the plan with the segment's buffer it lies in and its decoded batch (None for frames whose
        records are not delivered). A segment's map and schema are looked up once for all its frames: a closed
        segment changes only by a swap, which checks its sources first (_unchanged)."""
        pace = Pacer()
        for seg, end in zip(plan.segments, plan.ends, strict=True):
            buf, inode = seg.mapped()
            schema = seg.schema_of(inode)
            for item in self._frames(seg, buf, end):
                pace()
                header = item.header
                if not header.delivered or (header.is_transactional and self.log.transactions.aborted(header)):
                    yield buf, item, None
                    continue
                payload = buf.slice(item.position + frame.HEADER_SIZE, header.length)
                yield buf, item, frame.decode_batch(payload, schema)

    def _latest_offsets(self, plan: _Plan) -> dict[bytes, int] | None:
        """Key -> offset of its latest record in the plan's segments (None, with the reason, on damage)."""
        latest: dict[bytes, int] = {}
        try:
            for _, item, batch in self._records(plan):
                if batch is not None:
                    base = item.header.base_offset
                    latest.update(zip(batch.column(1).to_pylist(), range(base, base + batch.num_rows), strict=True))
        except (ValueError, pa.ArrowException) as exc:
            self.report.reason = f"damaged records: {exc}; the partition is not compacted until they are skipped"
            log.warning("%s: not compacted: %s", self.log.name, self.report.reason)
            return None
        latest.pop(None, None)  # type: ignore[call-overload]
        return latest

    def _producers_last_batches(self, plan: _Plan) -> set[int]:
        """Base offsets of the batches to keep whole: each producer's last in the log, if in the plan and recent."""
        last: dict[int, FrameHeader] = {}
        for header in self.log.headers(self.log.end_offset):
            if header.producer_id >= 0 and not header.is_control:
                last[header.producer_id] = header
        horizon = self.now_ms - PRODUCER_ID_EXPIRATION_MS
        return {h.base_offset for h in last.values() if h.base_offset < plan.ends[-1]
                and h.max_timestamp // 1000 >= horizon}

    def _groups(self, plan: _Plan) -> Iterator[list[int]]:
        """Runs of consecutive plan indexes of at most segment.bytes together and of one schema."""
        limit = self.log.config["segment.bytes"]
        group: list[int] = []
        size = 0
        for i, seg in enumerate(plan.segments):
            if group and (size + plan.stats[i][1] > limit or not seg.schema.equals(plan.segments[group[0]].schema)):
                yield group
                group, size = [], 0
            group.append(i)
            size += plan.stats[i][1]
        if group:
            yield group

    # -- cleaning ----------------------------------------------------------------------------------
    def _clean_group(self, plan: _Plan, group: list[int], latest: dict[bytes, int], keep_whole: set[int]) -> None:
        """Write the cleaned copy of one group and swap it in (unless nothing changes or a source changed)."""
        plog, report = self.log, self.report
        segs = [plan.segments[i] for i in group]
        swap = Swap(segs[0].base_offset, plan.ends[group[-1]], tuple(s.base_offset for s in segs))
        sub = _Plan(segs, [plan.ends[i] for i in group], [plan.stats[i] for i in group], plan.checkpoint)
        path = swap.cleaned_path(plog.directory)
        writer = _CopyWriter(path, segs[0].schema, swap.base, plog.config["index.interval.bytes"])
        try:
            removed, tombstones = self._write_copy(sub, latest, keep_whole, writer)
        except BaseException:
            writer.abandon()
            raise
        if writer.end != swap.end:
            writer.abandon()
            raise AssertionError(f"{plog.name}: the cleaned copy ends at {writer.end}, not {swap.end}")
        if not removed and len(segs) == 1:
            writer.abandon()
            return
        with plog.lock:
            if not self._unchanged(sub):
                writer.abandon()
                report.skipped.append(f"segments {list(swap.sources)} changed while being cleaned: left for the "
                                      "next pass")
                return
            bound = self._upper_bound()  # sources unchanged, so a truncation cannot have lowered it below them
            if bound is None or swap.end > bound:
                writer.abandon()
                raise AssertionError(f"{plog.name}: refusing to swap in the cleaned copy of offsets {swap.base}.."
                                     f"{swap.end - 1}: it reaches past the cleaner's bound {bound} (the replication "
                                     "high watermark moved back); nothing was swapped")
            segment_swap.swap_in(plog, swap, writer.builder, self.crash)
        report.segments_before += len(segs)
        report.segments_after += 1
        report.records_removed += removed
        report.tombstones_removed += tombstones
        report.bytes_before += sum(size for _, size in sub.stats)
        report.bytes_after += writer.position

    def _unchanged(self, plan: _Plan) -> bool:
        """True if every source of `plan` is still there as planned (lock held)."""
        for seg, (ino, size) in zip(plan.segments, plan.stats, strict=True):
            try:
                st = os.stat(seg.path)
            except FileNotFoundError:
                return False
            if (st.st_ino, st.st_size) != (ino, size):
                return False
        return True

    def _write_copy(self, plan: _Plan, latest: dict[bytes, int], keep_whole: set[int],
                    writer: _CopyWriter) -> tuple[int, int]:
        """Write the kept records of the plan's segments and the gaps between them; (records removed,
        tombstones removed)."""
        removed = tombstones = 0
        retention_ms = self.log.config["delete.retention.ms"]
        for buf, item, batch in self._records(plan):
            header = item.header
            if header.is_control or header.is_gap or header.base_offset in keep_whole:
                writer.copy(buf, item)
                continue
            if batch is None:  # an aborted transaction's records
                writer.gap(header.base_offset, header.record_count, header.leader_epoch)
                removed += header.record_count
                continue
            keep = _latest_of(batch, header.base_offset, latest)
            values = batch.column(3)
            if values.null_count:
                cleaned_at = plan.checkpoint.cleaned_at(header.base_offset)
                if cleaned_at is not None and self.now_ms - cleaned_at >= retention_ms:  # tombstones expired
                    nulls = values.is_null().to_pylist()
                    tombstones += sum(k and n for k, n in zip(keep, nulls, strict=True))
                    keep = [k and not n for k, n in zip(keep, nulls, strict=True)]
            kept = sum(keep)
            removed += batch.num_rows - kept
            if kept == batch.num_rows:
                writer.copy(buf, item)
                continue
            for lo, hi, keep_run in _runs(keep):
                if keep_run:
                    writer.records(header, batch, lo, hi)
                else:
                    writer.gap(header.base_offset + lo, hi - lo, header.leader_epoch)
        writer.finish()
        return removed, tombstones


def _latest_of(batch: pa.RecordBatch, base: int, latest: dict[bytes, int]) -> list[bool]:
    """For each row of a frame's `batch` (at offset `base`): whether it is its key's latest record (a row without
    a key never is). Plain Python over the keys: a frame holds few rows, and a compute call per frame cost more
    than the comparisons."""
    return [key is not None and latest.get(key) == offset
            for offset, key in enumerate(batch.column(1).to_pylist(), base)]


def _runs(mask: list[bool]) -> Iterator[tuple[int, int, bool]]:
    """(start, end, value) of each run of equal values in `mask`."""
    start = 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            yield start, i, mask[start]
            start = i


class _CopyWriter:
    """Writes a cleaned copy: the schema frame, then frames in offset order, pending gaps merged, indexed as
    they are written."""

    def __init__(self, path: str, schema: pa.Schema, base: int, index_interval: int) -> None:
        self.path = path
        self.builder = IndexBuilder(base, index_interval)
        self.end = base
        self._gap: tuple[int, int, int] | None = None  # (base, count, leader epoch) not written yet
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        header, payload = frame.schema_frame(schema, base)
        write_all(self._fd, [header.pack(), payload])
        self.position = header.size

    def _write(self, header: FrameHeader, parts: list) -> None:
        assert header.base_offset == self.end, (header.base_offset, self.end)
        write_all(self._fd, parts)
        self.builder.add(self.position, header)
        self.position += header.size
        self.end = header.next_offset

    def _flush_gap(self) -> None:
        if self._gap is not None:
            gap = frame.gap_frame(*self._gap)
            self._gap = None
            self._write(gap, [gap.pack()])

    def gap(self, base: int, count: int, leader_epoch: int) -> None:
        """Offsets [base, base + count) were removed (merged with a gap just before them in the same epoch)."""
        if self._gap is not None and self._gap[0] + self._gap[1] == base and self._gap[2] == leader_epoch:
            self._gap = (self._gap[0], self._gap[1] + count, leader_epoch)
            return
        self._flush_gap()
        self._gap = (base, count, leader_epoch)

    def copy(self, buf: pa.Buffer, item: Frame) -> None:
        """Copy a frame byte for byte from `buf`, the segment it lies in."""
        self._flush_gap()
        self._write(item.header, [buf.slice(item.position, item.header.size)])

    def records(self, header: FrameHeader, batch: pa.RecordBatch, lo: int, hi: int) -> None:
        """Write rows [lo, hi) of a frame's batch as a frame of their own, the frame's other fields kept."""
        self._flush_gap()
        rows = batch.slice(lo, hi - lo)
        payload = frame.encode_batch(rows, _CODEC_BY_ATTRIBUTE[header.attributes & 0x03])
        ts = rows.column(0)
        sequence = header.base_sequence + lo if header.base_sequence >= 0 else -1
        piece = replace(header, base_offset=header.base_offset + lo, record_count=hi - lo,
                        first_timestamp=ts[0].value, max_timestamp=pc.max(ts).value, base_sequence=sequence)
        sealed = frame.seal(piece, payload)
        self._write(sealed, [sealed.pack(), payload])

    def finish(self) -> None:
        """Write the last gap and make the copy durable."""
        self._flush_gap()
        os.fdatasync(self._fd)
        os.close(self._fd)
        self._fd = -1

    def abandon(self) -> None:
        """Close and delete the copy (it will not be swapped in)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
