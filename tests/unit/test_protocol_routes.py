"""Which of the coordinator service's protocol requests are answered on its event loop (fabric.server.
protocol_routes): over a store of local files, commits, metadata reads and produces to topics that ask for no
fsync; a produce that may fsync, a transaction's, or one whose topic cannot be read goes to a worker thread."""
from __future__ import annotations

from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.server.protocol_routes import produce_waits


def test_a_sqlite_store_with_its_own_offsets_topic_serves_locally(tmp_path) -> None:
    assert SqliteCoordinator(str(tmp_path / "metadata.db")).serves_locally()


def test_only_a_produce_that_may_fsync_or_belongs_to_a_transaction_waits(tmp_path) -> None:
    store = SqliteCoordinator(str(tmp_path / "metadata.db"))
    store.create_topic("plain", 1, {}, None)
    store.create_topic("counted", 1, {"flush.messages": "1"}, None)
    store.create_topic("timed", 1, {"flush.ms": "1000"}, None)
    assert not produce_waits(store, {"topic": "plain", "partition": 0})
    assert produce_waits(store, {"topic": "plain", "partition": 0, "transactional": True})
    assert produce_waits(store, {"topic": "counted", "partition": 0})
    assert produce_waits(store, {"topic": "timed", "partition": 0})
    assert produce_waits(store, {"topic": "missing", "partition": 0})  # refused on a worker, as always
    assert produce_waits(store, {"topic": ["plain"], "partition": 0})
