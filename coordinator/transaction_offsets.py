"""A producer transaction's group offsets on a cluster with data nodes (Kafka's TxnOffsetCommit, adapted to our
commit point): the coordinator's record of the transactional id decides them with the transaction.

commit_transaction(txn, writers, offsets) checks the member's generation, then commits the record with the
offsets in it (pending: coordinator.transactions), then appends them to the offsets topic and clears them from
the record, both under the offsets partition's write lock (OffsetsTopic.apply_transaction), and answers only
then. So the offsets are decided atomically with the transaction, and:
- a commit that finds its sequence committed already (a twin, or a retry after a lost answer) applies only what
  the record still holds pending (the winner's offsets), never its own;
- an instance that crashed between the commit point and the append leaves them in the record: the instance that
  takes the leadership of the offsets topic applies every pending record's offsets before it serves any offsets
  (OffsetsTopic.take_leadership calls `roll_forward_offsets`), so no newer commit of the group can come first
  and be overwritten by them;
- a record still holding pending offsets commits no later transaction of its id before they are applied, so a
  group's transactional offsets are applied in commit order;
- from the generation check to the append, reads of the group's committed offsets wait (coordinator.
  unstable_offsets): a member that joined meanwhile never resumes from the offsets being replaced.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import ContextManager, Sequence

from fabric.common.errors import InvalidConfigError
from fabric.common.types import TransactionalOffsets, TransactionRecord
from fabric.coordinator import transactions, validation
from fabric.coordinator.offsets_records import OFFSETS_TOPIC, offsets_partition
from fabric.coordinator.offsets_topic import ApplyTransaction, TopicOffsets
from fabric.coordinator.transaction_timeouts import TransactionTimeouts

log = logging.getLogger(__name__)
DEBUG_PAUSE_ENV = "FABRIC_DEBUG_TXN_OFFSETS_PAUSE_S"  # crash tests: seconds between the commit point and the apply


class TransactionOffsets(TransactionTimeouts, TopicOffsets):
    """commit_transaction of the Coordinator interface, offsets included, for a store that changes a
    transactional id's record by an atomic read-modify-write and lists the records (TransactionTimeouts)."""

    def commit_transaction(self, txn: str, writers: Sequence[int] | None = None,
                           offsets: TransactionalOffsets | None = None) -> None:
        transactional_id, sequence = validation.transaction(txn)
        if offsets is not None:
            validation.transactional_offsets(offsets)
            if self._offsets.log.shared:
                raise InvalidConfigError(
                    f"this coordinator keeps {OFFSETS_TOPIC} in its own directory, which a transaction on the data "
                    "nodes cannot commit offsets to: start the coordinator with offsets.topic.replication.factor (or "
                    "default.replication.factor) set, so the group offsets live on the nodes, or commit the "
                    "consumer's offsets after commit_transaction()")
            with self._offsets.unstable.committing(offsets.group), self._as_owner_of(offsets.group):
                self._groups.validate_commit(offsets.group, offsets.member_id, offsets.generation, transactional=True)
                self._commit(transactional_id, sequence, writers, offsets)  # (reads of the offsets wait meanwhile)
            return
        self._commit(transactional_id, sequence, writers, offsets)

    def _commit(self, transactional_id: str, sequence: int, writers: Sequence[int] | None,
                offsets: TransactionalOffsets | None) -> None:
        """The commit point of the transaction, then its offsets applied (an earlier transaction's first)."""
        apply = self._offsets.apply_transaction
        self._settle(self.transaction_record(transactional_id), apply)  # an earlier transaction's, first
        changed = self._change_transaction(
            transactional_id, lambda record: transactions.commit(record, sequence, writers, offsets))
        if changed is None:  # committed already: only what its record still holds is applied
            record = self.transaction_record(transactional_id)
            if record.committed_sequence == sequence:
                self._settle(record, apply)
            return
        if changed.offsets is not None:
            _debug_pause()
        self._settle(changed, apply)

    def roll_forward_offsets(self, apply: ApplyTransaction, partitions: Sequence[int]) -> None:
        """Apply the pending offsets of every committed transaction of a group in the offsets topic's
        `partitions` (an instance that committed them died before it could), with `apply`: the offsets topic's,
        before it serves them."""
        count = self._offsets.partitions
        for record in self._transaction_records():
            offsets = record.offsets
            if offsets is None or offsets_partition(offsets.group, count) not in partitions:
                continue
            log.warning("transaction %s:%d committed group %s's offsets that were not applied yet: applying them",
                        record.transactional_id, record.committed_sequence, offsets.group)
            with self._as_owner_of(offsets.group):
                self._settle(record, apply)

    def _as_owner_of(self, group: str) -> ContextManager[None]:
        """The store's writes of transactional ids' records inside the block are fenced as made by the instance
        serving `group`'s offsets, where a store gives each offsets partition an instance of its own (ZooKeeper's);
        else as any other write."""
        return contextlib.nullcontext()

    def _settle(self, record: TransactionRecord, apply: ApplyTransaction) -> None:
        """Append `record`'s pending offsets to the offsets topic, then clear them from the record, both under
        the group's offsets partition lock; nothing if it holds none, or if another applier cleared them first."""
        pending, sequence = record.offsets, record.committed_sequence
        if pending is None:
            return
        transactional_id = record.transactional_id

        def still_pending() -> bool:
            return transactions.applied(self.transaction_record(transactional_id), sequence) is not None

        def clear() -> None:
            self._change_transaction(transactional_id, lambda current: transactions.applied(current, sequence))
        apply(pending, still_pending, clear)


def _debug_pause() -> None:
    """Sleep $FABRIC_DEBUG_TXN_OFFSETS_PAUSE_S seconds after a transaction's commit point, before its offsets
    are applied: a crash test kills the instance there."""
    pause = float(os.environ.get(DEBUG_PAUSE_ENV) or 0)
    if pause > 0:
        time.sleep(pause)
