"""The fabric sink on a replicated cluster: a batch is written as transactions on the partition leaders, the
coordinator's record of the transactional id is the commit point, and markers end the transactions.

Task side (`write_transaction`): the task stages its rows to local frame files (sinks.staging, in a temporary
directory on the executor) so it knows every partition it will write before it writes any. It takes a producer
id (init_producer_id) and joins the transaction in the coordinator with those partitions
(add_transaction_writer: refused once the batch committed, so a zombie never starts), then appends the rows of
each file to the partition's leader as its transaction (acks=all, so they are replicated like any data; each
append keeps its sequence across retries, so a retry after a lost answer is not written twice). The task's
commit message names its producer id.

Driver side (`commit_transaction`): commit_transaction(txn, the producer ids of the tasks that succeeded) is
the commit point; then the markers (`end_transaction`): a commit marker for each committed writer on each
partition it joined with, an abort marker (its epoch + 1, fencing it) for every other writer of the batch: a
failed or killed task attempt, a zombie. A failed batch `df.write` (never replayed) is decided with no writers
(leader_transactions.abort_transaction), so a killed task still running is refused when it joins late and
cannot leave a transaction open; a failed micro-batch only gets its markers, since Spark replays it under
the same id and its new writers join it then. read_committed readers (the default) never read past a partition's
oldest open transaction and skip aborted ones, so a batch shows in a partition once its marker is there.
A batch undecided 15 minutes (option transaction.timeout.ms) after its first task joined (a driver killed and
not restarted) has its writers aborted by the coordinator, so readers move on; its replay still commits it anew.
A crash anywhere is repaired by Spark's replay of the batch with the same id: its tasks find the batch
committed and write nothing, or write anew as new writers; its commit then commits them (or finds it
committed) and writes every marker of the record again, which is harmless.
"""
from __future__ import annotations

import shutil
import tempfile
from typing import Iterator, Sequence

import pyarrow as pa

from fabric.client.cluster import Cluster
from fabric.client.leader_transactions import TIMEOUT_S, append_batches, end_transaction
from fabric.client.retry import retrying
from fabric.client.staged import staged_rows
from fabric.common.types import ProducerIdentity, TransactionRecord
from fabric.sinks.staging import StagedBatch, StagedFile, Stager

# a batch's transaction.timeout.ms unless the sink option sets one: the coordinator's default
# transaction.max.timeout.ms, as a micro-batch may run long; a batch still uncommitted this long after its first
# task joined has its writers aborted, and fails
TRANSACTION_TIMEOUT_MS = 900_000


def write_transaction(cluster: Cluster, txn: str, topic: str | None, codec: str,
                      batches: Iterator[pa.RecordBatch], timeout_ms: int = TRANSACTION_TIMEOUT_MS
                      ) -> tuple[int, int] | None:
    """Stage, join and append one task's rows as a writer of `txn`; the writer's (producer id, records), or None
    if the task had no rows."""
    directory = tempfile.mkdtemp(prefix="fabric-sink-")
    try:
        stager = Stager(cluster, directory, topic, codec)
        for batch in batches:
            stager.add(batch)
        files = stager.finish()
        if not files:
            return None
        identity = retrying(cluster, cluster.init_producer_id, "take a producer id", TIMEOUT_S)
        partitions = sorted({(f.topic, f.partition) for f in files})
        retrying(cluster, lambda: cluster.coordinator.add_transaction_writer(  # joining twice is joining once
            txn, identity.producer_id, identity.producer_epoch, partitions, timeout_ms),
            f"join transaction {txn}", TIMEOUT_S)
        for staged in files:
            _append_file(cluster, txn, staged, identity, codec)
        return identity.producer_id, sum(f.records for f in files)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _append_file(cluster: Cluster, txn: str, staged: StagedFile, identity: ProducerIdentity, codec: str) -> None:
    """Append a staged file's frames to its partition's leader, in order, as `identity`'s transaction `txn`."""
    schema = cluster.coordinator.topic(staged.topic).stored_schema
    append_batches(cluster, txn, staged.topic, staged.partition, staged_rows(staged.path, schema), identity, codec)


def commit_transaction(cluster: Cluster, txn: str, messages: Sequence[StagedBatch]) -> TransactionRecord:
    """The commit point of `txn` with the writers of the tasks' messages, then every marker it decided."""
    writers = sorted({m.writer for m in messages if m.writer is not None})
    retrying(cluster, lambda: cluster.coordinator.commit_transaction(txn, writers), f"commit transaction {txn}",
             TIMEOUT_S)
    return end_transaction(cluster, txn)
