"""The high watermark: the end of the committed log. Readers never read past it.

An 8-byte little-endian file, memory-mapped, written only under the partition lock. Appends write their
frames first and advance the watermark last, so a frame below the watermark is always whole and committed;
anything beyond it after a crash is torn or unacknowledged and recovery removes it.
"""
from __future__ import annotations

import mmap
import os
import struct

_FMT = struct.Struct("<q")


class HighWatermark:
    """A shared, durable counter: the next offset a reader may not yet see."""

    def __init__(self, path: str, initial: int = 0) -> None:
        self.path = path
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(_FMT.pack(initial))
            try:
                os.link(tmp, path)  # first creator wins; never overwrite a live watermark
            except FileExistsError:
                pass
            os.unlink(tmp)
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), _FMT.size)

    @property
    def value(self) -> int:
        return _FMT.unpack_from(self._map)[0]

    def set(self, value: int) -> None:
        """Publish a new end (caller holds the partition lock)."""
        _FMT.pack_into(self._map, 0, value)

    def fsync(self) -> None:
        self._map.flush()
