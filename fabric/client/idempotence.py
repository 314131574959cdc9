"""An idempotent producer's sequences (KIP-98): a producer id and epoch from the fabric (init_producer_id), and
per partition the sequence of the next record, which every batch carries so the leader recognises a retry.

A batch keeps its producer fields (id, epoch, sequence) across its retries; the next batch to the partition
starts where it ended once it is acknowledged. Each partition's batches are appended one at a time (its
`partition_lock`), so they reach the leader in sequence order; batches to different partitions may be in flight
together. A batch that finally fails leaves its outcome unknown, so the producer takes a new producer id
(`BatchSequence.failed`): a later batch can then never reuse that batch's sequences and be taken for its retry. A
batch of another partition acknowledged after that reset advances nothing: its id is no longer the producer's.
"""
from __future__ import annotations

import logging
import threading

from fabric.client.cluster import Cluster
from fabric.common.types import ProducerIdentity, TopicPartition

log = logging.getLogger(__name__)
SEQUENCE_MAX = (1 << 31) - 1  # sequences are int32 and wrap to 0 past it, as Kafka's do


class Sequences:
    """The producer identity and next sequences of one idempotent producer over `cluster` (thread-safe)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self._partition_locks: dict[TopicPartition, threading.Lock] = {}
        self._identity: ProducerIdentity | None = None
        self._next: dict[TopicPartition, int] = {}

    def partition_lock(self, tp: TopicPartition) -> threading.Lock:
        """The lock a batch to `tp` holds from its first attempt to its outcome."""
        with self._lock:
            return self._partition_locks.setdefault(tp, threading.Lock())

    def batch(self, tp: TopicPartition) -> BatchSequence:
        """The producer fields of the next batch to `tp` (its partition lock held), taken at its first attempt."""
        return BatchSequence(self, tp)

    def _fields(self, tp: TopicPartition) -> dict[str, int]:
        with self._lock:
            if self._identity is None:
                self._identity = self.cluster.init_producer_id()
                log.info("idempotent producer id %d, epoch %d", self._identity.producer_id,
                         self._identity.producer_epoch)
            return {"producer_id": self._identity.producer_id, "producer_epoch": self._identity.producer_epoch,
                    "base_sequence": self._next.get(tp, 0)}

    def _current(self, fields: dict[str, int]) -> bool:
        """Whether `fields` carry the producer's identity now (no reset since they were taken; lock held)."""
        return self._identity is not None and (fields["producer_id"], fields["producer_epoch"]) == (
            self._identity.producer_id, self._identity.producer_epoch)

    def _written(self, tp: TopicPartition, fields: dict[str, int], count: int) -> None:
        with self._lock:
            if self._current(fields):
                self._next[tp] = (fields["base_sequence"] + count) % (SEQUENCE_MAX + 1)

    def _reset(self, fields: dict[str, int] | None, why: str) -> None:
        with self._lock:
            if self._identity is None or (fields is not None and not self._current(fields)):
                return  # nothing taken yet, or another batch's failure dropped that id already
            log.info("idempotent producer id %d dropped (%s); the next batch takes a new one",
                     self._identity.producer_id, why)
            self._identity, self._next = None, {}


class BatchSequence:
    """The producer fields of one batch to `tp`: asked for at its first attempt, then the same at every retry."""

    def __init__(self, sequences: Sequences, tp: TopicPartition) -> None:
        self._sequences, self._tp = sequences, tp
        self._taken: dict[str, int] | None = None

    def fields(self) -> dict[str, int]:
        """The batch's producer id, epoch and base sequence (asking the fabric for a producer id first if needed)."""
        if self._taken is None:
            self._taken = self._sequences._fields(self._tp)
        return self._taken

    def written(self, count: int) -> None:
        """The batch, of `count` records, was acknowledged: the next one to its partition follows it."""
        if self._taken is not None:
            self._sequences._written(self._tp, self._taken, count)

    def failed(self, why: str) -> None:
        """The batch's outcome is unknown: drop the producer id it was sent with (unless already dropped)."""
        self._sequences._reset(self._taken, why)
