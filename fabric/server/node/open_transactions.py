"""The producers and the transactions open on a partition a node leads, for operators (kafka-transactions
describe-producers, find-hanging, and abort by start offset): each producer's epoch, last sequence and last frame's
timestamp, from the partition's producer state (fabric.storage.producer_state), and each open transaction's
producer, epoch, first offset and that record's timestamp, from the partition's own transaction state
(fabric.storage.transactions) and the frame that opened it."""
from __future__ import annotations

from fabric.common.errors import CorruptRecordError, InvalidTxnStateError, OffsetOutOfRangeError
from fabric.common.types import OpenTransaction, ProducerState
from fabric.storage import frame
from fabric.storage.frame import FrameHeader
from fabric.storage.log import Log
from fabric.storage.producer_state import ProducerEntry

MAX_LISTED = 1000  # producers (or open transactions) one answer lists at most


def describe(plog: Log) -> list[OpenTransaction]:
    """The partition's open transactions, oldest first (at most MAX_LISTED)."""
    opened = sorted(plog.transactions.open_transactions().items(), key=lambda item: item[1])
    return [_described(plog, producer_id, first) for producer_id, first in opened[:MAX_LISTED]]


def producers(plog: Log) -> list[ProducerState]:
    """The partition's producers, those with an open transaction first, oldest first, then the others by their
    last write, most recent first (at most MAX_LISTED)."""
    kept = dict(plog.producers())
    opened = {t.producer_id: t for t in describe(plog)}
    order = list(opened) + [p for p in reversed(kept) if p not in opened]
    return [_producer(plog, p, kept.get(p), opened.get(p)) for p in order[:MAX_LISTED]]


def _producer(plog: Log, producer_id: int, entry: ProducerEntry | None, txn: OpenTransaction | None
              ) -> ProducerState:
    """One producer's state, from its entry in the producer state (None: it has none, only an open transaction)
    and its open transaction (None: none)."""
    epoch, sequence, stamp = (-1 if txn is None else txn.producer_epoch), -1, -1
    if entry is not None:
        last = _header_at(plog, entry.last_offset, producer_id)
        epoch, stamp = entry.epoch, (-1 if last is None else last.max_timestamp)
        sequence = entry.batches[-1].last_sequence if entry.batches else -1
    if txn is None:
        return ProducerState(producer_id, epoch, sequence, stamp)
    return ProducerState(producer_id, epoch, sequence, stamp, txn.start_offset, txn.start_timestamp_us)


def _header_at(plog: Log, offset: int, producer_id: int) -> FrameHeader | None:
    """The header of the frame at `offset` if it is `producer_id`'s (None where it cannot be read: below the log
    start, or damaged)."""
    try:
        headers = [h for h, _ in frame.split_frames(plog.read_frames(offset, 1)) if not h.is_schema]
    except (OffsetOutOfRangeError, CorruptRecordError):
        return None
    return headers[0] if headers and headers[0].producer_id == producer_id else None


def _described(plog: Log, producer_id: int, first: int) -> OpenTransaction:
    """The open transaction of `producer_id` from `first`, with the epoch and timestamp of its first frame (-1
    where that frame cannot be read: below the log start, or damaged)."""
    header = _header_at(plog, first, producer_id)
    if header is None:
        return OpenTransaction(producer_id, -1, first, -1)
    return OpenTransaction(producer_id, header.producer_epoch, first, header.first_timestamp)


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
