"""The indexing rule, in one place for appends, rebuilds and adopted segments: the first batch gets an offset
entry, then one every `index.interval.bytes`; a time entry each time a batch raises the segment's max
timestamp (a compaction gap has no timestamp)."""
from __future__ import annotations

from fabric.storage.frame import FrameHeader
from fabric.storage.index import OffsetIndex, TimeIndex
from fabric.storage.open_files import DIRECT, DirectFiles


class IndexBuilder:
    """Decides the index entries of a segment's frames, fed in file order; `offsets` and `times` collect them
    as (relative offset, position) and (max timestamp, relative offset)."""

    def __init__(self, base_offset: int, interval: int, last_offset: tuple[int, int] | None = None,
                 last_time: tuple[int, int] | None = None) -> None:
        self.base_offset = base_offset
        self.interval = interval
        self.last_offset = last_offset  # the last (relative offset, position) entry of the offset index
        self.last_time = last_time  # the last (max timestamp, relative offset) entry of the time index
        self.offsets: list[tuple[int, int]] = []
        self.times: list[tuple[int, int]] = []

    @classmethod
    def resume(cls, base_offset: int, interval: int, index: OffsetIndex, timeindex: TimeIndex) -> IndexBuilder:
        """A builder that continues the indexes on disk (for an append)."""
        return cls(base_offset, interval, index.last(), timeindex.last())

    @property
    def last_position(self) -> int | None:
        return None if self.last_offset is None else self.last_offset[1]

    @property
    def max_timestamp(self) -> int | None:
        return None if self.last_time is None else self.last_time[0]

    def add(self, position: int, header: FrameHeader) -> None:
        """Index the data frame at byte `position` if the rule says so."""
        rel = header.base_offset - self.base_offset
        last_position = self.last_position
        if last_position is None or position - last_position >= self.interval:
            self.offsets.append((rel, position))
            self.last_offset = (rel, position)
        max_timestamp = self.max_timestamp
        if header.record_count and not header.is_gap and (max_timestamp is None
                                                          or header.max_timestamp > max_timestamp):
            self.times.append((header.max_timestamp, rel))
            self.last_time = (header.max_timestamp, rel)

    def append_to(self, index: OffsetIndex, timeindex: TimeIndex, trusted: bool = False,
                  files: DirectFiles = DIRECT) -> None:
        """Append the entries collected so far to the files (an append's one or two entries). `trusted`: the
        files end with the entries this builder collected before (no one else wrote them since), so their last
        entries are not read back to check that the new ones follow them."""
        for entry in self.offsets:
            index.append_entry(entry, check=not trusted, files=files)
        for entry in self.times:
            timeindex.append_entry(entry, check=not trusted, files=files)
        self.offsets, self.times = [], []

    def write(self, index: OffsetIndex, timeindex: TimeIndex) -> None:
        """Replace both files with the entries collected (a rebuild, or an adopted segment's new indexes)."""
        index.reset(self.offsets)
        timeindex.reset(self.times)
