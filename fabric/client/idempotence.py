"""An idempotent producer's sequences (KIP-98): a producer id and epoch from the fabric (init_producer_id), and
per partition the sequence of the next record, which every batch carries so the leader recognises a retry.

A batch keeps its producer fields (id, epoch, sequence) across its retries; the next batch to the partition
starts where it ended once it is acknowledged, or where the batches still in flight before it end (`ahead`: up to
max_in_flight_requests_per_connection batches of one partition are in flight together, fabric.client.appends).
One run of a partition's batches is appended at a time (its `partition_lock`), its batches sent in sequence
order, so they reach the leader in that order; batches to different partitions may be in flight together. A
batch that finally fails leaves its outcome unknown, so the producer takes a new producer id
(`BatchSequence.failed`): a later batch can then never reuse that batch's sequences and be taken for its retry. A
batch of another partition acknowledged after that reset advances nothing: its id is no longer the producer's.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from fabric.client.cluster import Cluster
from fabric.common.errors import InvalidConfigError
from fabric.common.types import ProducerIdentity, TopicPartition
from fabric.storage.producer_state import BATCHES_KEPT

log = logging.getLogger(__name__)
SEQUENCE_MAX = (1 << 31) - 1  # sequences are int32 and wrap to 0 past it, as Kafka's do
MAX_IN_FLIGHT = BATCHES_KEPT  # batches of a partition in flight at most for idempotence: as many as leaders keep


def enabled(config: dict[str, Any], acks: str, given: set[str]) -> bool:
    """Whether a producer with `config` (its settings `given` explicitly) is idempotent, as Kafka decides: by
    default when acks=all and at most MAX_IN_FLIGHT batches per partition are in flight (a retried batch must
    find its sequence among the leader's last ones); an explicit enable_idempotence=True that cannot hold is an
    error naming the setting to drop."""
    if not config["enable_idempotence"]:
        return False
    conflict = ""
    if acks != "all":
        conflict = f"acks=all (got acks={config['acks']})"
    elif config["max_in_flight_requests_per_connection"] > MAX_IN_FLIGHT:
        conflict = (f"max_in_flight_requests_per_connection of at most {MAX_IN_FLIGHT} (got "
                    f"{config['max_in_flight_requests_per_connection']})")
    if conflict and "enable_idempotence" in given:
        raise InvalidConfigError(f"enable_idempotence needs {conflict}, as in Kafka; drop one of the two")
    if conflict:
        log.debug("the producer is not idempotent: that needs %s", conflict)  # (the default giving way, as Kafka)
    return not conflict


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
        lock = self._partition_locks.get(tp)  # (a dict's get is atomic: the lock is made once, under _lock)
        if lock is None:
            with self._lock:
                lock = self._partition_locks.setdefault(tp, threading.Lock())
        return lock

    def batch(self, tp: TopicPartition, ahead: int = 0) -> BatchSequence:
        """The producer fields of the next batch to `tp` (its partition lock held), taken at its first attempt,
        behind `ahead` records in flight before it."""
        return BatchSequence(self, tp, ahead)

    def _fields(self, tp: TopicPartition, ahead: int) -> dict[str, int]:
        with self._lock:
            if self._identity is None:
                self._identity = self.cluster.init_producer_id()
                log.info("idempotent producer id %d, epoch %d", self._identity.producer_id,
                         self._identity.producer_epoch)
            return {"producer_id": self._identity.producer_id, "producer_epoch": self._identity.producer_epoch,
                    "base_sequence": (self._next.get(tp, 0) + ahead) % (SEQUENCE_MAX + 1)}

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

    def __init__(self, sequences: Sequences, tp: TopicPartition, ahead: int) -> None:
        self._sequences, self._tp, self._ahead = sequences, tp, ahead
        self._taken: dict[str, int] | None = None

    def fields(self) -> dict[str, int]:
        """The batch's producer id, epoch and base sequence (asking the fabric for a producer id first if needed)."""
        if self._taken is None:
            self._taken = self._sequences._fields(self._tp, self._ahead)
        return self._taken

    def renewed(self) -> BatchSequence:
        """This batch, or (once every batch before it was answered) a new one to send it as where the producer id
        it was sent with was dropped meanwhile: that id's sequence there was refused, so it is not reused."""
        with self._sequences._lock:
            stale = self._taken is not None and not self._sequences._current(self._taken)
        return self._sequences.batch(self._tp) if stale else self

    def written(self, count: int) -> None:
        """The batch, of `count` records, was acknowledged: the next one to its partition follows it."""
        if self._taken is not None:
            self._sequences._written(self._tp, self._taken, count)

    def failed(self, why: str) -> None:
        """The batch's outcome is unknown: drop the producer id it was sent with (unless already dropped)."""
        self._sequences._reset(self._taken, why)
