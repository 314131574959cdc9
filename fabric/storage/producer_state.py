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
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from fabric.common.errors import InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError
from fabric.common.types import ProducerBatch
from fabric.storage.frame import FrameHeader

BATCHES_KEPT = 5  # Kafka's max.in.flight.requests.per.connection bound for idempotence
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
    batches: deque[BatchEntry] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))


class ProducerStateTable:
    """The producers of partition `partition` (a name for messages)."""

    def __init__(self, partition: str) -> None:
        self.partition = partition
        self._producers: dict[int, ProducerEntry] = {}

    @classmethod
    def rebuild(cls, partition: str, headers: Iterable[FrameHeader]) -> ProducerStateTable:
        """The table the frames with these headers (in offset order) leave."""
        table = cls(partition)
        for header in headers:
            table.update(header)
        return table

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

    def update(self, header: FrameHeader) -> None:
        """Take a written frame (ignored unless an idempotent producer's). A transaction marker only moves the
        producer's epoch: one that aborts a zombie's transaction carries a bumped epoch, which fences it."""
        if header.producer_id < 0 or header.is_schema:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self._producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        if header.is_control:
            return
        entry.batches.append(BatchEntry(header.base_sequence, last_sequence(header.base_sequence,
                                                                            header.record_count),
                                        header.base_offset))
