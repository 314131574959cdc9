"""Recovery of a partition's tail, under its lock: what a writer that died left past the watermark, and a
watermark that cannot be trusted.

An embedded log's watermark with a valid checksum is trusted: frames past it were never acknowledged and are
cut, unless a pending-publish marker names a committed transaction (then they are rolled forward). A missing,
short, corrupt, negative, out-of-range or checksum-less (older format) watermark is recovered from the frames,
as Kafka recovers a log's end by scanning its segments: the end of the last whole, CRC-valid frame. Damage below
the watermark is reported and kept, never cut: readers report it and can skip it. Where that damage runs to the
end of the active segment (a torn last frame or header), appends go to a new segment based at the watermark: one
written after the torn bytes would lie inside the extent the torn header declares, never readable, and make that
frame look whole. Empty segment files at the end that start inside the frames before them (a stray file named
like a segment) are not segments of the log and are deleted. Every decision is logged at WARNING naming the
partition and the offsets, and returned as a RecoveryReport.

A replica log (Log.replica) ends at its last whole, CRC-valid frame whatever the watermark file says: frames
past the watermark are awaiting replication, not unacknowledged, so only a torn or invalid tail is cut (a
follower truncates its log only as the leader-epoch protocol tells it, with Log.truncate_to).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fabric.common.errors import CorruptRecordError
from fabric.storage import clean_end, segment_swap
from fabric.storage.marker import PendingPublish, UnreadableMarkerError, read_marker, remove_marker
from fabric.storage.pacing import paced
from fabric.storage.scan import Damage, Frame
from fabric.storage.segment import Segment, StaleIndexError
from fabric.storage.watermark import WatermarkReading, WatermarkState

if TYPE_CHECKING:
    from fabric.storage.log import Log

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    """What recovery found in one partition and what it did (`applied` False: the directory could not be
    written, so nothing changed on disk and `end_offset` is served from memory)."""

    partition: str
    watermark: WatermarkReading
    end_offset: int = 0
    actions: list[str] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    truncated: list[tuple[str, int, int]] = field(default_factory=list)  # (segment, byte position, offset)
    deleted: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)  # segments whose indexes were rebuilt (each logged itself)
    rolled_forward: tuple[int, int] | None = None
    applied: bool = True

    @property
    def changed(self) -> bool:
        return bool(self.actions or self.damage)

    def describe(self) -> str:
        lines = self.actions + [f"damaged records below the watermark, kept and reported to readers: {d.describe()}"
                                for d in self.damage]
        what = "recovered to end offset" if self.actions else "at end offset"
        suffix = "" if self.applied else " (not written: the directory cannot be written; reads use it in memory)"
        return f"partition {self.partition} {what} {self.end_offset}{suffix}: " + "; ".join(lines)


@dataclass(frozen=True)
class _Boundary:
    """Where offset `offset` starts in the active segment: byte `position` (frames from there on are past it)."""

    position: int
    offset: int
    damage: list[Damage]
    straddled: bool = False  # a whole frame holds offsets on both sides: the watermark is not a frame boundary
    missing: bool = False  # the frames end before it: they were lost
    torn_end: bool = False  # damage below it runs to the end of the file: nothing may be appended after it


class Recovery:
    """One recovery of `partition_log`'s tail (lock held). With apply=False it only works out the end offset."""

    def __init__(self, partition_log: Log, apply: bool = True) -> None:
        self.log = partition_log
        self.apply = apply

    def run(self) -> tuple[RecoveryReport, Segment | None]:
        """Recover; returns the report and the active segment (None with apply=False)."""
        plog = self.log
        swapped = segment_swap.complete(plog) if self.apply else None
        reading = plog.hw.read()
        report = RecoveryReport(plog.name, reading, applied=self.apply)
        if swapped:
            report.actions.append(swapped)
        segs = self._without_strays(report, plog.segments(fresh=True))
        if not segs and reading.state is WatermarkState.MISSING:  # a new partition: nothing to report
            if not self.apply:
                return report, None
            plog.hw.write(0)
            return report, plog.create_segment(0)
        marker, marker_found = self._marker(report)
        hw = self._watermark(report, reading, marker, segs)
        active, hw, boundary = self._tail(report, segs, hw)
        report.end_offset = hw
        if self.apply:
            if not reading.trusted or reading.value != hw:  # the watermark first: it decides what is committed
                plog.hw.write(hw)
            if marker_found:
                remove_marker(plog.directory)
            active = self._finish(report, segs, active, hw, boundary)
        if report.changed:
            log.warning("%s", report.describe())
        return report, active

    # -- deciding -----------------------------------------------------------------------------------
    def _without_strays(self, report: RecoveryReport, segs: list[Segment]) -> list[Segment]:
        """`segs` less the empty segment files at the end that start below where the frames before them end (a
        stray file named like a segment, an operator's `touch`): not segments of the log, they are deleted (and
        reported). Only an empty last segment costs a walk of the previous segment's end; a non-empty one that
        overlaps is a cleaner's swap, which segment_swap finishes."""
        empty = 0
        while empty < len(segs) - 1 and _holds_no_records(segs[-1 - empty]):
            empty += 1
        if not empty:
            return segs
        kept = segs[:-empty]
        prev = kept[-1]
        end = prev.end(_walk_start(prev, 2**62)).expected
        for seg in segs[-empty:]:
            if seg.base_offset >= end:
                kept.append(seg)
                continue
            done = "left out" if not self.apply else "deleted"
            if self.apply:
                seg.delete()
                self.log.forget_segments([seg.base_offset])
                report.deleted.append(seg.path)
            report.actions.append(f"segment {seg.path} holds no records and starts at offset {seg.base_offset}, "
                                  f"inside the frames of {prev.path} (they end at offset {end}): not a segment of "
                                  f"the log, {done}")
        return kept

    def _marker(self, report: RecoveryReport) -> tuple[PendingPublish | None, bool]:
        """The pending-publish marker, and whether there was one (readable or not)."""
        try:
            marker = read_marker(self.log.directory)
            return marker, marker is not None
        except UnreadableMarkerError as exc:
            report.actions.append(f"{exc}; the frames past the watermark are unacknowledged and are cut")
            return None, True

    def _watermark(self, report: RecoveryReport, reading: WatermarkReading, marker: PendingPublish | None,
                   segs: list[Segment]) -> int:
        """The watermark to trust: the file's if its checksum holds and it is not below the log start (else the
        dead publish's base, else the end of the frames), rolled forward if a dead publish committed."""
        if self.log.replica:
            return self._log_end(report, reading, marker, segs)
        start = segs[0].base_offset if segs else 0
        shown = f"{reading.state}" + ("" if reading.value is None else f" {reading.value}")
        legacy = reading.value if reading.state is WatermarkState.LEGACY else None
        if reading.trusted and reading.value is not None and reading.value >= start:
            hw = reading.value
        elif marker is not None and marker.base is not None and marker.base >= start:
            hw = marker.base
            report.actions.append(f"watermark {shown}: taken from the pending publish's base, offset {hw}")
        elif marker is not None and legacy is not None and start <= legacy <= self._frames_end(segs):
            hw = legacy  # an earlier version's publish died past its (checksum-less) watermark: its base
        else:
            hw = self._frames_end(segs)
            if legacy != hw:
                report.actions.append(f"watermark {shown}: recovered from the frames, which end at offset {hw}")
            else:
                log.info("partition %s: watermark %d of the older format agrees with the frames", self.log.name, hw)
            return hw
        if marker is None:
            return hw
        if not self.log.resolve_pending(marker.txn):
            report.actions.append(f"transaction {marker.txn} did not commit: its frames past offset {hw} are cut")
            return hw
        if marker.end > hw:
            report.rolled_forward = (hw, marker.end)
            report.actions.append(f"transaction {marker.txn} committed: offsets {hw}..{marker.end - 1} rolled forward")
            return marker.end
        return hw

    def _log_end(self, report: RecoveryReport, reading: WatermarkReading, marker: PendingPublish | None,
                 segs: list[Segment]) -> int:
        """A replica log's end: the end of its last whole, CRC-valid frame, whatever the watermark file says
        (frames past it are awaiting replication, not unacknowledged); where it was closed cleanly and nothing
        changed since, the end recorded then (clean_end), without walking the frames."""
        recorded = clean_end.end(self.log.directory, segs)
        end = self._frames_end(segs) if recorded is None else recorded
        if marker is not None:
            report.actions.append(f"pending-publish marker of transaction {marker.txn} ignored: a replica log keeps "
                                  "every whole, valid frame")
        if reading.value is not None and reading.value > end:
            report.actions.append(f"the watermark file read {reading.value} but the frames end at offset {end}: "
                                  f"offsets {end}..{reading.value - 1} are lost (a follower fetches them again)")
        elif reading.value != end:
            log.info("partition %s: replica log ends at offset %d, its last valid frame (the watermark file read "
                     "%s): frames past the watermark kept", self.log.name, end, reading.value)
        return end

    @staticmethod
    def _frames_end(segs: list[Segment]) -> int:
        """The end of the last whole, CRC-valid, contiguous frame of the last segment (its base if it has none)."""
        if not segs:
            return 0
        seg = segs[-1]
        end = seg.base_offset
        for item in paced(seg.walk(seg.data_start, seg.base_offset, verify_from=seg.base_offset)):
            if isinstance(item, Frame):
                end = item.header.next_offset
        return end

    def _tail(self, report: RecoveryReport, segs: list[Segment], hw: int
              ) -> tuple[Segment | None, int, _Boundary | None]:
        """(active segment, watermark, where the watermark starts in it), the watermark checked against the
        frames: lowered to where they end if they were lost, recovered from them if it splits one."""
        for _ in range(3):
            live = [s for s in segs if s.base_offset <= hw]
            if not live:
                return None, hw, None
            boundary = _boundary(live[-1], hw)
            if boundary.straddled:
                end = self._frames_end(live)
                report.actions.append(f"watermark {hw} falls inside a frame: recovered from the frames, which end "
                                      f"at offset {end}")
                hw = end
            elif boundary.missing:
                report.actions.append(f"watermark {hw} is past the frames, which end at offset {boundary.offset} "
                                      f"(offsets {boundary.offset}..{hw - 1} are lost): lowered")
                hw = boundary.offset
            else:
                report.damage.extend(boundary.damage)
                return live[-1], hw, boundary
        raise CorruptRecordError(f"partition {self.log.name}: no watermark agrees with the frames; restore the "
                                 "partition from a backup")

    # -- applying -----------------------------------------------------------------------------------
    def _finish(self, report: RecoveryReport, segs: list[Segment], active: Segment | None, hw: int,
                boundary: _Boundary | None) -> Segment:
        """Delete segments past the watermark, give the tail a valid segment and cut what lies past `hw`."""
        for seg in segs:
            if seg.base_offset > hw:
                seg.delete()
                report.deleted.append(seg.path)
                report.actions.append(f"segment {seg.path} past the watermark deleted")
        if active is None or boundary is None:
            active = self.log.create_segment(hw)
            report.actions.append(f"no segment held the tail: {active.path} created at offset {hw}")
            return active
        if active.base_offset == hw and not active.schema_frame_ok:
            report.actions.append(f"segment {active.path} had no valid schema frame and no records: recreated")
            return self.log.create_segment(hw)
        if boundary.torn_end:  # its bytes are kept as they are: readers report them (as offsets up to `hw`)
            damaged, active = active, self.log.create_segment(hw)
            report.actions.append(f"segment {damaged.path} ends in damage below the watermark, which is kept: "
                                  f"appends go to a new segment, {active.path}, created at offset {hw}")
            return active
        cut_at = boundary.position
        size = active.size
        if size > cut_at:
            cut = [i.header.next_offset for i in active.walk(cut_at, hw) if isinstance(i, Frame)]
            with self.log.cut_barrier.cutting():  # (no lock-free walk may read the bytes cut: cut_barrier)
                active.truncate(cut_at, hw)
            report.truncated.append((active.path, cut_at, hw))
            offsets = f"offsets {hw}..{max(cut) - 1}, " if cut else ""
            what = "a torn or invalid tail" if self.log.replica else "never acknowledged"
            report.actions.append(f"cut {offsets}{size - cut_at} bytes past the watermark at byte {cut_at} of "
                                  f"{active.path} ({what})")
        return active


def _walk_start(seg: Segment, offset: int) -> tuple[int, int]:
    """Where to walk `seg` from to reach `offset`: the index entry before it, else (a stale index) the start."""
    try:
        return seg.start(offset)
    except StaleIndexError:
        return seg.data_start, seg.base_offset


def _holds_no_records(seg: Segment) -> bool:
    """True if `seg`'s file holds nothing past its schema frame (zero length, a schema frame only, or no whole
    frame at all)."""
    size = seg.size
    return size == 0 or size <= seg.data_start


def _boundary(seg: Segment, hw: int) -> _Boundary:
    """Where offset `hw` starts in `seg`, walking (CRC-checked) from the index entry before it."""
    pos, expected = _walk_start(seg, hw)
    walk = seg.walk(pos, expected, stop=hw, verify_from=expected)
    items = list(walk)
    damage = [d for d in items if isinstance(d, Damage)]
    last = items[-1] if items else None
    if walk.expected >= hw:
        straddled = isinstance(last, Frame) and last.header.next_offset > hw
        return _Boundary(walk.position, hw, damage, straddled=straddled)
    if isinstance(last, Damage) and last.end > last.position:  # bytes that may hold the missing offsets: damage
        if last.next_offset is not None:  # a whole frame with a damaged base offset: appends may follow it
            return _Boundary(walk.position, hw, damage)
        # it runs to the end of the file, nothing whole after it (a torn frame or header): its offsets end at `hw`
        damage[-1] = dataclasses.replace(last, next_offset=hw)
        return _Boundary(walk.position, hw, damage, torn_end=True)
    return _Boundary(walk.position, walk.expected, damage, missing=True)
