"""The frames a replica log wrote last, kept in memory: a leader answers its followers' and its consumers' fetches
at the tail from them instead of reading back, from the segment file, the bytes it wrote a moment before (Kafka
serves those from the page cache; here each read from the file costs an index search, a CRC walk and system
calls).

Only a log whose directory one process owns keeps them (a data node's: LogManager(replica=True)); an embedded
`file://` log may be written by other processes, so it always reads its files.
"""
from __future__ import annotations

import bisect
import threading
from typing import NamedTuple

import pyarrow as pa

from fabric.storage.frame import FrameHeader
from fabric.storage.scan import Frame

# per partition, kept until its next write: hundreds of small frames, far more than followers at the tail need,
# and at most 640 MiB on a node with 10,000 partitions
RECENT_BYTES = 64 << 10
LARGEST = 32 << 10  # a larger frame is read from its file: its per-byte costs outweigh a read's fixed ones


class KeptFrame(NamedTuple):
    """A kept frame: where it is in its segment's file, and its payload as written."""

    frame: Frame
    payload: pa.Buffer | bytes


class RecentFrames:
    """The last frames this process appended (Log._write_one: a leader's writes and markers) to the active
    segment based at `segment_base`, whose schema is `schema`, oldest first, at most `max_bytes` in all, none over
    LARGEST bytes.

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
        self.schema: pa.Schema | None = None
        self._bases: list[int] = []
        self._ends: list[int] = []
        self._packed: list[bytes] = []  # each kept frame's header, packed once here, not at each follower's read
        self._kept: list[KeptFrame] = []
        self._size = 0

    def wrote(self, segment_base: int, schema: pa.Schema, position: int, header: FrameHeader,
              payload: pa.Buffer | bytes) -> None:
        """Keep the frame just written at byte `position` of the segment based at `segment_base`, whose schema is
        `schema`, after its last frame (lock held)."""
        with self._guard:
            if header.size > min(self.max_bytes, LARGEST):
                self._forget()
                return
            if segment_base != self.segment_base or (self._ends and self._ends[-1] != header.base_offset):
                self._forget()  # a roll, or frames written past what is kept (not contiguous: start over)
                self.segment_base, self.schema = segment_base, schema
            self._keep(KeptFrame(Frame(position, header), payload))

    def _keep(self, kept: KeptFrame) -> None:
        """Add the frame after the last kept one and drop the oldest beyond max_bytes (guard held)."""
        header = kept.frame.header
        self._bases.append(header.base_offset)
        self._ends.append(header.next_offset)
        self._packed.append(header.pack())
        self._kept.append(kept)
        self._size += header.size
        drop = 0
        while self._size > self.max_bytes:
            self._size -= self._kept[drop].frame.header.size
            drop += 1
        if drop:
            del self._bases[:drop], self._ends[:drop], self._packed[:drop], self._kept[:drop]

    def _chosen(self, segment_base: int, offset: int, end: int, max_bytes: int) -> range | None:
        """Which kept frames a read gives (guard held): from the one holding `offset`, those starting below `end`,
        about `max_bytes` (at least one frame), if `offset` lies in what is kept of the active segment (based at
        `segment_base` in the caller's look at the log); else None (read the files)."""
        if segment_base != self.segment_base or not self._bases or not self._bases[0] <= offset < self._ends[-1]:
            return None
        first = i = bisect.bisect_right(self._ends, offset)
        budget = max_bytes
        while i < len(self._bases) and self._bases[i] < end:
            budget -= self._kept[i].frame.header.size
            i += 1
            if budget <= 0:
                break
        return range(first, i) if i > first else None

    def read(self, segment_base: int, offset: int, end: int, max_bytes: int) -> pa.Buffer | None:
        """The chosen frames' bytes (see `_chosen`), as Log.read_frames gives them; None: read the files."""
        with self._guard:
            chosen = self._chosen(segment_base, offset, end, max_bytes)
            parts = [part for i in chosen for part in (self._packed[i], self._kept[i].payload)] \
                if chosen is not None else None
        return pa.py_buffer(b"".join(parts)) if parts else None

    def frames(self, segment_base: int, offset: int, end: int, max_bytes: int
               ) -> tuple[pa.Schema, list[KeptFrame]] | None:
        """The chosen frames (see `_chosen`) and the schema their payloads are encoded against, as a consumer's
        read decodes them; None: read the files."""
        with self._guard:
            chosen = self._chosen(segment_base, offset, end, max_bytes)
            if chosen is None or self.schema is None:
                return None
            return self.schema, self._kept[chosen.start:chosen.stop]
