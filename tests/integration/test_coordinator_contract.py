"""The Coordinator contract: checks any Coordinator implementation must pass, each run on a fresh, empty
coordinator of every kind: the SQLite store, the ZooKeeper store (a real server) and a coordinator service
process (fabric://, the remote coordinator its clients use). A service checks committed offsets against its
logs, so each check gets `fill(topic, partition, count)`, which makes a partition hold `count` records where
the coordinator has logs (a no-op for a bare store)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pyarrow as pa
import pytest

import fabric
from fabric.common.errors import (
    IllegalGenerationError,
    InvalidArgumentError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTxnStateError,
    StaleControllerEpochError,
    TopicExistsError,
    UnknownMemberError,
    UnknownTopicError,
)
from fabric.common.records import to_storage
from fabric.common.types import (
    JoinRequest,
    LeaderAndIsr,
    NodeInfo,
    PartitionAssignment,
    PartitionRegistration,
    TransactionRecord,
    TransactionWriter,
)
from fabric.coordinator.election import ControllerElection
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
    assert len(info.topic_id) == 32 and c.topic("orders").topic_id == info.topic_id  # kept by every change

    c.delete_topic("orders")
    assert c.list_topics() == ["a.plain-topic_1"]
    for call in (lambda: c.topic("orders"), lambda: c.delete_topic("orders"),
                 lambda: c.alter_topic_config("orders", {"a": "b"}), lambda: c.set_partitions("orders", 9)):
        with pytest.raises(UnknownTopicError, match="orders"):
            call()
    again = c.create_topic("orders", 1, {}, None)
    assert again.partitions == 1 and again.topic_id != info.topic_id  # the name is free again, for another topic


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
    assert c.delete_offsets("g/with:odd chars", [("t1", 1), ("t1", 2)]) == [("t1", 1)]  # KIP-496
    assert set(c.committed("g/with:odd chars")) == {("t1", 0)}
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


def check_transaction_writers(c: Coordinator, fill: Fill) -> None:
    """The writer registry of a transactional id (coordinator/transactions.py): writers join an ongoing
    transaction, the commit names those that count, later joins and unknown writers are refused, and a newer
    transaction replaces the record's writers."""
    assert c.transaction_record("sink") == TransactionRecord("sink")
    c.add_transaction_writer("sink:3", 11, 0, [("out", 1), ("out", 0)])
    c.add_transaction_writer("sink:3", 12, 0, [("out", 0)])
    c.add_transaction_writer("sink:3", 11, 0, [("out", 2)])  # a writer may name more partitions
    record = c.add_transaction_writer("sink:3", 13, 2, [("other", 0)])
    assert record.sequence == 3 and record.committed_writers is None
    assert [(w.producer_id, w.partitions) for w in record.writers] == [
        (12, (("out", 0),)), (11, (("out", 0), ("out", 1), ("out", 2))), (13, (("other", 0),))]
    with pytest.raises(InvalidTxnStateError, match="never joined"):
        c.commit_transaction("sink:3", [11, 99])
    c.commit_transaction("sink:3", [11, 13])
    c.commit_transaction("sink:3", [12])  # committed already: a replay changes nothing
    record = c.transaction_record("sink")
    assert (record.committed_sequence, record.committed_writers) == (3, (11, 13))
    assert record.markers()[("out", 0)] == ([(11, 0)], [(12, 1)])  # the other writer aborted, its epoch bumped
    assert c.transaction_committed("sink:3") and not c.transaction_committed("sink:4")
    with pytest.raises(InvalidTxnStateError, match="committed already"):
        c.add_transaction_writer("sink:3", 14, 0, [("out", 0)])
    c.add_transaction_writer("sink:5", 15, 0, [("out", 1)])
    with pytest.raises(InvalidTxnStateError, match="began after"):
        c.add_transaction_writer("sink:4", 16, 0, [("out", 1)])
    record = c.transaction_record("sink")
    assert (record.committed_sequence, record.sequence, [w.producer_id for w in record.writers]) == (3, 5, [15])
    for bad in ([("out", -1)], "out"):
        with pytest.raises((InvalidRequestError, InvalidArgumentError)):
            c.add_transaction_writer("sink:5", 17, 0, bad)
    record = c.add_transaction_writer("sink:5", 18, 0, [])  # a producer transaction committing only offsets
    assert record.writers[-1] == TransactionWriter(18, 0, ()) and record.markers() == {("out", 1): ([], [(15, 1)])}


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


CONTRACT = [check_topics, check_offsets, check_transactions, check_transaction_writers, check_groups]


def no_logs(topic: str, partition: int, count: int) -> None:
    """A bare store has no logs to fill."""


@pytest.fixture(params=["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper), "service",
                        pytest.param("service over ZooKeeper", marks=pytest.mark.zookeeper)])
def coordinator(request, tmp_path):
    """(a fresh, empty Coordinator, its fill): the SQLite store, the ZooKeeper store or a service's remote
    coordinator, over SQLite or over ZooKeeper (an instance, which keeps group states in memory: zk_store)."""
    if request.param == "sqlite":
        store = SqliteCoordinator(str(tmp_path / "m.db"))
    elif request.param == "zookeeper":
        store = ZkCoordinator(request.getfixturevalue("zk_url"), offsets_dir=str(tmp_path / "offsets"))
    else:
        zk = request.getfixturevalue("zk_url") if request.param == "service over ZooKeeper" else None
        with fabric.connect(request.getfixturevalue("coordinators")(store=zk).url()) as fab:
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


# -- the replicated cluster's metadata: the stores only (the service serves it in a later phase) --------------
NewController = Callable[[], int]


def registration(replicas: tuple[int, ...], controller_epoch: int, leader_epoch: int = 0,
                 partition_epoch: int = 0) -> PartitionRegistration:
    """A partition on `replicas`, led by the first, every replica in sync."""
    return PartitionRegistration(PartitionAssignment(replicas),
                                 LeaderAndIsr(replicas[0], leader_epoch, replicas, partition_epoch, controller_epoch))


def check_node_registrations(c: Coordinator, new_controller: NewController) -> None:
    """Each registration of a node id bumps its node epoch and records the data directory it came from;
    registrations are listed by id."""
    assert c.registered_nodes() == []
    assert c.register_node(2, "h2:9092", "rack-b", directory_id="d2") == NodeInfo(2, "h2:9092", "rack-b", 1,
                                                                                 directory_id="d2")
    assert c.register_node(1, "h1:9092", directory_id="d1") == NodeInfo(1, "h1:9092", None, 1, directory_id="d1")
    # a restart (the old process is fenced), from a replaced disk
    assert c.register_node(2, "h2:9093", "rack-b", directory_id="d2-new").node_epoch == 2
    assert c.registered_nodes() == [NodeInfo(1, "h1:9092", None, 1, directory_id="d1"),
                                    NodeInfo(2, "h2:9093", "rack-b", 2, directory_id="d2-new")]
    for bad in ((-1, "h:1", None, "d"), (3, "", None, "d"), (3, "h:1", "", "d"), (3, "h:1", None, ""),
                (3, "h:1", None, "a/b"), (3, "h:1", None, "x" * 65)):
        with pytest.raises(InvalidRequestError):
            c.register_node(*bad[:3], directory_id=bad[3])
    assert len(c.registered_nodes()) == 2


def check_replicated_topics(c: Coordinator, new_controller: NewController) -> None:
    """A replicated topic is created, grown and deleted with its assignment and states in one write; topics
    without replication keep working as before and have no replication metadata."""
    epoch = new_controller()
    assert c.controller_epoch() == epoch
    with pytest.raises(StaleControllerEpochError):
        c.create_replicated_topic("stale", {}, None, {0: registration((1,), epoch - 1)})
    with pytest.raises(InvalidPartitionsError, match="without a gap"):
        c.create_replicated_topic("gap", {}, None, {1: registration((1,), epoch)})
    assert c.list_topics() == []
    parts = {0: registration((1, 2, 3), epoch), 1: registration((2, 3, 1), epoch)}
    info = c.create_replicated_topic("r", {"min.insync.replicas": "2"}, None, parts)
    assert (info.partitions, info.config) == (2, {"min.insync.replicas": "2"}) == (c.topic("r").partitions,
                                                                                   c.topic("r").config)
    with pytest.raises(TopicExistsError):
        c.create_replicated_topic("r", {}, None, parts)
    c.create_topic("plain", 2, {}, None)
    assert c.partition_registrations() == {("r", p): reg for p, reg in parts.items()}
    assert c.partition_registrations(["plain"]) == {}
    c.alter_topic_config("r", {"retention.ms": "1000"})  # the assignment stays
    assert c.partition_registrations(["r"]) == {("r", p): reg for p, reg in parts.items()}

    with pytest.raises(InvalidPartitionsError, match="replicated"):
        c.set_partitions("r", 3)
    with pytest.raises(InvalidPartitionsError, match="without replication"):
        c.add_replicated_partitions("plain", {2: registration((1,), epoch)})
    with pytest.raises(InvalidPartitionsError, match="from 2 on"):
        c.add_replicated_partitions("r", {3: registration((1,), epoch)})
    assert c.add_replicated_partitions("r", {2: registration((3, 1, 2), epoch)}).partitions == 3
    assert c.partition_registrations(["r"])[("r", 2)] == registration((3, 1, 2), epoch)
    assert c.set_partitions("plain", 3).partitions == 3  # topics without replication grow as ever

    c.delete_topic("r")
    assert c.partition_registrations() == {} and c.list_topics() == ["plain"]


def check_partition_state_compare_and_set(c: Coordinator, new_controller: NewController) -> None:
    """A state change is stored only if the partition epoch is still the one read and the controller epoch the
    current one; a deposed controller's write is refused."""
    epoch = new_controller()
    c.create_replicated_topic("r", {}, None, {0: registration((1, 2, 3), epoch), 1: registration((2, 3), epoch)})
    shrunk = LeaderAndIsr(1, 0, (1, 2), 1, epoch)
    assert c.update_partition_states({("r", 0): (0, shrunk)})
    assert c.partition_registrations(["r"])[("r", 0)].state == shrunk
    # a lost race: the partition epoch read (0) is stale now; nothing of the write is stored
    both = {("r", 1): (0, LeaderAndIsr(3, 1, (3,), 1, epoch)), ("r", 0): (0, LeaderAndIsr(2, 1, (2,), 1, epoch))}
    assert not c.update_partition_states(both)
    assert c.partition_registrations(["r"]) == {("r", 0): PartitionRegistration(PartitionAssignment((1, 2, 3)), shrunk),
                                                ("r", 1): registration((2, 3), epoch)}
    for bad in (LeaderAndIsr(1, 0, (1, 4), 2, epoch),  # an ISR outside the replicas
                LeaderAndIsr(1, 0, (1, 2), 1, epoch)):  # the partition epoch does not grow
        with pytest.raises(InvalidRequestError):
            c.update_partition_states({("r", 0): (1, bad)})

    newer = new_controller()
    assert newer > epoch
    with pytest.raises(StaleControllerEpochError):  # decided by the deposed controller
        c.update_partition_states({("r", 0): (1, LeaderAndIsr(2, 1, (2,), 2, epoch))})
    elected = LeaderAndIsr(2, 1, (1, 2), 2, newer)
    assert c.update_partition_states({("r", 0): (1, elected)})
    with pytest.raises(InvalidRequestError):  # a leader epoch never goes back
        c.update_partition_states({("r", 0): (2, LeaderAndIsr(1, 0, (1, 2), 3, newer))})
    assert c.partition_registrations(["r"])[("r", 0)].state == elected
    with pytest.raises(UnknownTopicError):
        c.update_partition_states({("gone", 0): (0, elected)})


def check_assignment_changes(c: Coordinator, new_controller: NewController) -> None:
    """A reassignment's assignment (with its target) and state are stored together by compare-and-set, and the
    end of it too; a lost race stores neither."""
    epoch = new_controller()
    c.create_replicated_topic("r", {}, None, {0: registration((1, 2, 3), epoch), 1: registration((2, 3), epoch)})
    moving = PartitionRegistration(PartitionAssignment((4, 1, 2, 3), (4, 1, 2)),
                                   LeaderAndIsr(1, 0, (1, 2, 3), 1, epoch))
    assert not c.update_partition_states({("r", 0): (0, moving), ("r", 1): (5, LeaderAndIsr(2, 0, (2,), 6, epoch))})
    assert c.partition_registrations(["r"])[("r", 0)] == registration((1, 2, 3), epoch)
    assert c.update_partition_states({("r", 0): (0, moving)})
    assert c.partition_registrations(["r"]) == {("r", 0): moving, ("r", 1): registration((2, 3), epoch)}
    done = PartitionRegistration(PartitionAssignment((4, 1, 2)), LeaderAndIsr(1, 0, (4, 1, 2), 2, epoch))
    assert c.update_partition_states({("r", 0): (1, done)})
    assert c.partition_registrations(["r"])[("r", 0)] == done
    with pytest.raises(InvalidRequestError):  # the partition epoch must grow, with an assignment change too
        c.update_partition_states({("r", 0): (2, PartitionRegistration(PartitionAssignment((4,)),
                                                                         LeaderAndIsr(4, 1, (4,), 2, epoch)))})
    assert c.partition_registrations(["r"])[("r", 0)] == done


def check_producer_id_blocks(c: Coordinator, new_controller: NewController) -> None:
    """A producer id block is claimed once, with its owner: of any number of callers at once, one claims it, and
    a block claimed stays its first owner's."""
    assert c.producer_id_block_owner(5_000) is None
    assert c.claim_producer_id_block(5_000, "ann")
    assert not c.claim_producer_id_block(5_000, "bob") and not c.claim_producer_id_block(5_000, "ann")
    assert c.producer_id_block_owner(5_000) == "ann"
    with ThreadPoolExecutor(4) as pool:
        claimed = list(pool.map(lambda i: c.claim_producer_id_block(7_000, f"p{i}"), range(8)))
    assert claimed.count(True) == 1
    assert c.producer_id_block_owner(7_000) == f"p{claimed.index(True)}"
    assert c.producer_id_block_owner(5_000) == "ann" and c.producer_id_block_owner(5_001) is None


REPLICATION_CONTRACT = [check_node_registrations, check_replicated_topics, check_partition_state_compare_and_set,
                        check_assignment_changes, check_producer_id_blocks]


@pytest.fixture(params=["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def store(request, tmp_path):
    """(a fresh, empty store, new_controller): new_controller() makes a newer controller epoch current, as the
    single SQLite coordinator does when it starts and as a ZooKeeper election does, and returns it."""
    if request.param == "sqlite":
        sqlite = SqliteCoordinator(str(tmp_path / "m.db"))
        yield sqlite, sqlite.claim_controller_epoch
        sqlite.close()
        return
    zk = ZkCoordinator(request.getfixturevalue("zk_url"), offsets_dir=str(tmp_path / "offsets"))
    elections = iter(range(1, 100))

    def elect() -> int:
        election = ControllerElection(zk.client, f"controller-{next(elections)}").start()
        assert election.wait_active(15)
        election.stop()
        return election.epoch
    yield zk, elect
    zk.close()


@pytest.mark.parametrize("check", REPLICATION_CONTRACT, ids=lambda f: f.__name__)
def test_replication_metadata_contract(store, check) -> None:
    check(*store)
