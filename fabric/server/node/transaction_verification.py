"""Transactional appends verified at the partition leader (Kafka's KIP-890, the server-side defence): a batch that
would open its producer's transaction on a partition is written only if the coordinator's record of the
transactional id it names has that producer id and epoch as a writer of its open transaction, registered with
the partition (it joined with it: add_transaction_writer, Kafka's AddPartitionsToTxn). So a transaction the
coordinator does not know never opens on a partition, and never holds its last stable offset back: the
coordinator's timeouts and aborts reach every open transaction. (`write` on the transactional id is checked
with the request's other ACLs, by the node's service.)

One round trip per transaction and partition: a batch of a producer whose transaction is open on the partition
continues it, verified when it opened (the partition's own transaction state says so, rebuilt from its frames,
so a new leader knows it too). That is decided again under the partition's lock, after the producer checks
(ProducerBatch.verification, run by fabric.storage.producer_state), so:
- a fenced producer hears InvalidProducerEpochError before any refusal of this module;
- a batch whose transaction a marker ended meanwhile is verified again, never written as the start of a new
  one. Markers written here move the partition's marker count (`markers_begin`), so a verification from before
  them does not count either; after ATTEMPTS such races the append is refused with ConcurrentTransactionsError
  (retriable).
"""
from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, replace
from typing import Callable, TypeVar

from fabric.common.errors import ConcurrentTransactionsError, FabricError, InvalidTxnStateError
from fabric.common.redaction import clip
from fabric.common.types import ProducerBatch, TopicPartition
from fabric.storage.log import Log

log = logging.getLogger(__name__)
T = TypeVar("T")
ATTEMPTS = 3


class _Reverify(Exception):
    """Raised under the partition's lock: the batch would open a transaction its verification does not cover
    (nothing written); the append is verified again."""


@dataclass(frozen=True)
class _Verified:
    """The coordinator's answer for one batch: the partition's marker count when it was asked, and the refusal
    to raise if the batch would open a transaction (None: it may)."""

    markers: int
    refusal: FabricError | None


class TransactionVerification:
    """Verifies the transactional appends of one node with `registered(transactional id, producer id, producer
    epoch, partition)`, the coordinator's answer (verify_transaction_writer, a cluster_action call: the leader
    gets a yes or no, not the record); thread-safe."""

    def __init__(self, registered: Callable[[str, int, int, TopicPartition], bool]) -> None:
        self.registered = registered
        self._markers: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()

    def append(self, transactional_id: str, tp: TopicPartition, producer: ProducerBatch, plog: Log,
               write: Callable[[ProducerBatch], T]) -> T:
        """write(the batch's producer fields with their verification): what it returns, once verified."""
        for _ in range(ATTEMPTS):
            verified = None if _open(plog, producer) else self._verify(transactional_id, tp, producer)
            try:
                return write(replace(producer, verification=functools.partial(self._check, tp, producer, plog,
                                                                              verified)))
            except _Reverify:
                log.info("%s-%d: the transaction of producer %d ended while its append was verified: verifying "
                         "again", *tp, producer.producer_id)
        raise ConcurrentTransactionsError(f"transaction markers kept being written to {tp[0]}-{tp[1]} while the "
                                          f"append of producer {producer.producer_id} was verified; nothing was "
                                          "written: retry")

    def markers_begin(self, tp: TopicPartition) -> None:
        """Markers are about to be written to `tp`: verifications asked before no longer let a batch open a
        transaction there."""
        with self._lock:
            self._markers[tp] = self._markers.get(tp, 0) + 1

    def _count(self, tp: TopicPartition) -> int:
        with self._lock:
            return self._markers.get(tp, 0)

    def _verify(self, transactional_id: str, tp: TopicPartition, producer: ProducerBatch) -> _Verified:
        """Ask the coordinator whether the producer may open its transaction on `tp` (a refusal is raised only
        under the lock, after the producer checks)."""
        markers = self._count(tp)
        if self.registered(transactional_id, producer.producer_id, producer.producer_epoch, tp):
            return _Verified(markers, None)
        return _Verified(markers, InvalidTxnStateError(
            f"a transactional append to {tp[0]}-{tp[1]} as producer {producer.producer_id} (epoch "
            f"{producer.producer_epoch}) is refused: transactional id {clip(transactional_id, 80)} has no open "
            "transaction that this producer and epoch joined with this partition (`fabric transactions describe` "
            "shows its state); join it first (add_transaction_writer, Kafka's AddPartitionsToTxn), with a producer "
            "id from init_producer_id; nothing was written"))

    def _check(self, tp: TopicPartition, producer: ProducerBatch, plog: Log, verified: _Verified | None) -> None:
        """Under the partition's lock: the batch continues its producer's open transaction, or its verification
        lets it open one and no marker was written to the partition since."""
        if verified is not None and verified.refusal is not None:
            raise verified.refusal
        if _open(plog, producer):
            return
        if verified is None or verified.markers != self._count(tp):
            raise _Reverify()


def _open(plog: Log, producer: ProducerBatch) -> bool:
    """True if the producer has a transaction open on the partition."""
    return producer.producer_id in plog.transactions.open_transactions()
