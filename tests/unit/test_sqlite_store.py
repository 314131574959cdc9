"""The SQLite coordinator store's own behaviour beyond the Coordinator contract (which
tests/integration/test_coordinator_contract.py runs against every store): transactions recorded by 0.1.0."""
from __future__ import annotations

import sqlite3

from fabric.coordinator.sqlite_store import SqliteCoordinator


def test_sqlite_store_folds_0_1_0_transactions_into_one_row_per_id(tmp_path):
    path = str(tmp_path / "m.db")
    with sqlite3.connect(path) as db:  # a 0.1.0 database: a row per transaction
        db.execute("CREATE TABLE transactions (txn TEXT PRIMARY KEY, commit_ms INTEGER NOT NULL)")
        db.executemany("INSERT INTO transactions VALUES (?, 1)", [("query-a:0",), ("query-a:7",), ("job-x",)])
    store = SqliteCoordinator(path)
    try:
        assert [store.transaction_committed(t) for t in ("query-a:7", "query-a:8", "job-x")] == [True, False, True]
        store.commit_transaction("query-a:8")
        rows = store._db().execute("SELECT id, sequence FROM transactional_ids ORDER BY id").fetchall()
        assert rows == [("job-x", 0), ("query-a", 8)]
        assert store._db().execute("SELECT name FROM sqlite_master WHERE name='transactions'").fetchone() is None
    finally:
        store.close()
