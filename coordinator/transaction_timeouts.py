"""Transaction timeouts (Kafka's transaction.timeout.ms): a writer joins a transaction asking for a timeout, at
most the coordinator's transaction.max.timeout.ms; an open transaction still undecided once it has passed since
its first writer joined has its writers aborted by the coordinator (coordinator.transactions `expire`), whose
reaper (fabric.server.transaction_reaper) then writes their abort markers. So a writer that died mid-transaction
holds read_committed readers of its partitions back for at most its timeout, not until its work is run again.
"""
from __future__ import annotations

from typing import Callable, Sequence

from fabric.common.checks import is_integer
from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import InvalidConfigError
from fabric.common.redaction import clip
from fabric.common.types import TopicPartition, TransactionRecord, TransactionWriter
from fabric.coordinator import transactions, validation

DEFAULT_TIMEOUT_MS = 60_000  # a producer's transaction.timeout.ms, as Kafka's
MAX_TIMEOUT_MS = 900_000  # the coordinator's transaction.max.timeout.ms, as Kafka's


class TransactionTimeouts:
    """add_transaction_writer of the Coordinator interface with a timeout, and the expiry of timed-out
    transactions, for a store that changes a transactional id's record by an atomic read-modify-write
    (`_change_transaction`) and lists every record (`_transaction_records`)."""

    max_transaction_timeout_ms = MAX_TIMEOUT_MS  # the coordinator service sets its transaction.max.timeout.ms
    writers_aborted: Callable[[], None] = staticmethod(lambda: None)  # the service's: its reaper writes markers now

    def _change_transaction(self, transactional_id: str,
                            change: Callable[[TransactionRecord], TransactionRecord | None]
                            ) -> TransactionRecord | None:
        """Store change(record) atomically, re-reading on a conflict; what was stored (None: nothing changed)."""
        raise NotImplementedError

    def _transaction_records(self) -> list[TransactionRecord]:
        """Every transactional id's record."""
        raise NotImplementedError

    def add_transaction_writer(self, txn: str, producer_id: int, producer_epoch: int,
                               partitions: Sequence[TopicPartition], timeout_ms: int = DEFAULT_TIMEOUT_MS
                               ) -> TransactionRecord:
        transactional_id, sequence = validation.transaction(txn)
        new = transactions.writer(producer_id, producer_epoch, partitions)
        if not is_integer(timeout_ms) or not 1 <= timeout_ms <= self.max_transaction_timeout_ms:
            raise InvalidConfigError(
                f"transaction.timeout.ms must be an int from 1 to {self.max_transaction_timeout_ms} (the "
                f"coordinator's transaction.max.timeout.ms), got {clip(timeout_ms)}: lower it, or raise the "
                "coordinator's --transaction-max-timeout-ms")
        now = SYSTEM_CLOCK.now_ms()
        record = self._change_transaction(
            transactional_id, lambda record: transactions.add_writer(record, sequence, new, now, int(timeout_ms)))
        assert record is not None
        return record

    def expire_transactions(self, now_ms: int) -> list[TransactionRecord]:
        """Abort the writers of every open transaction past its timeout at `now_ms`; then every record whose
        aborted writers' markers are still to be written (these and earlier ones)."""
        out = []
        for record in self._transaction_records():
            if transactions.expire(record, now_ms) is not None:
                record = self._change_transaction(record.transactional_id,
                                                  lambda r: transactions.expire(r, now_ms)) or record
            if record.aborted:
                out.append(record)
        return out

    def decided_owing_markers(self, now_ms: int) -> list[TransactionRecord]:
        """Every record whose decided transaction's markers the coordinator writes itself at `now_ms`
        (transactions.owes_markers: its writer died between the commit point and its markers)."""
        return [record for record in self._transaction_records() if transactions.owes_markers(record, now_ms)]

    def transaction_decided_markers_written(self, transactional_id: str, sequence: int) -> None:
        """The markers of `transactional_id`'s decided transaction `sequence` are on every partition."""
        self._change_transaction(transactional_id,
                                 lambda record: transactions.decided_markers_written(record, sequence))

    def list_transactions(self) -> list[str]:
        return sorted(r.transactional_id for r in self._transaction_records())

    def abort_transaction_writers(self, transactional_id: str) -> TransactionRecord:
        transactional_id = validation.transactional_id(transactional_id)
        changed = self._change_transaction(transactional_id, transactions.abort_writers)
        if changed is None:
            return self.transaction_record(transactional_id)
        self.writers_aborted()
        return changed

    def transaction_record(self, transactional_id: str) -> TransactionRecord:
        raise NotImplementedError

    def transaction_markers_written(self, transactional_id: str, written: Sequence[TransactionWriter]) -> None:
        """Forget the aborted writers `written`: their abort markers are on every partition they registered."""
        self._change_transaction(transactional_id, lambda record: transactions.markers_written(record, written))
