"""A log's bounds as one look at its files sees them: the segments listed, the log start offset and the end.

The log start is the larger of the first segment's base offset and the log-start-offset checkpoint (log_start), at
most the end; it is read every time (another process's delete_records or retention moves it). The end is the
watermark's, read every time too, except for an offset commit's range check on an embedded log (`holding`): an
embedded log's end never falls (frames past the watermark were never acknowledged and nothing truncates it), so
the end this process read last vouches for any offset at or below it. A replica log's end, which truncation
cuts, is read each time.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from fabric.storage import log_start
from fabric.storage.reader import LogRange
from fabric.storage.segment import Segment

if TYPE_CHECKING:
    from fabric.storage.log import Log


class LogBounds:
    """The bounds of `plog` (see the module doc); one per Log."""

    __slots__ = ("_log", "_checkpoint", "_seen_end")

    def __init__(self, plog: Log) -> None:
        self._log = plog
        self._checkpoint = log_start.CachedCheckpoint(plog.directory)
        self._seen_end: int | None = None  # the end offset an embedded log's last range() read (holding)

    def range(self, end: int | None = None) -> LogRange:
        """The segments, log start and end offset now, from one read of the watermark and one listing of the
        directory: what a request that needs several of them reads once and passes down. `end`: the end offset
        the caller read just before (not read again)."""
        plog = self._log
        end = plog.end_offset if end is None else end
        segs = plog.segments()
        if not plog.replica:
            self._seen_end = end
        return LogRange(segs, self.start_within(segs, end), end)

    def now(self) -> tuple[int, int]:
        """(log start offset, end offset) now, read together."""
        _, start, end = self.range()
        return start, end

    def holding(self, offset: int) -> tuple[int, int]:
        """(log start offset, end offset) for a check that `offset` is within them (an offset commit's): the start
        read now, the end as this process last read it where that is at or past `offset` (an embedded log's
        only), else read now."""
        seen = self._seen_end
        _, start, end = self.range(seen if seen is not None and offset <= seen else None)
        return start, end

    def start_within(self, segs: list[Segment], end: int) -> int:
        """The log start offset, given the segments listed and the end offset: the larger of the first segment's
        base offset and the log-start-offset checkpoint, at most `end`."""
        first = segs[0].base_offset if segs else end
        return min(max(first, self._checkpoint.offset()), end)
