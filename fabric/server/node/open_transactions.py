"""The transactions open on a partition a node leads, for operators (kafka-transactions find-hanging, and abort by
start offset): each one's producer, epoch, first offset and that record's timestamp, from the partition's own
transaction state (fabric.storage.transactions) and the frame that opened it."""
from __future__ import annotations

from fabric.common.errors import CorruptRecordError, InvalidTxnStateError, OffsetOutOfRangeError
from fabric.common.types import OpenTransaction
from fabric.storage import frame
from fabric.storage.log import Log

MAX_LISTED = 1000  # open transactions one answer lists at most (the oldest)


def describe(plog: Log) -> list[OpenTransaction]:
    """The partition's open transactions, oldest first (at most MAX_LISTED)."""
    opened = sorted(plog.transactions.open_transactions().items(), key=lambda item: item[1])
    return [_described(plog, producer_id, first) for producer_id, first in opened[:MAX_LISTED]]


def _described(plog: Log, producer_id: int, first: int) -> OpenTransaction:
    """The open transaction of `producer_id` from `first`, with the epoch and timestamp of its first frame (-1
    where that frame cannot be read: below the log start, or damaged)."""
    try:
        headers = [h for h, _ in frame.split_frames(plog.read_frames(first, 1)) if not h.is_schema]
    except (OffsetOutOfRangeError, CorruptRecordError):
        headers = []
    if not headers or headers[0].producer_id != producer_id:
        return OpenTransaction(producer_id, -1, first, -1)
    return OpenTransaction(producer_id, headers[0].producer_epoch, first, headers[0].first_timestamp)


def starting_at(plog: Log, start_offset: int) -> OpenTransaction:
    """The open transaction whose first record is at `start_offset`; InvalidTxnStateError naming the open ones
    otherwise."""
    opened = describe(plog)
    found = next((t for t in opened if t.start_offset == start_offset), None)
    if found is None:
        starts = [t.start_offset for t in opened]
        raise InvalidTxnStateError(
            f"no transaction open on {plog.name} starts at offset {start_offset} (open ones start at "
            f"{starts[:10] if starts else 'none'}); nothing was written: `fabric transactions find-hanging` lists "
            "the hanging ones with their start offsets")
    return found
