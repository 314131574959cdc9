"""An idempotent producer's sequences (KIP-98): a producer id and epoch from the fabric (init_producer_id), and
per partition the sequence of the next record, which every batch carries so the leader recognises a retry.

A batch keeps its sequence across its retries; the next batch to the partition starts where it ended once it
is acknowledged. Appends of one producer are made one at a time (`lock`), so each partition's batches reach the
leader in sequence order. A batch that finally fails leaves its outcome unknown, so the producer takes a new
producer id (`reset`): a later batch can then never reuse that batch's sequences and be taken for its retry.
"""
from __future__ import annotations

import logging
import threading

from fabric.client.cluster import Cluster
from fabric.common.types import ProducerIdentity, TopicPartition

log = logging.getLogger(__name__)
SEQUENCE_MAX = (1 << 31) - 1  # sequences are int32 and wrap to 0 past it, as Kafka's do


class Sequences:
    """The producer identity and next sequences of one idempotent producer over `cluster`."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.lock = threading.RLock()
        self._identity: ProducerIdentity | None = None
        self._next: dict[TopicPartition, int] = {}

    def fields(self, tp: TopicPartition) -> dict[str, int]:
        """The producer fields of the next batch to `tp` (asking the fabric for a producer id first if needed)."""
        if self._identity is None:
            self._identity = self.cluster.init_producer_id()
            log.info("idempotent producer id %d, epoch %d", self._identity.producer_id, self._identity.producer_epoch)
        return {"producer_id": self._identity.producer_id, "producer_epoch": self._identity.producer_epoch,
                "base_sequence": self._next.get(tp, 0)}

    def written(self, tp: TopicPartition, count: int) -> None:
        """A batch of `count` records to `tp` was acknowledged: the next one follows it."""
        self._next[tp] = (self._next.get(tp, 0) + count) % (SEQUENCE_MAX + 1)

    def reset(self, why: str) -> None:
        """Forget the producer id and sequences: the next batch asks for a new id."""
        if self._identity is not None:
            log.info("idempotent producer id %d dropped (%s); the next batch takes a new one",
                     self._identity.producer_id, why)
        self._identity, self._next = None, {}
