"""Transaction timeouts in the coordinator's record (coordinator.transactions, coordinator.transaction_timeouts),
on a real SQLite store: an open transaction past its timeout has its writers aborted and stays undecided, so new
writers may still commit it; the aborted writers can neither join nor be committed while their markers are being
written. (The markers written by the active instance on real nodes: tests/integration/test_transactions.py.)"""
from __future__ import annotations

import pytest

from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import InvalidConfigError, InvalidTxnStateError
from fabric.common.types import TransactionRecord, TransactionWriter
from fabric.coordinator import transactions
from fabric.coordinator.sqlite_store import SqliteCoordinator

TP = ("t", 0)


def writer(producer_id: int) -> TransactionWriter:
    return TransactionWriter(producer_id, 0, (TP,))


def open_record(timeout_ms: int = 1000) -> TransactionRecord:
    record = transactions.add_writer(TransactionRecord("sink"), 3, writer(1), 10_000, timeout_ms)
    return transactions.add_writer(record, 3, writer(2), 10_500, timeout_ms // 2)


def test_a_transaction_times_out_from_its_first_join_with_the_largest_timeout_asked() -> None:
    record = open_record()
    assert (record.started_ms, record.timeout_ms, record.open) == (10_000, 1000, True)
    assert transactions.expire(record, 10_999) is None
    expired = transactions.expire(record, 11_000)
    assert expired is not None and not expired.open
    assert expired.writers == () and expired.aborted == (writer(1), writer(2))
    assert (expired.sequence, expired.committed_sequence) == (3, -1)  # undecided: a replay may commit it
    # every aborted writer gets an abort marker with its epoch + 1, which fences it
    assert expired.markers() == {TP: ([], [(1, 1), (2, 1)])}
    assert transactions.expire(expired, 99_000) is None  # nothing open any more


def test_aborted_writers_can_neither_join_nor_be_committed_but_new_writers_commit_the_same_sequence() -> None:
    expired = transactions.expire(open_record(), 20_000)
    assert expired is not None
    with pytest.raises(InvalidTxnStateError, match="aborted by the coordinator"):
        transactions.add_writer(expired, 3, writer(1), 20_001, 1000)
    replay = transactions.add_writer(expired, 3, writer(7), 20_001, 1000)
    assert replay.started_ms == 20_001 and replay.aborted == expired.aborted  # a fresh timeout for the replay
    with pytest.raises(InvalidTxnStateError, match="transaction.timeout.ms"):
        transactions.commit(replay, 3, [1, 7])
    committed = transactions.commit(replay, 3, [7])
    assert committed is not None and committed.committed_writers == (7,)
    # the replay's commit marker, and the aborted writers' abort markers until they are written
    assert committed.markers() == {TP: ([(7, 0)], [(1, 1), (2, 1)])}
    done = transactions.markers_written(committed, [writer(1)])
    assert done is not None and done.aborted == (writer(2),)
    assert transactions.markers_written(done, [writer(1)]) is None  # nothing to forget twice


def test_a_newer_transaction_aborts_the_writers_of_an_undecided_one_and_forgets_those_of_a_committed_one() -> None:
    """Transaction 3 can never commit once 4 began: its writers' abort markers are still owed, or their open
    transactions would pin the last stable offset of their partitions with nobody left to end them."""
    newer = transactions.add_writer(open_record(), 4, writer(5), 30_000, 1000)
    assert newer.writers == (writer(5),) and newer.aborted == (writer(1), writer(2))
    assert {(1, 1), (2, 1)} <= set(newer.markers()[TP][1])  # abort markers the reaper writes and nodes accept
    committed = transactions.commit(open_record(), 3, [1, 2])
    assert committed is not None
    after = transactions.add_writer(committed, 4, writer(5), 30_000, 1000)
    assert after.writers == (writer(5),) and after.aborted == ()


def test_the_record_keeps_its_timeout_and_aborted_writers_in_its_json() -> None:
    record = open_record()
    assert transactions.from_json("sink", -1, transactions.to_json(record)) == record
    expired = transactions.expire(record, 20_000)
    assert expired is not None
    assert transactions.from_json("sink", -1, transactions.to_json(expired)) == expired


def test_a_record_written_before_timeouts_never_expires() -> None:
    old = transactions.from_json("sink", -1, '{"sequence":3,"committed":null,"writers":[[1,0,[["t",0]]]]}')
    assert old.open and old.started_ms == -1
    assert transactions.expire(old, 10**15) is None


def test_the_store_expires_open_transactions_and_forgets_writers_whose_markers_are_written(tmp_path) -> None:
    store = SqliteCoordinator(str(tmp_path / "m.db"))
    try:
        store.add_transaction_writer("quick:0", 1, 0, [TP], timeout_ms=1)
        store.add_transaction_writer("slow:0", 2, 0, [TP], timeout_ms=600_000)
        now = SYSTEM_CLOCK.now_ms() + 5
        [aborted] = store.expire_transactions(now)
        assert aborted.transactional_id == "quick" and aborted.aborted == (writer(1),)
        assert store.transaction_record("slow").open
        assert store.expire_transactions(now) == [aborted]  # still listed until its markers are written
        store.transaction_markers_written("quick", aborted.aborted)
        assert store.expire_transactions(now) == []
        assert store.transaction_record("quick").aborted == ()
    finally:
        store.close()


def test_a_decided_transaction_owes_its_markers_past_its_timeout_until_they_are_written(tmp_path) -> None:
    """Its writer may die between the commit point and its markers: past the timeout the coordinator writes them
    (the reaper), and the record keeps what it needs for that across a restart (its JSON)."""
    committed = transactions.commit(open_record(), 3, [1])
    assert committed is not None and not committed.open
    assert not transactions.owes_markers(committed, 10_999)
    assert transactions.owes_markers(committed, 11_000)
    assert transactions.from_json("sink", 3, transactions.to_json(committed)) == committed
    assert committed.markers() == {TP: ([(1, 0)], [(2, 1)])}  # what the coordinator writes
    done = transactions.decided_markers_written(committed, 3)
    assert done is not None and not transactions.owes_markers(done, 10**15)
    assert done.markers() == committed.markers()  # a late writer's own markers are still accepted
    assert transactions.decided_markers_written(done, 3) is None
    assert not transactions.owes_markers(transactions.expire(open_record(), 20_000), 10**15)  # undecided
    newer = transactions.add_writer(committed, 4, writer(5), 30_000, 1000)
    assert transactions.decided_markers_written(newer, 3) is None  # moved on: nothing to record
    store = SqliteCoordinator(str(tmp_path / "m.db"))
    try:
        store.add_transaction_writer("died:0", 1, 0, [TP], timeout_ms=1)
        store.commit_transaction("died:0", [1])
        now = SYSTEM_CLOCK.now_ms() + 5
        assert store.expire_transactions(now) == []  # decided: nothing to abort
        [owed] = store.decided_owing_markers(now)
        assert owed.transactional_id == "died" and owed.committed_writers == (1,)
        store.transaction_decided_markers_written("died", 0)
        assert store.decided_owing_markers(now) == []
    finally:
        store.close()


@pytest.mark.parametrize("timeout_ms", [0, -5, 900_001, "60000", 1.5, True])
def test_a_timeout_outside_one_to_the_coordinators_maximum_is_refused_with_the_fix(tmp_path, timeout_ms) -> None:
    store = SqliteCoordinator(str(tmp_path / "m.db"))
    try:
        with pytest.raises(InvalidConfigError, match="transaction.max.timeout.ms"):
            store.add_transaction_writer("sink:0", 1, 0, [TP], timeout_ms=timeout_ms)
        assert not store.transaction_record("sink").open  # nothing joined
    finally:
        store.close()


def test_the_state_is_kafkas_name_for_where_the_latest_transaction_is() -> None:
    assert TransactionRecord("sink").state == "Empty"
    record = open_record()
    assert record.state == "Ongoing"
    aborting = transactions.abort_writers(record)  # an operator's abort, whatever the timeout
    assert aborting is not None and aborting.state == "PrepareAbort"
    done = transactions.markers_written(aborting, aborting.aborted)
    assert done is not None and done.state == "CompleteAbort"  # undecided, waiting for a replay
    assert transactions.abort_writers(done) is None  # nothing open to abort
    replay = transactions.add_writer(done, 3, writer(9), 30_000, 1000)
    committed = transactions.commit(replay, 3, [9])
    assert committed is not None and committed.state == "CompleteCommit"
    nobody = transactions.commit(transactions.add_writer(committed, 4, writer(10), 40_000, 1000), 4, [])
    assert nobody is not None and nobody.state == "CompleteAbort"
    published = transactions.commit(TransactionRecord("publish"), 0, None)  # the embedded publish path
    assert published is not None and published.state == "CompleteCommit"


def test_the_store_lists_every_transactional_id_and_aborts_an_open_transaction_on_demand(tmp_path) -> None:
    store = SqliteCoordinator(str(tmp_path / "m.db"))
    woken = []
    store.writers_aborted = lambda: woken.append(1)
    try:
        store.add_transaction_writer("b:0", 1, 0, [TP], timeout_ms=600_000)
        store.commit_transaction("a:0")
        assert store.list_transactions() == ["a", "b"]
        record = store.abort_transaction_writers("b")
        assert record.state == "PrepareAbort" and record.aborted == (writer(1),) and woken == [1]
        assert store.abort_transaction_writers("b") == record and woken == [1]  # nothing open: unchanged
        assert store.abort_transaction_writers("a").state == "CompleteCommit"
    finally:
        store.close()
