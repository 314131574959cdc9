"""Which of the coordinator service's protocol requests are answered on its event loop (fabric.server.
protocol_routes): over a store of local files, commits, metadata reads and produces to topics that ask for no
fsync; a produce that may fsync, a transaction's, one whose topic cannot be read or whose producer id's owner is not
known yet goes to a worker thread."""
from __future__ import annotations

from fabric.coordinator.producer_ids import ProducerIds
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.server.producer_owners import ProducerOwners
from fabric.server.protocol_routes import produce_waits


def test_a_sqlite_store_with_its_own_offsets_topic_serves_locally(tmp_path) -> None:
    assert SqliteCoordinator(str(tmp_path / "metadata.db")).serves_locally()


def test_only_a_produce_that_may_fsync_or_belongs_to_a_transaction_waits(tmp_path) -> None:
    store = SqliteCoordinator(str(tmp_path / "metadata.db"))
    store.create_topic("plain", 1, {}, None)
    store.create_topic("counted", 1, {"flush.messages": "1"}, None)
    store.create_topic("timed", 1, {"flush.ms": "1000"}, None)
    assert not produce_waits(store, None, {"topic": "plain", "partition": 0})
    assert produce_waits(store, None, {"topic": "plain", "partition": 0, "transactional": True})
    assert produce_waits(store, None, {"topic": "counted", "partition": 0})
    assert produce_waits(store, None, {"topic": "timed", "partition": 0})
    assert produce_waits(store, None, {"topic": "missing", "partition": 0})  # refused on a worker, as always
    assert produce_waits(store, None, {"topic": ["plain"], "partition": 0})


def test_a_produce_whose_producer_ids_owner_is_not_known_yet_waits(tmp_path) -> None:
    """Its owner is asked of the store once, on a worker; later produces of that id are appended on the loop."""
    store = SqliteCoordinator(str(tmp_path / "metadata.db"))
    store.create_topic("plain", 1, {}, None)
    ids = ProducerIds(store)
    producer_id = ids.next("alice").producer_id
    owners = ProducerOwners(ids.owner)
    args = {"topic": "plain", "partition": 0, "producer_id": producer_id}
    assert produce_waits(store, owners, args) and produce_waits(store, owners, {**args, "producer_id": "x"}) is False
    owners.check("alice", producer_id, lambda: False)
    assert not produce_waits(store, owners, args)
