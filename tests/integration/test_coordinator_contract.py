"""The Coordinator contract: checks any Coordinator implementation must pass, each run on a fresh, empty
coordinator of every kind: the SQLite store, the ZooKeeper store (a real server) and a coordinator service
process (fabric://, the remote coordinator its clients use). A service checks committed offsets against its
logs, so each check gets `fill(topic, partition, count)`, which makes a partition hold `count` records where
the coordinator has logs (a no-op for a bare store)."""
from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pytest

import fabric
from fabric.common.errors import (
    IllegalGenerationError,
    InvalidPartitionsError,
    TopicExistsError,
    UnknownMemberError,
    UnknownTopicError,
)
from fabric.common.records import to_storage
from fabric.common.types import JoinRequest
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.coordinator.zk_store import ZkCoordinator

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("at", pa.timestamp("us", tz="UTC"))])


Fill = Callable[[str, int, int], None]


def check_topics(c: Coordinator, fill: Fill) -> None:
    """Create, read, list, alter, grow and delete topics; errors for unknown and duplicate topics."""
    info = c.create_topic("orders", 3, {"retention.ms": "1000"}, SCHEMA)
    assert (info.name, info.partitions, info.config) == ("orders", 3, {"retention.ms": "1000"})
    c.create_topic("a.plain-topic_1", 1, {}, None)
    with pytest.raises(TopicExistsError, match="orders"):
        c.create_topic("orders", 1, {}, None)
    assert c.list_topics() == ["a.plain-topic_1", "orders"]
    read = c.topic("orders")
    assert read.value_schema is not None and read.value_schema.equals(SCHEMA)
    assert c.topic("a.plain-topic_1").value_schema is None

    altered = c.alter_topic_config("orders", {"cleanup.policy": "delete", "retention.ms": None})
    assert altered.config == {"cleanup.policy": "delete"} == c.topic("orders").config
    assert c.set_partitions("orders", 5).partitions == 5 == c.topic("orders").partitions
    with pytest.raises(InvalidPartitionsError, match="never removed"):
        c.set_partitions("orders", 2)
    assert c.topic("orders").value_schema.equals(SCHEMA)

    c.delete_topic("orders")
    assert c.list_topics() == ["a.plain-topic_1"]
    for call in (lambda: c.topic("orders"), lambda: c.delete_topic("orders"),
                 lambda: c.alter_topic_config("orders", {"a": "b"}), lambda: c.set_partitions("orders", 9)):
        with pytest.raises(UnknownTopicError, match="orders"):
            call()
    assert c.create_topic("orders", 1, {}, None).partitions == 1  # the name is free again


def check_offsets(c: Coordinator, fill: Fill) -> None:
    """Commit several offsets at once, read them back (optionally by topic), list and delete groups."""
    c.create_topic("t1", 2, {}, None)
    c.create_topic("t2", 1, {}, None)
    for topic, partition, count in (("t1", 0, 11), ("t1", 1, 20), ("t2", 0, 5)):
        fill(topic, partition, count)
    c.commit_offsets("g/with:odd chars", {("t1", 0): 10, ("t1", 1): 20, ("t2", 0): 5}, metadata="m")
    got = c.committed("g/with:odd chars")
    assert {tp: o.offset for tp, o in got.items()} == {("t1", 0): 10, ("t1", 1): 20, ("t2", 0): 5}
    assert got[("t1", 0)].metadata == "m" and got[("t1", 0)].commit_ms > 0
    assert set(c.committed("g/with:odd chars", ["t2"])) == {("t2", 0)}
    c.commit_offsets("g/with:odd chars", {("t1", 0): 11})
    assert c.committed("g/with:odd chars")[("t1", 0)].offset == 11
    c.commit_offsets(".", {("t2", 0): 1})
    assert c.committed("unknown-group") == {}
    assert c.list_groups() == [".", "g/with:odd chars"]

    c.delete_topic("t2")  # its committed offsets go with it
    assert set(c.committed("g/with:odd chars")) == {("t1", 0), ("t1", 1)}
    assert c.list_groups() == ["g/with:odd chars"]
    c.delete_group("g/with:odd chars")
    assert c.committed("g/with:odd chars") == {} and c.list_groups() == []


def check_transactions(c: Coordinator, fill: Fill) -> None:
    """A transaction id is recorded once; committing it again is a no-op. A `<transactional id>:<sequence>`
    counts as committed once its id committed this or a higher sequence (a sink's batches, in order)."""
    assert not c.transaction_committed("query-1/batch-7")
    c.commit_transaction("query-1/batch-7")
    c.commit_transaction("query-1/batch-7")
    assert c.transaction_committed("query-1/batch-7")
    assert not c.transaction_committed("query-1/batch-8")
    assert not c.transaction_committed("query-2:0")
    c.commit_transaction("query-2:4")
    c.commit_transaction("query-2:3")  # an older sequence never lowers the record
    assert [c.transaction_committed(f"query-2:{b}") for b in (0, 4, 5)] == [True, True, False]
    assert not c.transaction_committed("query-3:0")  # another transactional id
    assert c.transaction_committed("query-2")  # an id without a sequence is sequence 0 of itself
    c.commit_transaction("query-2:5")
    assert c.transaction_committed("query-2:5") and not c.transaction_committed("query-2:6")


def check_groups(c: Coordinator, fill: Fill) -> None:
    """One member joins, syncs all partitions; stale-generation and non-member commits are rejected."""
    c.create_topic("events", 2, {}, None)
    fill("events", 0, 3)
    joined = c.join_group(JoinRequest("workers", "", ("events",)))
    assert joined.ready and joined.generation == 1 and joined.leader == joined.member_id
    assert sorted(c.sync_group("workers", joined.member_id, 1).assignment) == [("events", 0), ("events", 1)]
    c.heartbeat("workers", joined.member_id, 1)
    described = c.describe_group("workers")
    assert (described.state, described.generation, len(described.members)) == ("Stable", 1, 1)
    c.commit_offsets("workers", {("events", 0): 3}, generation=1, member_id=joined.member_id)
    with pytest.raises(IllegalGenerationError):
        c.commit_offsets("workers", {("events", 0): 4}, generation=0, member_id=joined.member_id)
    with pytest.raises(UnknownMemberError):
        c.commit_offsets("workers", {("events", 0): 4})
    assert c.committed("workers")[("events", 0)].offset == 3
    c.leave_group("workers", joined.member_id)
    assert c.describe_group("workers").state == "Empty"
    assert c.describe_group("never-seen").state == "Dead"


CONTRACT = [check_topics, check_offsets, check_transactions, check_groups]


def no_logs(topic: str, partition: int, count: int) -> None:
    """A bare store has no logs to fill."""


@pytest.fixture(params=["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper), "service"])
def coordinator(request, tmp_path):
    """(a fresh, empty Coordinator, its fill): the SQLite store, the ZooKeeper store or a service's remote
    coordinator."""
    if request.param == "sqlite":
        store = SqliteCoordinator(str(tmp_path / "m.db"))
    elif request.param == "zookeeper":
        store = ZkCoordinator(request.getfixturevalue("zk_url"))
    else:
        with fabric.connect(request.getfixturevalue("coordinators")().url()) as fab:
            def fill(topic: str, partition: int, count: int) -> None:
                rows = to_storage(pa.table({"value": [b"x"] * count}), None, 1_000_000).to_batches()[0]
                fab.cluster.append(topic, partition, rows)
            yield fab.cluster.coordinator, fill
        return
    try:
        yield store, no_logs
    finally:
        store.close()


@pytest.mark.parametrize("check", CONTRACT, ids=lambda f: f.__name__)
def test_coordinator_contract(coordinator, check) -> None:
    check(*coordinator)
