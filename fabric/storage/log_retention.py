"""A partition's retention, DeleteRecords and maintenance (Kafka's UnifiedLog.deleteOldSegments, deleteRecords and
the LogManager's scheduled tasks): what removes a Log's old records and when.

- Retention deletes whole old segments past retention.ms / retention.bytes (cleanup.policy delete or
  compact,delete), and those below the log start offset left by a DeleteRecords killed before it deleted them.
- DeleteRecords moves the log start offset (the durable checkpoint of fabric.storage.log_start) first, then
  deletes the whole segments below it.
- Maintenance (fabric.storage.log_maintenance runs it on a schedule) applies retention, rolls an active segment
  older than segment.ms (or max.compaction.lag.ms on a compacted topic) and runs a cleaner pass if one is due.

Everything here works under the Log's partition lock, as its appends do. A LogRetention belongs to one Log
(Log.retention); the Log keeps the methods its callers use (enforce_retention, delete_records, maintain) as
one-line delegations.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable

from fabric.common.errors import OffsetOutOfRangeError
from fabric.storage import log_start
from fabric.storage.cleaner import CleanReport
from fabric.storage.marker import PENDING
from fabric.storage.segment import Segment
from fabric.storage.segment_swap import CrashHook

if TYPE_CHECKING:
    from fabric.storage.log import Log

log = logging.getLogger(__name__)
RETENTION_CHECK_MS = 30_000  # how often appends check retention on the write path (embedded logs)


class LogRetention:
    """Retention, DeleteRecords and maintenance of the Log `plog`."""

    def __init__(self, plog: Log) -> None:
        self.plog = plog
        self.last_check_ms = plog.clock.now_ms()
        # a replica log's bound (set by the node's replica): the replication high watermark while its node leads
        # the partition, None while it follows. Retention deletes no record at or past it, and nothing while it is
        # None: a follower takes its leader's log start from fetch answers instead (Kafka's followers do too)
        self.leader_high_watermark: Callable[[], int | None] | None = None
        # told after a background pass deleted or cleaned segments (set by the node's replica, whose followers'
        # next answers then carry the log start the pass may have moved)
        self.start_moved: Callable[[], None] | None = None

    def maybe_retain(self, force: bool = False) -> None:
        """Retention on the write path (a roll, a commit), at most every RETENTION_CHECK_MS. Never on a replica
        log: its node applies retention in its background maintenance, as the partition's leader only."""
        plog = self.plog
        if plog.replica:
            return
        if force or plog.clock.now_ms() - self.last_check_ms >= RETENTION_CHECK_MS:
            if os.path.exists(os.path.join(plog.directory, PENDING)):
                return  # our own publish is mid-way (frames past the watermark): its sync_tail would undo it
            self.enforce()

    def enforce(self) -> int:
        """Delete whole old segments past retention.ms / retention.bytes (cleanup.policy delete or
        compact,delete), and those below the log start offset (left by a delete_records that was killed before it
        deleted them, whatever the policy); returns how many. A replica log deletes only segments wholly below
        leader_high_watermark(), so the log start never passes the high watermark (as in Kafka), and nothing
        while its node does not lead the partition."""
        plog = self.plog
        bound = self.leader_high_watermark() if plog.replica and self.leader_high_watermark else None
        if plog.replica and bound is None:
            return 0
        retained = "delete" in plog.config["cleanup.policy"]  # a compacted-only topic: the cleaner bounds it
        if not retained and not os.path.exists(os.path.join(plog.directory, log_start.CHECKPOINT)):
            self.last_check_ms = plog.clock.now_ms()
            return 0
        deleted = 0
        with plog.lock:
            self.last_check_ms = now_ms = plog.clock.now_ms()
            active = plog.sync_tail()
            segs = plog.segments()
            retention_ms = plog.config["retention.ms"] if retained else -1
            retention_bytes = plog.config["retention.bytes"] if retained else -1

            def expired(seg: Segment) -> bool:
                newest = seg.timeindex.max_timestamp()
                return retention_ms >= 0 and newest is not None and newest // 1000 < now_ms - retention_ms
            if expired(active) and active.size > active.data_start and len(segs) >= 1:
                active = plog.create_segment(plog.end_offset)
                segs = plog.segments()
            total = sum(s.size for s in segs)
            start = plog.bounds.start_within(segs, plog.end_offset)
            for seg, nxt in zip(segs, segs[1:], strict=False):
                over = retention_bytes >= 0 and total - seg.size >= retention_bytes
                if (bound is not None and nxt.base_offset > bound) or not (
                        expired(seg) or over or nxt.base_offset <= start):
                    break
                total -= seg.size
                seg.delete()
                deleted += 1
            if deleted:
                plog.forget_before(plog.start_offset)
            plog.remember_tail(active, plog.end_offset)
        return deleted

    def delete_records(self, before_offset: int, crash: CrashHook | None = None,
                       high_watermark: int | None = None) -> int:
        """Kafka's DeleteRecords: see Log.delete_records."""
        plog = self.plog
        with plog.lock:
            active = plog.sync_tail()
            log_end = plog.tail_end()
            end = log_end if high_watermark is None else min(high_watermark, log_end)
            target = end if before_offset == -1 else before_offset
            if not 0 <= target <= end:
                raise OffsetOutOfRangeError(
                    f"cannot delete the records of partition {plog.name} before offset {before_offset}: it holds "
                    f"offsets up to its high watermark {end}; give an offset from 0 to {end}, or -1 for the high "
                    "watermark")
            start = plog.bounds.start_within(plog.segments(), end)
            if target <= start:
                return start
            log_start.write(plog.directory, target)
            if crash:
                crash("checkpointed")
            if target == log_end and active.first_frame() is not None:
                active = plog.create_segment(log_end)  # every record goes: so does the segment that held the last
            segs = plog.segments()
            deleted = 0
            for seg, nxt in zip(segs, segs[1:], strict=False):
                if nxt.base_offset > target:
                    break
                seg.delete()
                deleted += 1
                if crash:
                    crash("deleted")
            plog.forget_before(target)
            plog.remember_tail(active, log_end)
        log.info("%s: records before offset %d deleted (%d whole segment(s) removed); the log starts there now",
                 plog.name, target, deleted)
        return target

    def maintain(self) -> tuple[int, CleanReport]:
        """What the background maintenance does to a partition: retention (segments deleted; on a replica log only
        while its node leads the partition, see enforce), a roll of an active segment older than segment.ms or, on
        a compacted topic, max.compaction.lag.ms, then a cleaner pass if one is due."""
        plog = self.plog
        deleted = self.enforce()
        compacted = "compact" in plog.config["cleanup.policy"]
        first = plog.segments()[-1].first_frame() if plog.segments() else None
        if first is not None and first.first_timestamp >= 0:
            age = plog.clock.now_ms() - first.first_timestamp // 1000
            limit = plog.config["segment.ms"]
            if compacted:
                limit = min(limit, plog.config["max.compaction.lag.ms"])
            if age >= limit:
                plog.roll()
        report = plog.clean()
        if (deleted or report.cleaned) and self.start_moved is not None:
            self.start_moved()
        return deleted, report
