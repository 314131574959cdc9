"""Hanging transactions (kafka-transactions find-hanging, and abort by start offset): a transaction open on a
partition that the coordinator does not know (no record registers its producer with the partition: written before
leaders verified transactional appends, or its record moved on), or that it decided (committed or aborted) longer
than the transaction timeout ago without its marker reaching the partition. Nothing ends such a transaction, and
it holds the partition's last stable offset back: read_committed readers stop there for good.

`find_hanging` asks each partition's leader for its producers' open transactions (describe_producers) and the
coordinator for every transactional id's record (it sees only the ids its principal may describe: give it describe
on transactional-id:*, or an ongoing transaction looks unknown). `abort_hanging` ends the one starting at an offset
with an abort marker at the leader (abort_open_transaction, cluster_action on the cluster), after checking it
hangs: one the coordinator still runs is aborted through its transactional id, and one it committed is not aborted.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from fabric.client.cluster import Cluster
from fabric.common.errors import InvalidTxnStateError
from fabric.common.types import ProducerState, TopicPartition, TransactionRecord

UNKNOWN = "unknown"


@dataclass(frozen=True)
class HangingTransaction:
    """An open transaction on `topic`-`partition` (its producer, epoch and first offset), how long it has been
    open (ms; -1 if its first record cannot be read), and what the coordinator knows of it: `coordinator` is
    "unknown", or the decision ("committed" or "aborted") of `transactional_id`'s record."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    open_ms: int
    coordinator: str
    transactional_id: str | None = None


def _known(cluster: Cluster) -> dict[tuple[int, TopicPartition], tuple[str, str]]:
    """(producer id, partition) -> (the record's view: ongoing, committed or aborted; its transactional id), for
    every writer of every record the caller may describe."""
    out: dict[tuple[int, TopicPartition], tuple[str, str]] = {}
    for transactional_id in cluster.coordinator.list_transactions():
        record: TransactionRecord = cluster.coordinator.transaction_record(transactional_id)
        committed = set(record.committed_writers or ())
        for writer in record.writers:
            view = "ongoing" if record.open else ("committed" if writer.producer_id in committed else "aborted")
            out.update({(writer.producer_id, tp): (view, transactional_id) for tp in writer.partitions})
        for writer in record.aborted:
            out.update({(writer.producer_id, tp): ("aborted", transactional_id) for tp in writer.partitions})
    return out


def _opened(cluster: Cluster, tp: TopicPartition) -> list[ProducerState]:
    """The producers with a transaction open on `tp`, at its leader, oldest transaction first."""
    return [p for p in cluster.describe_producers(*tp) if p.transaction_start_offset >= 0]


def _hanging(tp: TopicPartition, opened: ProducerState, view: tuple[str, str] | None) -> HangingTransaction:
    started_us = opened.transaction_start_timestamp_us
    open_ms = -1 if started_us < 0 else max(0, int(time.time() * 1000) - started_us // 1000)
    state, transactional_id = view or (UNKNOWN, None)
    return HangingTransaction(tp[0], tp[1], opened.producer_id, opened.producer_epoch,
                              opened.transaction_start_offset, open_ms, state, transactional_id)


def find_hanging(cluster: Cluster, partitions: Iterable[TopicPartition], max_timeout_ms: int
                 ) -> list[HangingTransaction]:
    """The hanging transactions of `partitions`: each open one the coordinator does not know, and each it decided
    whose marker is missing, open longer than `max_timeout_ms` (the coordinator's transaction.max.timeout.ms:
    younger ones may still get their markers)."""
    known = _known(cluster)
    out = []
    for tp in partitions:
        for opened in _opened(cluster, tp):
            found = _hanging(tp, opened, known.get((opened.producer_id, tp)))
            if found.coordinator == UNKNOWN or (found.coordinator != "ongoing" and found.open_ms > max_timeout_ms):
                out.append(found)
    return out


def abort_hanging(cluster: Cluster, topic: str, partition: int, start_offset: int) -> HangingTransaction:
    """Abort the transaction open on `topic`-`partition` from `start_offset`, unless the coordinator runs it (abort
    it by its transactional id) or committed it (its commit marker is due); InvalidTxnStateError naming the fix
    otherwise, or when no transaction starts there. The transaction ended."""
    tp = (topic, partition)
    opened = next((t for t in _opened(cluster, tp) if t.transaction_start_offset == start_offset), None)
    if opened is None:
        raise InvalidTxnStateError(f"no transaction open on {topic}-{partition} starts at offset {start_offset}: "
                                   "nothing to abort (`fabric transactions find-hanging --topic "
                                   f"{topic} --partition {partition}` lists the hanging ones)")
    found = _hanging(tp, opened, _known(cluster).get((opened.producer_id, tp)))
    if found.coordinator == "ongoing":
        raise InvalidTxnStateError(f"the transaction from offset {start_offset} of {topic}-{partition} (producer "
                                   f"{opened.producer_id}) is not hanging: transactional id {found.transactional_id} "
                                   "runs it; abort it with `fabric transactions abort --transactional-id "
                                   f"{found.transactional_id}`")
    if found.coordinator == "committed":
        raise InvalidTxnStateError(f"the transaction from offset {start_offset} of {topic}-{partition} (producer "
                                   f"{opened.producer_id}) was committed by transactional id {found.transactional_id}: "
                                   "aborting it would lose committed records; its commit marker is written when the "
                                   "writer's commit is retried (a Spark batch replayed writes its markers again)")
    cluster.abort_open_transaction(topic, partition, start_offset)
    return found
