"""Read-only memory maps of segment and index files, shared by a process and bounded in number.

Kafka bounds the files a broker keeps open; here a map holds no file descriptor at all (the file is closed once
mapped, and the mapping lives as long as a buffer over it), and this least-recently-used cache bounds how many
maps a process keeps (a buffer a reader still holds keeps its own map alive until dropped). So a process serving
thousands of partitions neither runs out of file descriptors nor of mappings.

A map reserves address space past the file's end (twice its size, at least RESERVE_MIN), so a file that grows
is not mapped again: the new bytes appear in the same shared map, and a reader at the tail of a growing segment
or index only takes a buffer over more of it. Every buffer handed out stops at the file's size when it was
looked at: bytes past a file's end are never read (on Linux, touching a mapped page past the end is SIGBUS).
Where the address space cannot be reserved (a process limit on it, RLIMIT_AS), a file is mapped at its size and
mapped again when it grows.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import threading
from collections import OrderedDict
from typing import NamedTuple

import pyarrow as pa

log = logging.getLogger(__name__)
MAX_MAPS = 512
RESERVE_MIN = 4 << 20
_EMPTY = pa.py_buffer(b"")
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64)
_LIBC.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value


class Mapping:
    """A read-only, shared map of a file's first `length` bytes at `address`, which may reach past the file's
    end; unmapped when the last buffer over it is dropped."""

    def __init__(self, address: int, length: int) -> None:
        self.address, self.length = address, length

    @classmethod
    def of(cls, fd: int, length: int) -> Mapping:
        """Map `length` bytes of the open file `fd` (OSError if the address space cannot be had)."""
        address = _LIBC.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {length} bytes: {os.strerror(err)}")
        return cls(address, length)

    def view(self, size: int) -> pa.Buffer:
        """A buffer over the first `size` bytes (at most the file's size now), keeping this map alive."""
        return pa.foreign_buffer(self.address, size, base=self)

    def __del__(self) -> None:
        _LIBC.munmap(self.address, self.length)


class _Cached(NamedTuple):
    inode: int
    size: int
    buffer: pa.Buffer
    mapping: Mapping | None  # None: mapped at its size (no reservation), or empty


def _reserve(size: int) -> int:
    """The address space to map for a file of `size` bytes: room to double, in whole pages."""
    want = max(2 * size, RESERVE_MIN)
    return -(-want // mmap.PAGESIZE) * mmap.PAGESIZE


class MapCache:
    """Maps of files by path, followed as they grow or shrink, mapped again when replaced (a new inode) or when
    they outgrow their reservation."""

    def __init__(self, capacity: int = MAX_MAPS) -> None:
        self.capacity = capacity
        self._maps: OrderedDict[str, _Cached] = OrderedDict()
        self._guard = threading.Lock()
        self._reserving = True  # False once the address space could not be reserved: map files at their size

    def get(self, path: str) -> pa.Buffer:
        """A buffer over the whole file as it is now (FileNotFoundError if there is none)."""
        return self.mapped(path)[0]

    def mapped(self, path: str) -> tuple[pa.Buffer, int]:
        """get(), and the inode of the file the buffer maps (a caller that compares it with a later stat knows
        whether the file was replaced meanwhile)."""
        st = os.stat(path)
        with self._guard:
            cached = self._maps.get(path)
            if cached is not None and cached.inode == st.st_ino:
                if cached.size == st.st_size:
                    self._maps.move_to_end(path)
                    return cached.buffer, cached.inode
                if cached.mapping is not None and st.st_size <= cached.mapping.length:
                    return self._keep(path, cached._replace(size=st.st_size,
                                                            buffer=cached.mapping.view(st.st_size)))
        return self._map(path)

    def _map(self, path: str) -> tuple[pa.Buffer, int]:
        """Map `path` afresh (its size and inode read from the open file, so they belong to the file mapped)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            mapping = self._mapping(fd, st.st_size)
        finally:
            os.close(fd)
        if mapping is not None:
            cached = _Cached(st.st_ino, st.st_size, mapping.view(st.st_size), mapping)
        elif st.st_size == 0:
            cached = _Cached(st.st_ino, 0, _EMPTY, None)
        else:
            with pa.memory_map(path, "r") as mapped:
                buffer = mapped.read_buffer()
            cached = _Cached(st.st_ino, buffer.size, buffer, None)
        with self._guard:
            return self._keep(path, cached)

    def _mapping(self, fd: int, size: int) -> Mapping | None:
        """A reserving map of the open file, or None where address space cannot be reserved."""
        if not self._reserving:
            return None
        try:
            return Mapping.of(fd, _reserve(size))
        except OSError as exc:
            self._reserving = False
            log.warning("cannot reserve address space to map files (%s); files are mapped at their size and "
                        "mapped again as they grow (is the process's address space limited? ulimit -v)", exc)
            return None

    def _keep(self, path: str, cached: _Cached) -> tuple[pa.Buffer, int]:
        """Cache `cached` as the newest map (the caller holds the guard); its buffer and inode."""
        self._maps[path] = cached
        self._maps.move_to_end(path)
        while len(self._maps) > self.capacity:
            self._maps.popitem(last=False)
        return cached.buffer, cached.inode

    def forget(self, path: str) -> None:
        """Drop the map of `path` (the file was truncated, replaced or deleted)."""
        with self._guard:
            self._maps.pop(path, None)

    def __len__(self) -> int:
        return len(self._maps)


MAPS = MapCache()
