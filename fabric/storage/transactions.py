"""The transactions of one partition (Kafka's transaction index and last stable offset, KIP-98): which
producers have a transaction open here and where it began, and which ended in an abort.

A transactional frame (frame.ATTR_TRANSACTIONAL) of producer P opens P's transaction at its base offset, unless
one is open already; a control frame of P (frame.ATTR_CONTROL, a marker of one record) ends it, committed or
(frame.ATTR_ABORT) aborted, and an aborted one's range [first offset, marker offset) is kept. So:
- the last stable offset (LSO) is the first offset of the oldest open transaction (the log end if none):
  read_committed readers read below it and below the high watermark;
- a transactional frame below the LSO is visible unless it lies in an aborted range of its producer.

The state is rebuilt from the frame headers, which carry all of it (txn_index, which keeps what each segment's
frames say, so a rebuild walks only the frames past that), so it survives restarts and a follower has the state
of the frames it copied. Thread-safe: readers ask while the partition's writer updates it. An aborted range is
forgotten once the log start passes its marker (`forget_before`: none of its frames is left to read), as Kafka's
transaction index goes with its segment; a producer's ranges are kept in offset order, so a read looks one up by
bisection however many the producer aborted.
"""
from __future__ import annotations

import bisect
import threading

from fabric.storage.frame import ATTR_ABORT, ATTR_CONTROL, FrameHeader


class TransactionState:
    """The open and aborted transactions of partition `partition` (a name for messages)."""

    def __init__(self, partition: str) -> None:
        self.partition = partition
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._aborted: dict[int, list[tuple[int, int]]] = {}  # producer id -> aborted [first, marker) ranges

    def update(self, header: FrameHeader) -> None:
        """Take a written frame (ignored unless transactional or a marker)."""
        if header.is_schema or not (header.is_transactional or header.is_control):
            return
        self.take(header.producer_id, header.base_offset, header.attributes)

    def take(self, producer_id: int, base_offset: int, attributes: int) -> None:
        """Take a transactional frame or a marker, as its header's fields (txn_index keeps them)."""
        with self._lock:
            if attributes & ATTR_CONTROL:
                first = self._open.pop(producer_id, None)
                if attributes & ATTR_ABORT and first is not None:
                    self._aborted.setdefault(producer_id, []).append((first, base_offset))
            else:
                self._open.setdefault(producer_id, base_offset)

    def last_stable_offset(self, end: int) -> int:
        """The first offset of the oldest open transaction, at most `end` (the log end or high watermark)."""
        with self._lock:
            return min([end, *self._open.values()])

    def aborted(self, header: FrameHeader) -> bool:
        """True if this transactional data frame belongs to a transaction that aborted."""
        with self._lock:
            ranges = self._aborted.get(header.producer_id)
            if not ranges:
                return False
            at = bisect.bisect_right(ranges, (header.base_offset, 2**63)) - 1  # the last range starting at or before
            return at >= 0 and header.base_offset < ranges[at][1]

    def forget_before(self, offset: int) -> None:
        """Forget the aborted transactions whose every frame is below `offset`, the new log start (their marker is
        at or below it)."""
        with self._lock:
            for producer_id, ranges in list(self._aborted.items()):
                kept = ranges[bisect.bisect_right(ranges, offset, key=lambda r: r[1]):]
                if kept:
                    self._aborted[producer_id] = kept
                else:
                    del self._aborted[producer_id]

    def aborted_count(self) -> int:
        """How many aborted transactions are remembered (for read_committed reads of their frames)."""
        with self._lock:
            return sum(len(ranges) for ranges in self._aborted.values())

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction (for describing the partition)."""
        with self._lock:
            return dict(self._open)
