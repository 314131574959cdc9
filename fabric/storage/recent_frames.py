"""The frames a replica log wrote last, kept in memory: a leader answers its followers' fetches at the tail from
them instead of reading back, from the segment file, the bytes it wrote a moment before (Kafka serves those from
the page cache; here each read from the file costs an index search, a CRC walk and system calls).

Only a log whose directory one process owns keeps them (a data node's: LogManager(replica=True)); an embedded
`file://` log may be written by other processes, so it always reads its files.
"""
from __future__ import annotations

import bisect
import threading

import pyarrow as pa

from fabric.storage.frame import FrameHeader

# per partition, kept until its next write: hundreds of small frames, far more than followers at the tail need,
# and at most 640 MiB on a node with 10,000 partitions
RECENT_BYTES = 64 << 10
LARGEST = 32 << 10  # a larger frame is read from its file: its per-byte costs outweigh a read's fixed ones


class RecentFrames:
    """The last frames this process appended (Log._write_one: a leader's writes and markers) to the active
    segment based at `segment_base`, oldest first, at most `max_bytes` in all, none over LARGEST bytes.

    Invariant (checked in `wrote`): the frames are contiguous, each starting where the one before ended, and are
    the bytes at their offsets in that segment's file. Whatever may change those bytes otherwise (a recovery, a
    truncation, a write that failed part-way) calls `clear`; a roll starts over with the new segment. Readers
    (without the partition lock) and the writer take `_guard`, so a read sees the frames before or after a write.
    """

    def __init__(self, max_bytes: int = RECENT_BYTES) -> None:
        self.max_bytes = max_bytes
        self._guard = threading.Lock()
        self.clear()

    def clear(self) -> None:
        """Forget every frame: reads go to the files until the next write."""
        with self._guard:
            self._forget()

    def _forget(self) -> None:
        """clear(), the guard held."""
        self.segment_base = -1
        self._bases: list[int] = []
        self._ends: list[int] = []
        self._frames: list[tuple[bytes, pa.Buffer | bytes]] = []  # packed header, payload referenced as written
        self._sizes: list[int] = []
        self._size = 0

    def wrote(self, segment_base: int, header: FrameHeader, payload: pa.Buffer | bytes) -> None:
        """Keep the frame just written at the end of the segment based at `segment_base` (lock held)."""
        with self._guard:
            if header.size > min(self.max_bytes, LARGEST):
                self._forget()
                return
            if segment_base != self.segment_base or (self._ends and self._ends[-1] != header.base_offset):
                self._forget()  # a roll, or frames written past what is kept (not contiguous: start over)
                self.segment_base = segment_base
            self._keep(header, payload)

    def _keep(self, header: FrameHeader, payload: pa.Buffer | bytes) -> None:
        """Add the frame after the last kept one and drop the oldest beyond max_bytes (guard held)."""
        self._bases.append(header.base_offset)
        self._ends.append(header.next_offset)
        self._frames.append((header.pack(), payload))  # packed once here, not at each follower's read
        self._sizes.append(header.size)
        self._size += header.size
        drop = 0
        while self._size > self.max_bytes:
            self._size -= self._sizes[drop]
            drop += 1
        if drop:
            del self._bases[:drop], self._ends[:drop], self._frames[:drop], self._sizes[:drop]

    def read(self, segment_base: int, offset: int, end: int, max_bytes: int) -> pa.Buffer | None:
        """The kept frames from the one holding `offset`, those starting below `end`, about `max_bytes` (at least
        one frame), as Log.read_frames gives them, if `offset` lies in what is kept of the active segment (based
        at `segment_base` in the caller's look at the log); else None (read the files)."""
        parts: list[pa.Buffer | bytes] = []
        with self._guard:
            if segment_base != self.segment_base or not self._bases or not self._bases[0] <= offset < self._ends[-1]:
                return None
            i = bisect.bisect_right(self._ends, offset)
            budget = max_bytes
            while i < len(self._bases) and self._bases[i] < end:
                parts += self._frames[i]
                budget -= self._sizes[i]
                i += 1
                if budget <= 0:
                    break
        return pa.py_buffer(b"".join(parts)) if parts else None
