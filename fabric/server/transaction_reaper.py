"""The active coordinator instance's abort of timed-out transactions on the data nodes (Kafka's transaction
coordinator aborting transactions past transaction.timeout.ms; coordinator.transaction_timeouts).

Every transaction.abort.timed.out.transaction.cleanup.interval.ms, while this instance is the active one, it
expires the open transactions past their timeout in the store (their writers become the record's aborted
writers: from then on a commit or a join naming them is refused), then writes each aborted writer's abort
marker (its epoch + 1, which fences it) to every partition it registered, at the partition's leader, and
forgets the writers whose markers are all written. A marker that cannot be written now (no leader) is written
at a later pass: the writers stay in the record until then, whichever instance is active. A partition whose
topic was deleted needs none. It also writes the markers of a decided transaction whose writer died between the
commit point and its markers (coordinator.transactions, "Markers owed"), once its timeout has passed, so that
transaction does not hold read_committed readers back for good either.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import FabricError, UnknownPartitionError, UnknownTopicError
from fabric.common.types import TopicPartition, TransactionRecord, TransactionWriter
from fabric.coordinator.transaction_timeouts import TransactionTimeouts
from fabric.server.leader_calls import LeaderCalls
from fabric.server.periodic import Periodic

log = logging.getLogger(__name__)


class TransactionReaper:
    """Aborts `store`'s timed-out transactions every `interval_s` while `active()`, writing markers through
    `leaders`, in a daemon thread (stop() ends it)."""

    def __init__(self, store: TransactionTimeouts, leaders: LeaderCalls, interval_s: float,
                 active: Callable[[], bool]) -> None:
        self.store, self.leaders = store, leaders
        self._passes = Periodic("transaction-reaper", interval_s, active, self.run_once,
                                "aborting timed-out transactions")

    def start(self) -> None:
        self._passes.start()

    def wake(self) -> None:
        """Run a pass now (writers were aborted by an operator)."""
        self._passes.wake()

    def stop(self, timeout_s: float) -> None:
        self._passes.stop(timeout_s)

    def run_once(self) -> int:
        """One pass: expire, then write the markers of every aborted writer, then those of every decided
        transaction its writer left unmarked past its timeout; how many writers were forgotten."""
        done = 0
        now = SYSTEM_CLOCK.now_ms()
        for record in self.store.expire_transactions(now):
            written = [w for w in record.aborted if self._end(record, w)]
            if written:
                self.store.transaction_markers_written(record.transactional_id, written)
                log.warning("transactional id %s: aborted %d writer(s) past the transaction timeout (producer ids "
                            "%s)", record.transactional_id, len(written), [w.producer_id for w in written][:10])
                done += len(written)
        for record in self.store.decided_owing_markers(now):
            decided = replace(record, aborted=()).markers()  # (the aborted writers' markers: above)
            if all(self._write(record.transactional_id, tp, *decided[tp]) for tp in sorted(decided)):
                self.store.transaction_decided_markers_written(record.transactional_id, record.sequence)
                log.warning("transactional id %s: wrote the markers of decided transaction %d its writers left "
                            "unwritten past its timeout (producer ids %s)", record.transactional_id,
                            record.sequence, [w.producer_id for w in record.writers][:10])
        return done

    def _end(self, record: TransactionRecord, writer: TransactionWriter) -> bool:
        """Write `writer`'s abort marker to each partition it registered; True once all are written."""
        abort = [(writer.producer_id, writer.producer_epoch + 1)]
        return all(self._write(record.transactional_id, tp, [], abort) for tp in writer.partitions)

    def _write(self, transactional_id: str, tp: TopicPartition, commit: list[tuple[int, int]],
               abort: list[tuple[int, int]]) -> bool:
        """Write these markers to partition `tp`'s leader; True once written (or the topic is gone)."""
        try:
            self.leaders.call(tp[0], tp[1], "write_markers", {
                "topic": tp[0], "partition": tp[1], "transactional_id": transactional_id,
                "commit": [list(m) for m in commit], "abort": [list(m) for m in abort],
                "timeout_ms": int(self.leaders.timeout_s * 1000)})
        except (UnknownPartitionError, UnknownTopicError):
            return True  # the topic was deleted: nothing left to end there
        except FabricError as exc:
            log.warning("transactional id %s: markers (commit %s, abort %s) on %s-%d are not written yet (%s); "
                        "retrying at the next pass", transactional_id, commit[:5], abort[:5], tp[0], tp[1], exc)
            return False
        return True
