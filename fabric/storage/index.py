"""Sparse, memory-mapped segment indexes with binary search.

OffsetIndex: (relative offset u32, byte position u32) per indexed batch.
TimeIndex:   (max timestamp so far i64 µs, relative offset u32) each time a batch raises the segment's
             max timestamp, so the first entry with timestamp >= T names the first batch holding one.
Both files only grow by appends made under the partition lock, and entries must increase (an append that
would not is refused); rebuilding or cutting one back replaces the file, so a reader's map of the old one stays
valid. Entries are hints that readers check against the frame they name (see Segment).
"""
from __future__ import annotations

import bisect
import os
import struct
import sys
from typing import Literal, Sequence, overload

import numpy as np

from fabric.common.errors import FabricError
from fabric.storage import durable
from fabric.storage.mapcache import MAPS
from fabric.storage.open_files import DIRECT, DirectFiles


class IndexOrderError(FabricError):
    """An index append that would not increase the index (a writer with a stale view of the segment); refused,
    so an index never misleads a lookup."""


# struct and memoryview codes of the indexes' little-endian fields
_CODES: dict[tuple[str, int], Literal["I", "q"]] = {("u", 4): "I", ("i", 8): "q"}


class _Field(Sequence[int]):
    """One field of fixed-size entries in `buf`, unpacked one entry at a time (where the field cannot be viewed
    as a strided memoryview: an 8-byte field in 12-byte entries)."""

    def __init__(self, buf: memoryview, code: struct.Struct, offset: int, size: int, count: int) -> None:
        self._buf, self._code, self._offset, self._size, self._count = buf, code, offset, size, count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...

    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if not -self._count <= i < self._count:
            raise IndexError(i)
        value: int = self._code.unpack_from(self._buf, self._offset + (i % self._count) * self._size)[0]
        return value


def _field(buf: memoryview, count: int, size: int, field: np.dtype, offset: int) -> Sequence[int]:
    """The field of dtype `field` at byte `offset` of `count` entries of `size` bytes in `buf`: a strided view
    where the field's size divides the entry's, else unpacked entry by entry."""
    code = _CODES[field.kind, field.itemsize]
    if sys.byteorder == "little" and size % field.itemsize == 0 and offset % field.itemsize == 0:
        return buf[:count * size].cast(code)[offset // field.itemsize::size // field.itemsize]
    return _Field(buf, struct.Struct("<" + code), offset, size, count)


class _MappedIndex:
    """An append-only file of fixed-size entries, viewed as a numpy array over a shared read-only map."""

    DTYPE: np.dtype
    KEYS: tuple[str, str]  # the fields, in entry order, that must both increase
    ENTRY: struct.Struct  # one entry's bytes, as DTYPE lays them out (packed without building an array)

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def entries(self) -> np.ndarray:
        """The whole entries on disk now (a torn last entry is left out)."""
        try:
            buf = MAPS.get(self.path)
        except FileNotFoundError:
            return np.empty(0, self.DTYPE)
        whole = buf.size - buf.size % self.DTYPE.itemsize
        return np.frombuffer(buf, self.DTYPE, count=whole // self.DTYPE.itemsize)

    def __len__(self) -> int:
        return len(self.entries)

    def columns(self, *keys: str) -> tuple[Sequence[int], ...]:
        """Fields `keys` of the whole entries on disk now, from one look at the file, read in place: what `bisect`
        searches. (numpy's searchsorted copies a field of a structured array first: a lookup cost time in
        proportion to the index, 0.6 ms at a million entries, where a bisect reads about 20 of them.)"""
        try:
            buf = memoryview(MAPS.get(self.path)).cast("B")
        except FileNotFoundError:
            return tuple(() for _ in keys)
        size, fields = self.DTYPE.itemsize, self.DTYPE.fields
        assert fields is not None  # (a structured dtype)
        count = len(buf) // size
        return tuple(_field(buf, count, size, *fields[key][:2]) for key in keys)

    @property
    def torn(self) -> bool:
        """True if the file ends in part of an entry."""
        try:
            return os.path.getsize(self.path) % self.DTYPE.itemsize != 0
        except FileNotFoundError:
            return False

    def append_entry(self, entry: tuple[int, int], check: bool = True, files: DirectFiles = DIRECT) -> None:
        """Append `entry`, first checking (`check`) that it follows the file's last entry: IndexOrderError if it
        does not. A writer that knows the file ends with the entries it wrote itself need not read it back."""
        size = self.DTYPE.itemsize
        fd = files.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            end = os.fstat(fd).st_size if check else 0
            if end >= size:
                raw = np.frombuffer(os.pread(fd, size, end - end % size - size), self.DTYPE)[0]
                last = tuple(int(raw[k]) for k in self.KEYS)
                if not all(new > old for new, old in zip(entry, last, strict=True)):
                    raise IndexOrderError(
                        f"refused index entry {dict(zip(self.KEYS, entry, strict=True))} after "
                        f"{dict(zip(self.KEYS, last, strict=True))} in {self.path}: entries must increase; the "
                        "writer's view of the segment is stale (the next writer recovers the tail and rebuilds "
                        "the index)")
            os.write(fd, self.ENTRY.pack(*entry))
        finally:
            files.done(fd)

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries (a new file replaces the old one)."""
        entries = self.entries
        if count < len(entries) or self.torn:
            self.reset(entries[:count].copy())

    def reset(self, entries: Sequence[tuple[int, int]] | np.ndarray) -> None:
        """Replace the file's contents atomically (used when rebuilding)."""
        durable.replace_file(self.path, np.asarray(entries, self.DTYPE).tobytes(), durably=False)
        MAPS.forget(self.path)

    def delete(self) -> None:
        MAPS.forget(self.path)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def is_consistent(self, limit: int) -> bool:
        """Whole entries whose keys both strictly increase and whose last entry's second key is below `limit`
        (a position inside the data file; a relative offset inside the segment)."""
        if self.torn:
            return False
        entries = self.entries
        if not len(entries):
            return True
        first, second = (entries[k].astype(np.int64) for k in self.KEYS)
        return bool(np.all(np.diff(first) > 0) and np.all(np.diff(second) > 0) and second[-1] < limit)


class OffsetIndex(_MappedIndex):
    """Maps a relative offset to the byte position of the batch that starts at or before it."""

    DTYPE = np.dtype([("rel", "<u4"), ("pos", "<u4")])
    KEYS = ("rel", "pos")
    ENTRY = struct.Struct("<II")

    def append(self, relative_offset: int, position: int) -> None:
        self.append_entry((relative_offset, position))

    def floor(self, relative_offset: int) -> tuple[int, int] | None:
        """The last entry with rel <= relative_offset, as (rel, pos); None if there is none."""
        rel, pos = self.columns("rel", "pos")
        i = bisect.bisect_right(rel, relative_offset) - 1
        if i < 0:
            return None
        return rel[i], pos[i]

    def last(self) -> tuple[int, int] | None:
        entries = self.entries
        if not len(entries):
            return None
        return int(entries["rel"][-1]), int(entries["pos"][-1])

    def count_below(self, position: int) -> int:
        """How many entries point before byte `position` (to truncate the rest)."""
        return bisect.bisect_left(self.columns("pos")[0], position)


class TimeIndex(_MappedIndex):
    """Maps a timestamp to the first batch whose max timestamp reaches it."""

    DTYPE = np.dtype([("ts", "<i8"), ("rel", "<u4")], align=False)
    KEYS = ("ts", "rel")
    ENTRY = struct.Struct("<qI")

    def __init__(self, path: str) -> None:
        super().__init__(path)
        # ((inode, size, mtime), max_timestamp())
        self._max_kept: tuple[tuple[int, int, int], int | None] | None = None

    def append(self, timestamp: int, relative_offset: int) -> None:
        self.append_entry((timestamp, relative_offset))

    def max_timestamp(self) -> int | None:
        """The segment's max timestamp (the last entry's), read again only when the file changed: entries are
        only appended, and a rebuild or a cut replaces the file, so its inode and size tell (with its time: a
        file replaced twice may get its first inode back, at its first size). A stat, and no map: offset_for_time
        and retention ask it of every segment, and mapping thousands of files in turn thrashed the shared map
        cache."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        kept = self._max_kept
        if kept is None or kept[0] != key:
            kept = self._max_kept = (key, self._last_timestamp(st.st_size))
        return kept[1]

    def _last_timestamp(self, size: int) -> int | None:
        """The timestamp of the last whole entry of a file of `size` bytes (None if it has none)."""
        whole = size - size % self.ENTRY.size
        if not whole:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            raw = os.pread(fd, self.ENTRY.size, whole - self.ENTRY.size)
        finally:
            os.close(fd)
        return self.ENTRY.unpack(raw)[0] if len(raw) == self.ENTRY.size else None

    def last(self) -> tuple[int, int] | None:
        entries = self.entries
        return (int(entries["ts"][-1]), int(entries["rel"][-1])) if len(entries) else None

    def first_at_or_after(self, timestamp: int) -> int | None:
        """Relative offset of the first batch with max timestamp >= timestamp; None if none."""
        entry = self.entry_at_or_after(timestamp)
        return None if entry is None else entry[1]

    def entry_at_or_after(self, timestamp: int) -> tuple[int, int] | None:
        """The first entry with max timestamp >= timestamp, as (ts, rel); None if none."""
        ts, rel = self.columns("ts", "rel")
        i = bisect.bisect_left(ts, timestamp)
        return None if i >= len(ts) else (ts[i], rel[i])

    def is_consistent(self, max_relative: int) -> bool:
        """Increasing entries that name no batch past relative offset `max_relative`."""
        return super().is_consistent(max_relative + 1)

    def count_below(self, relative_offset: int) -> int:
        """How many entries index batches before `relative_offset`."""
        return bisect.bisect_left(self.columns("rel")[0], relative_offset)
