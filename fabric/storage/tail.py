"""The writing end of a partition log: where it ends, this process's view of its active segment, and the frames
written and committed there (a Log is a LogTail).

A writer holds the partition lock. While nothing else took the lock since this Log last checked its view of the
tail against the files (the lock's epoch is the one it checked in, PartitionLock.epoch), the writer trusts what
it remembers: an append lists no directory, stats no file and reads no watermark, it writes its frame, its
index entries and the watermark. Otherwise it compares what it remembers with the files (the segments listed,
the active segment's size, the watermark) and recovers the tail if they differ (fabric.storage.recovery):
another process wrote, or a writer died mid-append.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, NamedTuple, cast

import pyarrow as pa

from fabric.storage import catch_up, clean_end, producer_snapshot
from fabric.storage.errors import UNWRITABLE, writes
from fabric.storage.flush_policy import FlushPolicy
from fabric.storage.frame import FrameHeader
from fabric.storage.index_repair import IndexRepair
from fabric.storage.leader_epochs import LeaderEpochCache
from fabric.storage.lock import PartitionBusy, PartitionLock, without_waiting
from fabric.storage.open_files import DIRECT, DirectFiles
from fabric.storage.producer_state import ProducerStateTable
from fabric.storage.recent_frames import RecentFrames
from fabric.storage.recovery import Recovery, RecoveryReport
from fabric.storage.scan import Frame
from fabric.storage.segment import Segment
from fabric.storage.transactions import TransactionState
from fabric.storage.watermark import HighWatermark

if TYPE_CHECKING:
    from fabric.common.clock import Clock
    from fabric.common.config import TopicConfig
    from fabric.storage.log import Log
    from fabric.storage.log_retention import LogRetention

log = logging.getLogger(__name__)


class TailState(NamedTuple):
    """This process's view of the tail after its last recovery or append: while the files still match it, the
    next append needs no recovery."""

    base_offset: int  # of the active segment
    size: int  # of the active segment's file
    end_offset: int  # the high watermark


class LogTail:
    """The tail of the Log in `directory` (the Log's attributes below are its own)."""

    directory: str
    config: TopicConfig
    lock: PartitionLock
    hw: HighWatermark
    indexes: IndexRepair
    flushes: FlushPolicy
    retention: LogRetention
    appended: threading.Condition
    # called once at the next move of the end offset, each with the offset it waits past (watch_appends)
    _append_waiters: dict[Callable[[], None], int]
    last_recovery: RecoveryReport | None
    _segments: dict[int, Segment]
    _tail_state: TailState | None
    _tail_epoch: int  # the lock's epoch in which _tail_state was last checked against the files
    _recovered: bool
    _memory_end: tuple[bytes, int] | None  # (watermark bytes, end) recovered but not written
    recent: RecentFrames | None  # the frames written last, where this process alone writes the log
    _epochs: LeaderEpochCache | None
    _producers: ProducerStateTable | None
    _snapshot_segment: int | None  # the active segment this process last wrote the producer snapshot in
    replica: bool
    states_dropped: int
    _txns: TransactionState | None
    clock: Clock
    segments: Callable[..., list[Segment]]
    create_segment: Callable[[int], Segment]

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def end_offset(self) -> int:
        """The high watermark: one past the last committed offset. A log that only its own process writes (a data
        node's: `recent` is kept) answers from its view of the tail while that was checked against the files in
        the lock's current epoch, reading no file; any other reads the watermark file, which other processes may
        have moved."""
        tail = self._tail_state
        if self.recent is not None and tail is not None and self._recovered and self._tail_epoch == self.lock.epoch:
            return tail.end_offset
        reading = self.hw.read()
        if reading.trusted and self._recovered and reading.value is not None:
            return reading.value
        if self._memory_end is not None and self._memory_end[0] == reading.raw:
            return self._memory_end[1]
        return self.recover()

    def recover(self) -> int:
        """Recover the partition under its lock; returns the end offset. If the directory cannot be written,
        work the end out from the frames without writing and serve reads from it (logged at WARNING)."""
        try:
            with self.lock:
                self._tail_state = None
                self.sync_tail()
                self._memory_end = None
                assert self.last_recovery is not None
                return self.last_recovery.end_offset
        except OSError as exc:
            if exc.errno not in UNWRITABLE:
                raise
            report, _ = Recovery(cast("Log", self), apply=False).run()
            self._recovered, self.last_recovery = True, report
            self._memory_end = (self.hw.read().raw, report.end_offset)
            log.warning("%s: cannot repair the partition (%s: %s); reads are served up to offset %d as recovered "
                        "in memory", self.name, exc.filename or self.directory, exc.strerror, report.end_offset)
            return report.end_offset

    def sync_tail(self) -> Segment:
        """Bring the tail up to date under the lock: trusted as remembered (trusted_tail), else recovered
        (fabric.storage.recovery) unless the files still match this process's last view of them. Returns the
        active segment."""
        tail = self._tail_state
        if tail is not None and self.trusted_tail():
            active = self._segments.get(tail.base_offset)
            if active is not None:
                return active
        segs = self.segments(fresh=True)  # (another writer may have rolled the log: see Log.segments)
        reading = self.hw.read()
        if segs and reading.trusted and self._recovered and self._tail_state == TailState(
                segs[-1].base_offset, segs[-1].size, reading.value or 0):
            self._tail_epoch = self.lock.epoch
            return segs[-1]
        view, self._tail_state = self._tail_state, None  # (until recovered: nothing written meanwhile trusts it)
        self.forget_recent()
        for seg in segs:
            seg.forget_writes()  # another process wrote here, or recovery is about to change the files
        report, active = Recovery(cast("Log", self)).run()
        assert active is not None
        self._recovered, self.last_recovery = True, report
        self._epochs = None  # another process may have taken a newer epoch: loaded again from its checkpoint
        self._take_appended(view, report)
        report.rebuilt = self.indexes.check(self.segments())
        self._tail_state, self._tail_epoch = TailState(active.base_offset, active.size, report.end_offset), \
            self.lock.epoch
        return active

    def _take_appended(self, view: TailState | None, report: RecoveryReport) -> None:
        """The producer and transaction states, if loaded, take the frames other processes appended since `view`
        (catch_up) where recovery changed nothing; else they are dropped, rebuilt from the frames when next
        needed."""
        if self._producers is None and self._txns is None:
            return
        appended = None if view is None or report.changed else catch_up.appended_since(cast("Log", self), view,
                                                                                          report.end_offset)
        if appended is None:
            self.drop_states()
            return
        for header in appended:
            self._took(header)

    def _last_frame(self, end: int) -> tuple[Segment, Frame] | None:
        """The last data frame below offset `end` and its segment, walking from the last index entry."""
        for seg in reversed(cast("Log", self).segments()):
            last = None
            for item in seg.walk(*self.indexes.start(seg, end), stop=end):
                if isinstance(item, Frame):
                    last = item
            if last is not None:
                return seg, last
        return None

    def _snapshot_once_per_segment(self, last: FrameHeader) -> None:
        """After a write that ended with frame `last` (lock held, the states up to date with it): the producer
        state's snapshot, if it is loaded, at this process's first write to each active segment
        (producer_snapshot)."""
        tail = self._tail_state
        if self._producers is None or tail is None or tail.base_offset == self._snapshot_segment:
            return
        self._snapshot_segment = tail.base_offset
        producer_snapshot.write(self.directory, self._producers, last, tail.base_offset, tail.size - last.size)

    @writes
    def closing(self) -> None:
        """As the process closes the partition, record what spares its next start a walk of the frames: the
        producer state's snapshot if this process holds it, and a replica log's clean end (after an fsync of its
        last segment)."""
        if self._producers is None and not self.replica:
            return
        with self.lock:
            self.sync_tail()
            plog = cast("Log", self)
            table, found = self._producers, self._last_frame(self.tail_end())
            if found is None:
                return
            if table is not None:
                producer_snapshot.write(self.directory, table, found[1].header, found[0].base_offset,
                                        found[1].position)
            if self.replica and found[0] is plog.segments()[-1]:
                plog.flush()
                clean_end.write(self.directory, found[0], found[1])

    def drop_states(self) -> None:
        """Forget the producer and transaction states (rebuilt from the files when next needed), and count it: a
        load of the producer state that began before (producer_state_load) is not installed."""
        self._producers = self._txns = None
        self.states_dropped += 1

    @property
    def tail_view(self) -> TailState | None:
        """This process's view of the tail (lock held, after sync_tail), for catch_up."""
        return self._tail_state

    def _took(self, header: FrameHeader) -> None:
        """Update the producer and transaction states that are loaded with a frame written (here or, found by
        catch_up, by another process)."""
        if self._producers is not None:
            self._producers.update(header, self.clock.monotonic_ms())
        if self._txns is not None:
            self._txns.update(header)

    @writes
    def sync_tail_locked(self) -> None:
        """Create or recover the tail under the lock (used when a partition is created or opened)."""
        with self.lock:
            self.sync_tail()

    def trusted_tail(self) -> bool:
        """True if what this process remembers of the tail holds without reading the files: the lock is held and
        nothing else took it since the view was checked against them."""
        return self._tail_state is not None and self._tail_epoch == self.lock.epoch and self.lock.held

    def tail_end(self) -> int:
        """The end offset as this process last saw it under the lock (lock held, after sync_tail)."""
        return self._tail_state.end_offset if self._tail_state else self.end_offset

    @property
    def active_base(self) -> int | None:
        """The base offset of the active segment as this process last saw it under the lock (None: not yet read,
        or forgotten); a write that rolls changes it."""
        return self._tail_state.base_offset if self._tail_state else None

    def remember_tail(self, active: Segment, end: int) -> None:
        """Record this process's view of the tail after a change it made under the lock: `active` ending at `end`."""
        self._tail_state = TailState(active.base_offset, active.size, end)

    def forget_tail(self) -> None:
        """Drop the cached tail state, leader epochs and producer state, so the next writer recovers them from the
        files (after a write or publish that failed part-way)."""
        self._tail_state, self._epochs = None, None
        self.drop_states()
        self.forget_recent()

    def forget_recent(self) -> None:
        """Forget the frames kept in memory (recent_frames): the files under them are about to change, or may
        have."""
        if self.recent is not None:
            self.recent.clear()

    @writes
    def write_frame(self, header: FrameHeader, payload: pa.Buffer | bytes, active: Segment | None = None,
                    files: DirectFiles = DIRECT) -> Segment:
        """Write one sealed frame at the tail, rolling first if due (caller holds the lock), its files opened
        through `files` (an append's: open_files); returns the active segment, which the next frame of the same
        write may be given."""
        active = active or self.sync_tail()
        end = self.tail_end()
        tail = self._tail_state  # trusted: no stat of the segment
        trusted = tail is not None and tail.base_offset == active.base_offset and self.trusted_tail()
        size = tail.size if trusted and tail is not None else active.size
        if size > (active.known_data_start if trusted else active.data_start) and self._roll_due(active, size, header):
            active = self.create_segment(header.base_offset)
            size = active.size
            self._tail_state = TailState(active.base_offset, size, end)
            self.retention.maybe_retain(force=True)
        position = active.append(header, payload, self.config["index.interval.bytes"], size if trusted else None,
                                 files)
        self._tail_state = TailState(active.base_offset, position + header.size, end)
        self.flushes.wrote(header.record_count)
        return active

    @writes
    def commit(self, end_offset: int, files: DirectFiles = DIRECT) -> None:
        """Advance the high watermark to `end_offset`, fsyncing if the flush policy asks (lock held); the file is
        opened through `files`, as in write_frame."""
        tail = self._tail_state
        self.hw.write(end_offset, files)
        if tail is not None:
            self._tail_state = TailState(tail.base_offset, tail.size, end_offset)
        with self.appended:
            self.appended.notify_all()
            waiters, self._append_waiters = self._append_waiters, {}
        for waiter in waiters:
            waiter()
        self.flushes.maybe_flush()
        self.retention.maybe_retain()

    def watch_appends(self, waiter: Callable[[], None], offset: int) -> bool:
        """Call `waiter()` once, on the appending thread with the partition lock held (so it only schedules), when
        this process next moves the end offset on; False, registering nothing, if the end is past `offset`
        already. Other processes' appends call nothing: look_for_appends, called now and then
        (reader.FOREIGN_APPEND_POLL_S), finds them."""
        with self.appended:
            self._append_waiters[waiter] = offset
        if self.end_offset > offset:  # (read after registering: an append before it is seen here, one after calls)
            self.unwatch_appends(waiter)
            return False
        return True

    def unwatch_appends(self, waiter: Callable[[], None]) -> None:
        """Forget a waiter of watch_appends that was not called."""
        with self.appended:
            self._append_waiters.pop(waiter, None)

    def look_for_appends(self) -> bool:
        """Call the waiters of watch_appends whose offset the end offset is past now, as the watermark file says
        (another process appended: nothing called them), with one read of it however many wait, waiting for no
        lock; a watermark that cannot be read calls every waiter (each reads again, and answers what it finds).
        Whether any waiter is left."""
        with self.appended:
            if not self._append_waiters:
                return False
        try:
            with without_waiting():  # (a poller on an event loop: a recovery the read needs waits for no lock)
                end: int | None = self.end_offset
        except PartitionBusy:  # another holds the lock the recovery needs: looked at again next time
            return True
        except Exception:  # noqa: BLE001 (each waiter's own read meets it and answers it)
            end = None
        with self.appended:
            moved = [waiter for waiter, offset in self._append_waiters.items() if end is None or end > offset]
            for waiter in moved:
                del self._append_waiters[waiter]
            left = bool(self._append_waiters)
        for waiter in moved:
            waiter()
        return left

    def _roll_due(self, active: Segment, size: int, header: FrameHeader) -> bool:
        """Roll before `header`'s frame once the segment (of `size` bytes) is full, or once the frame's records are
        segment.ms newer than the segment's first frame's (Kafka's rule: record time, not the clock, so a backfill
        of old records fills segments; an idle segment is rolled by maintenance, LogRetention.maintain)."""
        if size + header.size > self.config["segment.bytes"]:
            return True
        first = active.first_frame()
        if first is None or first.max_timestamp < 0:
            return False
        return (header.max_timestamp - first.max_timestamp) // 1000 >= self.config["segment.ms"]
