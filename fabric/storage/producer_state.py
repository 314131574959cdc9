"""Idempotent producers' state of one partition (Kafka's ProducerStateManager, KIP-98): per producer id, its
epoch and the sequence ranges and offsets of its last BATCHES_KEPT batches, so a retried batch is recognised.

Rules, checked before a batch is written (`check`):
- a batch without a producer id (-1) is not idempotent and is never checked;
- an epoch below the producer's latest is a fenced, older producer (InvalidProducerEpochError);
- a batch whose first and last sequence equal one of the kept batches is a duplicate: it is not written again,
  and its original base offset is the answer;
- otherwise the first sequence must follow the producer's last (0 for a new epoch, or for a producer id this
  partition has no state of): anything else is OutOfOrderSequenceError (a gap: records were lost in between),
  or UnknownProducerIdError for an unknown producer id whose sequence is not 0;
- a new batch that carries a `verification` (a transactional one at a data node's leader) is written only if
  it passes, so a fenced producer hears of its epoch before anything else.

The table is rebuilt from the frame headers of the log (`rebuild`), which carry producer id, epoch and base
sequence, so it survives restarts and a new leader has the state of the records it copied.

A producer that wrote nothing here for producer.id.expiration.ms (Kafka's name and default: a day) is forgotten
(`expire`, run by the background log maintenance), unless a transaction of its is open here: without that, every
producer a partition ever saw would stay in memory, about 1 KB each, and a client making a producer per task or
per request would grow a server without bound. Its next batch is then refused as an unknown producer's, and it
takes a new id; a retry that comes after that long is written again, as in Kafka. The time is the process's own
monotonic clock at the write (a record's timestamp is the client's to choose); a rebuilt entry counts from the
rebuild, so a restart never forgets a producer sooner than a running process would. The table is kept in the
order of each producer's last write, so forgetting looks at the expired producers only.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Container, Iterable

from fabric.common.errors import InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError
from fabric.common.types import ProducerBatch
from fabric.storage.frame import FrameHeader

BATCHES_KEPT = 5  # Kafka's max.in.flight.requests.per.connection bound for idempotence
EXPIRATION_KEY = "producer.id.expiration.ms"
DEFAULT_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default: a day
SEQUENCE_MAX = (1 << 31) - 1  # sequences are int32 and wrap to 0 past it


@dataclass(frozen=True)
class BatchEntry:
    first_sequence: int
    last_sequence: int
    base_offset: int


def last_sequence(base_sequence: int, count: int) -> int:
    return (base_sequence + count - 1) % (SEQUENCE_MAX + 1)


@dataclass
class ProducerEntry:
    epoch: int
    last_ms: int  # when its last frame was written or read here (the monotonic clock, ms)
    batches: deque[BatchEntry] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    last_offset: int = -1  # the base offset of its last frame (a batch or a transaction marker)


class ProducerStateTable:
    """The producers of partition `partition` (a name for messages), in the order of their last writes."""

    def __init__(self, partition: str) -> None:
        self.partition = partition
        self._producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    @classmethod
    def rebuild(cls, partition: str, headers: Iterable[FrameHeader], now_ms: int) -> ProducerStateTable:
        """The table the frames with these headers (in offset order) leave, each producer last seen `now_ms`."""
        table = cls(partition)
        for header in headers:
            table.update(header, now_ms)
        return table

    @classmethod
    def restore(cls, partition: str, entries: Iterable[tuple[int, ProducerEntry]], since: int, now_ms: int
                ) -> ProducerStateTable:
        """The table of `entries` (producer id, entry; in the order of their last writes, as `entries()` gives
        them) cut to what `rebuild` would make of the frames from offset `since` on: producers whose last frame is
        older are left out, and so are the batches older than it; each producer last seen `now_ms`."""
        table = cls(partition)
        for producer_id, entry in entries:
            if entry.last_offset >= since:
                batches = deque((b for b in entry.batches if b.base_offset >= since), maxlen=BATCHES_KEPT)
                table._producers[producer_id] = ProducerEntry(entry.epoch, now_ms, batches, entry.last_offset)
        return table

    def entries(self) -> list[tuple[int, ProducerEntry]]:
        """(producer id, entry) of every producer, in the order of their last writes (what `restore` takes)."""
        return list(self._producers.items())

    def check(self, batch: ProducerBatch, count: int) -> int | None:
        """The base offset of the batch already written if this one is its retry; None if it is new and may be
        written (once its `verification`, if any, passed); a refusal (see the module docstring) otherwise."""
        original = self._check(batch, count)
        if original is None and batch.verification is not None:
            batch.verification()
        return original

    def _check(self, batch: ProducerBatch, count: int) -> int | None:
        entry = self._producers.get(batch.producer_id)
        last = last_sequence(batch.base_sequence, count)
        if entry is None:
            if batch.base_sequence != 0:
                raise UnknownProducerIdError(f"{self._where(batch)}: this partition has no state of the producer and "
                                             f"sequence {batch.base_sequence} is not its first; start a new producer")
            return None
        if batch.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"{self._where(batch)}: epoch {batch.producer_epoch} is older than the "
                                            f"producer's latest {entry.epoch}; a newer producer with its id fenced "
                                            "this one")
        if batch.producer_epoch > entry.epoch:
            if batch.base_sequence != 0:
                raise OutOfOrderSequenceError(f"{self._where(batch)}: a new epoch must start at sequence 0, got "
                                              f"{batch.base_sequence}")
            return None
        for kept in entry.batches:
            if (kept.first_sequence, kept.last_sequence) == (batch.base_sequence, last):
                return kept.base_offset
        expected = (entry.batches[-1].last_sequence + 1) % (SEQUENCE_MAX + 1) if entry.batches else 0
        if batch.base_sequence != expected:
            raise OutOfOrderSequenceError(f"{self._where(batch)}: sequence {batch.base_sequence} does not follow the "
                                          f"last written, so {expected} is expected: records between were lost")
        return None

    def _where(self, batch: ProducerBatch) -> str:
        """Who a refusal of `batch` concerns (made only for one: every idempotent append is checked)."""
        return f"producer {batch.producer_id} (epoch {batch.producer_epoch}) on {self.partition}"

    def update(self, header: FrameHeader, now_ms: int) -> None:
        """Take a frame written `now_ms` (ignored unless an idempotent producer's). A transaction marker only moves
        the producer's epoch: one that aborts a zombie's transaction carries a bumped epoch, which fences it."""
        if header.producer_id < 0 or header.is_schema:
            return
        entry = self._producers.pop(header.producer_id, None)  # (put back last: the order of last writes)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch, now_ms)
        entry.last_ms, entry.last_offset = now_ms, header.base_offset
        self._producers[header.producer_id] = entry
        if header.is_control:
            return
        entry.batches.append(BatchEntry(header.base_sequence, last_sequence(header.base_sequence,
                                                                            header.record_count),
                                        header.base_offset))

    def expire(self, now_ms: int, expiration_ms: int, in_transaction: Callable[[], Container[int]]) -> int:
        """Forget the producers that wrote nothing for `expiration_ms` before `now_ms`, except those
        `in_transaction()` names (asked only if some are due), which count as writing now. How many were
        forgotten."""
        before = now_ms - expiration_ms
        due = []
        for producer_id, entry in self._producers.items():
            if entry.last_ms > before:
                break  # (the rest wrote later)
            due.append(producer_id)
        if not due:
            return 0
        open_ids = in_transaction()
        forgotten = 0
        for producer_id in due:
            entry = self._producers.pop(producer_id)
            if producer_id in open_ids:
                entry.last_ms = now_ms
                self._producers[producer_id] = entry
            else:
                forgotten += 1
        return forgotten
