"""Sparse, memory-mapped segment indexes with binary search.

OffsetIndex: (relative offset u32, byte position u32) per indexed batch.
TimeIndex:   (max timestamp so far i64 µs, relative offset u32) each time a batch raises the segment's
             max timestamp, so the first entry with timestamp >= T names the first batch holding one.
Both files only ever grow by appends made under the partition lock; readers map them read-only.
"""
from __future__ import annotations

import mmap
import os
from typing import Sequence

import numpy as np


class _MappedIndex:
    """An append-only file of fixed-size entries, viewed as a numpy array over a read-only mmap."""

    DTYPE: np.dtype

    def __init__(self, path: str) -> None:
        self.path = path
        self._entries = np.empty(0, self.DTYPE)
        self._mapped_size: tuple = (-1, None)

    @property
    def entries(self) -> np.ndarray:
        """The entries currently on disk (re-mapped if the file grew or shrank)."""
        try:
            st = os.stat(self.path)
            size, inode = st.st_size, st.st_ino
        except FileNotFoundError:
            size, inode = 0, None
        size -= size % self.DTYPE.itemsize
        # keyed by inode too: reset() replaces the file, possibly with one of the same size
        if (size, inode) != self._mapped_size:
            if size == 0:
                self._entries = np.empty(0, self.DTYPE)
            else:
                with open(self.path, "rb") as f:
                    mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
                self._entries = np.frombuffer(mm, self.DTYPE)
            self._mapped_size = (size, inode)
        return self._entries

    def __len__(self) -> int:
        return len(self.entries)

    def _append(self, entry: tuple) -> None:
        data = np.array([entry], self.DTYPE).tobytes()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries."""
        with open(self.path, "ab") as f:
            f.truncate(count * self.DTYPE.itemsize)

    def reset(self, entries: Sequence[tuple[int, int]] | np.ndarray) -> None:
        """Replace the file's contents atomically (used when rebuilding)."""
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(np.asarray(entries, self.DTYPE).tobytes())
        os.replace(tmp, self.path)

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_MappedIndex):
    """Maps a relative offset to the byte position of the batch that starts at or before it."""

    DTYPE = np.dtype([("rel", "<u4"), ("pos", "<u4")])

    def append(self, relative_offset: int, position: int) -> None:
        self._append((relative_offset, position))

    def floor(self, relative_offset: int) -> tuple[int, int] | None:
        """The last entry with rel <= relative_offset, as (rel, pos); None if there is none."""
        entries = self.entries
        i = int(np.searchsorted(entries["rel"], relative_offset, side="right")) - 1
        if i < 0:
            return None
        return int(entries["rel"][i]), int(entries["pos"][i])

    def last(self) -> tuple[int, int] | None:
        entries = self.entries
        if not len(entries):
            return None
        return int(entries["rel"][-1]), int(entries["pos"][-1])

    def is_consistent(self, file_size: int) -> bool:
        """Strictly increasing entries that all point inside the data file."""
        entries = self.entries
        if os.path.exists(self.path) and os.path.getsize(self.path) % self.DTYPE.itemsize:
            return False
        if not len(entries):
            return True
        rel, pos = entries["rel"].astype(np.int64), entries["pos"].astype(np.int64)
        return bool(np.all(np.diff(rel) > 0) and np.all(np.diff(pos) > 0) and pos[-1] < file_size)

    def count_below(self, position: int) -> int:
        """How many entries point before byte `position` (to truncate the rest)."""
        return int(np.searchsorted(self.entries["pos"], position, side="left"))


class TimeIndex(_MappedIndex):
    """Maps a timestamp to the first batch whose max timestamp reaches it."""

    DTYPE = np.dtype([("ts", "<i8"), ("rel", "<u4")], align=False)

    def append(self, timestamp: int, relative_offset: int) -> None:
        self._append((timestamp, relative_offset))

    def max_timestamp(self) -> int | None:
        entries = self.entries
        return int(entries["ts"][-1]) if len(entries) else None

    def first_at_or_after(self, timestamp: int) -> int | None:
        """Relative offset of the first batch with max timestamp >= timestamp; None if none."""
        entries = self.entries
        i = int(np.searchsorted(entries["ts"], timestamp, side="left"))
        return None if i >= len(entries) else int(entries["rel"][i])

    def is_consistent(self, max_relative: int) -> bool:
        entries = self.entries
        if os.path.exists(self.path) and os.path.getsize(self.path) % self.DTYPE.itemsize:
            return False
        if not len(entries):
            return True
        ts, rel = entries["ts"], entries["rel"].astype(np.int64)
        return bool(np.all(np.diff(ts) > 0) and np.all(np.diff(rel) > 0) and rel[-1] <= max_relative)

    def count_below(self, relative_offset: int) -> int:
        """How many entries index batches before `relative_offset`."""
        return int(np.searchsorted(self.entries["rel"], relative_offset, side="left"))
