"""Read-only memory maps of segment and index files, shared by a process and bounded in number.

Kafka bounds the files a broker keeps open; here a map holds no file descriptor at all (pyarrow closes the
file once mapped, and the mapping lives as long as a buffer over it), and this least-recently-used cache bounds
how many maps a process keeps (a buffer a reader still holds keeps its own map alive until dropped). So a
process serving thousands of partitions neither runs out of file descriptors nor of mappings.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

import pyarrow as pa

MAX_MAPS = 512
_EMPTY = pa.py_buffer(b"")


class MapCache:
    """Maps of files by path, remapped when the file is replaced (a new inode) or changes size."""

    def __init__(self, capacity: int = MAX_MAPS) -> None:
        self.capacity = capacity
        self._maps: OrderedDict[str, tuple[tuple[int, int], pa.Buffer]] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, path: str) -> pa.Buffer:
        """A buffer over the whole file (FileNotFoundError if there is none). A cached map is reused while the
        file keeps its inode and its size (a file that grew or shrank is mapped again: a map past a file's end
        must never be read)."""
        st = os.stat(path)
        key = (st.st_ino, st.st_size)
        with self._guard:
            cached = self._maps.get(path)
            if cached is not None and cached[0] == key:
                self._maps.move_to_end(path)
                return cached[1]
        if st.st_size == 0:
            buf = _EMPTY
        else:
            with pa.memory_map(path, "r") as mapped:
                buf = mapped.read_buffer()
            key = (st.st_ino, buf.size)
        with self._guard:
            self._maps[path] = (key, buf)
            self._maps.move_to_end(path)
            while len(self._maps) > self.capacity:
                self._maps.popitem(last=False)
        return buf

    def forget(self, path: str) -> None:
        """Drop the map of `path` (the file was truncated, replaced or deleted)."""
        with self._guard:
            self._maps.pop(path, None)

    def __len__(self) -> int:
        return len(self._maps)


MAPS = MapCache()
