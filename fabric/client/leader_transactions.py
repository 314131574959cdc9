"""Transactions on the partition leaders of a cluster with data nodes (Kafka's KIP-98 design): a writer takes a
producer id, joins the transaction in the coordinator with every partition it will write, appends its rows to
each partition's leader as transactional batches (acks=all; invisible to read_committed readers), then the
coordinator's record of the transactional id is the commit point and markers end the transactions.

The Spark sink (sinks.transactional) runs it with many writers, one per task; a transactional producer
(`publish_on_leaders`) with one, itself. A transactional id's transactions are committed in sequence order, and
committing a sequence decides every writer that joined it: the ones named committed, every other one aborted.
So of two producers with one transactional id, the second to commit a sequence learns from the record that its
writes were aborted (fenced), and a new producer's init_transactions ends a transaction a dead one left open
(`abandon_open`), committing its sequence with no writers: all of them aborted, as Kafka's InitProducerId
aborts the ongoing transaction of the id it fences.
"""
from __future__ import annotations

import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Mapping, Sequence

import pyarrow as pa

from fabric.client.cluster import Cluster
from fabric.client.idempotence import SEQUENCE_MAX
from fabric.client.retry import retrying
from fabric.common.errors import FabricError, InvalidTxnStateError
from fabric.common.types import (
    ProducerBatch,
    ProducerIdentity,
    TopicPartition,
    TransactionalOffsets,
    TransactionRecord,
    transaction_sequence,
)

log = logging.getLogger(__name__)
TIMEOUT_S = 120.0  # how long an append or a marker keeps retrying retriable errors (Kafka's delivery.timeout.ms)


def append_batches(cluster: Cluster, txn: str, topic: str, partition: int, batches: Iterable[pa.RecordBatch],
                   identity: ProducerIdentity, codec: str) -> list[int]:
    """Append `batches` to the partition's leader, in order, as `identity`'s transaction `txn` (which it joined
    with the partition: the leader verifies that with the coordinator); the base offset of each. Each keeps its
    sequence across retries, so a retry after a lost answer is not written twice."""
    transactional_id, sequence, bases = transaction_sequence(txn)[0], 0, []
    for rows in batches:
        producer = ProducerBatch(identity.producer_id, identity.producer_epoch, sequence)
        bases.append(retrying(cluster, functools.partial(cluster.transactional_append, topic, partition, rows,
                                                         producer, transactional_id, codec),
                              f"append to {topic}-{partition}", TIMEOUT_S))
        sequence = (sequence + rows.num_rows) % (SEQUENCE_MAX + 1)
    return bases


def end_transaction(cluster: Cluster, txn: str) -> TransactionRecord:
    """Write the markers the coordinator's record decides for `txn`: commit or abort if it committed, abort
    for every writer if it did not (a failed batch); nothing if the record has moved on to a later one."""
    transactional_id, sequence = transaction_sequence(txn)
    record = retrying(cluster, lambda: cluster.coordinator.transaction_record(transactional_id),
                      f"read transaction {txn}", TIMEOUT_S)
    if record.sequence != sequence:
        return record
    markers = record.markers()

    def write(tp: tuple[str, int]) -> None:
        commit, abort = markers[tp]
        retrying(cluster, lambda: cluster.write_markers(tp[0], tp[1], transactional_id, commit, abort),
                 f"write the markers of {txn} to {tp[0]}-{tp[1]}", TIMEOUT_S)
    with ThreadPoolExecutor(max(1, min(len(markers), 8))) as pool:
        for done in [pool.submit(write, tp) for tp in sorted(markers)]:
            done.result()
    log.info("transaction %s %s: markers written to %d partition(s)", txn,
             "committed" if record.committed_writers is not None else "aborted", len(markers))
    return record


def publish_on_leaders(cluster: Cluster, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                       codec: str, offsets: TransactionalOffsets | None = None, timeout_ms: int = 60_000
                       ) -> dict[TopicPartition, list[int]] | None:
    """A producer transaction's commit on the leaders, as its one writer: join (asking for `timeout_ms`, its
    transaction.timeout.ms), append, commit (with the group
    `offsets`, which the coordinator applies at the commit point: coordinator.transaction_offsets), markers. The
    base offset of each batch of each partition; None if another producer with the same transactional id
    committed `txn` first (this one's writes, if any, are aborted by that commit's markers, and its offsets are
    not applied)."""
    if cluster.coordinator.transaction_committed(txn):
        return None
    identity = retrying(cluster, cluster.init_producer_id, "take a producer id", TIMEOUT_S)
    keys = sorted(key for key, batches in parts.items() if batches)
    joins = bool(keys) or offsets is not None  # a writer of no partition commits offsets: the record names it
    joined = False
    try:
        if joins:
            retrying(cluster, lambda: cluster.coordinator.add_transaction_writer(
                txn, identity.producer_id, identity.producer_epoch, keys, timeout_ms), f"join transaction {txn}",
                TIMEOUT_S)
            joined = True
        bases = {key: append_batches(cluster, txn, key[0], key[1], parts[key], identity, codec) for key in keys}
        writers = [identity.producer_id] if joins else []
        retrying(cluster, lambda: cluster.coordinator.commit_transaction(txn, writers, offsets),
                 f"commit transaction {txn}", TIMEOUT_S)
    except InvalidTxnStateError as exc:  # the sequence committed, or a newer one began: another producer's
        log.warning("transaction %s: %s", txn, exc)
        return None
    except FabricError as exc:  # refused (e.g. its offsets: a stale generation): end what this writer appended
        if keys and joined and not exc.retriable and not cluster.coordinator.transaction_committed(txn):
            abort_writer(cluster, txn, identity, keys)
        raise
    record = end_transaction(cluster, txn)
    if joins and identity.producer_id not in (record.committed_writers or ()):
        return None
    return bases


def abort_writer(cluster: Cluster, txn: str, identity: ProducerIdentity, keys: Sequence[TopicPartition]) -> None:
    """Abort what `identity` appended to `keys` for `txn`, which was refused (nothing committed), so readers need
    not wait for the transaction's next commit to end it; the epoch + 1 of the marker fences the identity."""
    transactional_id = transaction_sequence(txn)[0]
    abort = [(identity.producer_id, identity.producer_epoch + 1)]
    for topic, partition in keys:
        retrying(cluster, functools.partial(cluster.write_markers, topic, partition, transactional_id, [], abort),
                 f"abort {txn} on {topic}-{partition}", TIMEOUT_S)
    log.warning("transaction %s was refused: its writes to %d partition(s) are aborted", txn, len(keys))


def abandon_open(cluster: Cluster, transactional_id: str) -> None:
    """End the transaction of `transactional_id` that a writer joined but nobody committed (its producer died or
    is a zombie): its sequence commits with no writers, so every writer's records are aborted and a zombie's
    later commit finds it decided. A decided one whose markers may be unwritten (its producer died after the commit
    point) gets them, as Kafka's InitProducerId completes a pending commit. Nothing if no transaction is open."""
    record = retrying(cluster, lambda: cluster.coordinator.transaction_record(transactional_id),
                      f"read transaction {transactional_id}", TIMEOUT_S)
    if not record.writers:
        return
    if record.sequence <= record.committed_sequence:  # decided: its markers may be owed (a writer died after the
        if record.started_ms >= 0:  # commit point); this id's next transaction would forget its writers
            end_transaction(cluster, f"{transactional_id}:{record.sequence}")
        return
    txn = f"{transactional_id}:{record.sequence}"
    log.warning("transaction %s was left open by %d writer(s): aborting it", txn, len(record.writers))
    abort_transaction(cluster, txn)


def abort_transaction(cluster: Cluster, txn: str) -> TransactionRecord:
    """Decide `txn` with no writers, so every writer's records are aborted and a writer that joins later (a killed
    task still running) is refused before it writes; then write the markers. For a transaction nobody will
    replay: a Spark batch replays its batch id, so its abort only writes markers (end_transaction)."""
    retrying(cluster, lambda: cluster.coordinator.commit_transaction(txn, []), f"abort transaction {txn}",
             TIMEOUT_S)
    return end_transaction(cluster, txn)
