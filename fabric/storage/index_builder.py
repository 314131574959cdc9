"""The indexing rule, in one place for appends, rebuilds and adopted segments: the first batch gets an offset
entry, then one every `index.interval.bytes`; a time entry each time a batch raises the segment's max
timestamp (a compaction gap has no timestamp)."""
from __future__ import annotations

from fabric.storage.frame import FrameHeader
from fabric.storage.index import OffsetIndex, TimeIndex


class IndexBuilder:
    """Decides the index entries of a segment's frames, fed in file order; `offsets` and `times` collect them
    as (relative offset, position) and (max timestamp, relative offset)."""

    def __init__(self, base_offset: int, interval: int, last_position: int | None = None,
                 max_timestamp: int | None = None) -> None:
        self.base_offset = base_offset
        self.interval = interval
        self.last_position = last_position
        self.max_timestamp = max_timestamp
        self.offsets: list[tuple[int, int]] = []
        self.times: list[tuple[int, int]] = []

    @classmethod
    def resume(cls, base_offset: int, interval: int, index: OffsetIndex, timeindex: TimeIndex) -> IndexBuilder:
        """A builder that continues the indexes on disk (for an append)."""
        last = index.last()
        return cls(base_offset, interval, None if last is None else last[1], timeindex.max_timestamp())

    def add(self, position: int, header: FrameHeader) -> None:
        """Index the data frame at byte `position` if the rule says so."""
        rel = header.base_offset - self.base_offset
        if self.last_position is None or position - self.last_position >= self.interval:
            self.offsets.append((rel, position))
            self.last_position = position
        if header.record_count and not header.is_gap and (self.max_timestamp is None
                                                          or header.max_timestamp > self.max_timestamp):
            self.times.append((header.max_timestamp, rel))
            self.max_timestamp = header.max_timestamp

    def append_to(self, index: OffsetIndex, timeindex: TimeIndex) -> None:
        """Append the entries collected so far to the files (an append's one or two entries)."""
        for rel, pos in self.offsets:
            index.append(rel, pos)
        for ts, rel in self.times:
            timeindex.append(ts, rel)
        self.offsets, self.times = [], []

    def write(self, index: OffsetIndex, timeindex: TimeIndex) -> None:
        """Replace both files with the entries collected (a rebuild, or an adopted segment's new indexes)."""
        index.reset(self.offsets)
        timeindex.reset(self.times)
