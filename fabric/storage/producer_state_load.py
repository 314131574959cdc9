"""Loading a partition's idempotent producer state without holding its lock through the scan.

The state is rebuilt from the frame headers of the log's last segments (producer_state), 3 to 7 µs a frame here: a
segment of small batches takes seconds. Built under the partition lock on the first idempotent append, that
stalled every append and every follower copy of the partition meanwhile, and a new leader paid it on its first
idempotent produce after a failover. As Kafka's followers keep their producer state, a data node's follower now
has it loaded as it copies (fabric.server.node.producer_state_loader) and keeps it up to date with every frame it
copies; an idempotent append that finds it not loaded loads it the same way before it takes the lock.

The scan reads the segments without the lock, up to the log end seen under it (`view`); the frames written
meanwhile are then taken under the lock (catch_up). Where the log changed in a way that cannot be followed (a
truncation, a recovery that changed the files, a segment rewritten or deleted during the scan) nothing is
loaded, and the next idempotent append builds the state under the lock as before. A truncation waits for the scan
to leave the files before it cuts them (cut_barrier): the scan stops at its next frame, and loads nothing.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from fabric.storage import catch_up, producer_snapshot
from fabric.storage.cut_barrier import CutPending
from fabric.storage.producer_state import ProducerStateTable
from fabric.storage.scan import frame_headers

if TYPE_CHECKING:
    from fabric.storage.log import Log
    from fabric.storage.segment import Segment
    from fabric.storage.tail import TailState

log = logging.getLogger(__name__)
PRODUCER_STATE_SEGMENTS = 2  # how far back a partition's producer state is rebuilt from frame headers


def rebuild(plog: Log, segments: list[Segment], end: int, check: Callable[[], None] | None = None
            ) -> ProducerStateTable:
    """The producer state of `plog`'s frames below `end`: from its snapshot and the frames after it where the log
    still matches it (producer_snapshot), else from the headers of the last PRODUCER_STATE_SEGMENTS of
    `segments` (the log's, listed under the lock). `check`: a lock-free walk's (cut_barrier)."""
    window, now = segments[-PRODUCER_STATE_SEGMENTS:], plog.clock.monotonic_ms()
    since = window[0].base_offset if window else end
    table = producer_snapshot.load(plog.name, plog.directory, segments, end, since, now, check)
    if table is not None:
        return table
    return ProducerStateTable.rebuild(plog.name, frame_headers(window, end, check=check), now)


class Scan:
    """A scan of the last segments' headers (or of those past the snapshot: rebuild), begun under the lock at
    `view` (the tail then) and finished by `install` under it again."""

    def __init__(self, plog: Log) -> None:
        with plog.lock:
            plog.sync_tail()
            self.view: TailState | None = plog.tail_view
            self.dropped = plog.states_dropped
        self.plog = plog
        self.listed = plog.segments()
        self.segments = self.listed[-PRODUCER_STATE_SEGMENTS:]
        self.table: ProducerStateTable | None = None

    def read(self) -> Scan:
        """Rebuild the table from the segments' headers below the view's end (no lock held). A segment deleted
        meanwhile (retention) leaves the scan without a table."""
        if self.view is None:
            return self
        try:
            with self.plog.cut_barrier.reading() as barrier:
                self.table = rebuild(self.plog, self.listed, self.view.end_offset, barrier.check)
        except FileNotFoundError:
            log.info("%s: a segment was deleted while its producers were read; they are read on the next "
                     "idempotent append", self.plog.name)
        except CutPending:
            log.info("%s: the log was truncated while its producers were read; they are read on the next "
                     "idempotent append", self.plog.name)
        return self

    def install(self) -> bool:
        """Under the lock: take the frames written since the view and make the table the log's producer state;
        False, nothing installed, if the log changed in a way the scan cannot follow (see the module docstring).
        True too where another thread loaded the state meanwhile."""
        plog = self.plog
        with plog.lock:
            plog.sync_tail()
            if plog.producer_state_loaded:
                return True
            if self.table is None or self.view is None or plog.states_dropped != self.dropped:
                return False
            listed = {seg.base_offset: seg for seg in plog.segments()}
            if any(listed.get(seg.base_offset) is not seg for seg in self.segments):
                return False  # (rewritten by the cleaner, or deleted by retention, while it was read)
            appended = catch_up.appended_since(plog, self.view, plog.tail_end())
            if appended is None:
                return False
            now = plog.clock.monotonic_ms()
            for header in appended:
                self.table.update(header, now)
            plog.take_producer_state(self.table)
            return True
