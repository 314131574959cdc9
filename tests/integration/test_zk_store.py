"""The ZooKeeper coordinator store against a real ZooKeeper server: the znode layout, transactions recorded by
version 0.1.0, compare-and-set conflicts between racing clients, and the metadata it refuses to store. (The
Coordinator contract, run against this store too: test_coordinator_contract.py.)"""
from __future__ import annotations

import base64
import concurrent.futures
import os
import signal
import threading

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from fabric.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    SchemaMismatchError,
    UnknownMemberError,
    UnknownTopicError,
)
from fabric.common.types import (
    CommittedOffset,
    JoinRequest,
    LeaderAndIsr,
    NodeInfo,
    PartitionAssignment,
    PartitionRegistration,
)
from fabric.common.waiting import wait_for
from fabric.coordinator import zk_layout as layout
from fabric.coordinator.zk_store import ZkCoordinator

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def offsets_dir(tmp_path) -> str:
    """The offsets topic's directory, shared by the ZooKeeper stores of a test (as instances share a data dir)."""
    return str(tmp_path / "offsets")


@pytest.fixture
def zk(zk_url, offsets_dir):
    coordinator = ZkCoordinator(zk_url, offsets_dir=offsets_dir)
    yield coordinator
    coordinator.close()


def test_znode_layout_is_kafka_like(zk, zk_url):
    schema = pa.schema([("v", pa.float64())])
    zk.create_topic("clicks", 2, {"retention.ms": "5"}, schema)
    zk.commit_offsets("g1", {("clicks", 1): 7})
    zk.commit_transaction("txn-1")
    doc = layout.loads(zk.client.get("/brokers/topics/clicks")[0])
    assert (doc["partitions"], doc["config"]) == (2, {"retention.ms": "5"})
    assert pa.ipc.read_schema(pa.py_buffer(base64.b64decode(doc["value_schema"]))).equals(schema)
    assert sorted(zk.client.get_children("/brokers/topics/clicks/partitions")) == ["0", "1"]
    assert zk.leader_state("clicks", 1) == layout.LeaderState("", 0, (), 0)  # no controller fenced the write
    # offsets are records of the offsets topic, not znodes (Kafka 0.8.2's move)
    assert zk.committed("g1")[("clicks", 1)].offset == 7 and zk.client.exists("/consumers/g1/offsets") is None
    for batch in range(3):  # a streaming sink's micro-batches: one znode for the query, not one per batch
        zk.commit_transaction(f"query-q:{batch}")
    assert sorted(zk.client.get_children("/transaction_ids")) == ["query-q", "txn-1"]
    assert layout.loads(zk.client.get("/transaction_ids/query-q")[0])["sequence"] == 2
    # everything lives under the URL's chroot, nothing at the server's root
    address = layout.parse_url(zk_url)
    root = KazooClient(hosts=address.hosts)
    root.start(timeout=15)
    try:
        assert root.get_children(address.chroot + "/brokers/topics") == ["clicks"]
        assert "brokers" not in root.get_children("/")
    finally:
        root.stop()
        root.close()


def test_offsets_an_earlier_version_kept_in_znodes_move_to_the_offsets_topic_once(zk_url, tmp_path):
    legacy = ZkCoordinator(zk_url)
    try:
        legacy.create_topic("clicks", 2, {}, None)
        for partition, offset in ((0, 3), (1, 9)):
            legacy.client.create(layout.offset("old-group", "clicks", partition),
                                 layout.offset_data(CommittedOffset(offset, "meta", 1_000)), makepath=True)
    finally:
        legacy.close()
    moved = ZkCoordinator(zk_url, offsets_dir=str(tmp_path / "offsets"))
    try:
        assert moved.committed("old-group") == {("clicks", 0): CommittedOffset(3, "meta", 1_000),
                                                ("clicks", 1): CommittedOffset(9, "meta", 1_000)}
        moved.commit_offsets("old-group", {("clicks", 0): 4})
    finally:
        moved.close()
    again = ZkCoordinator(zk_url, offsets_dir=str(tmp_path / "offsets"))  # migrated once: the newer commit stays
    try:
        assert again.committed("old-group")[("clicks", 0)].offset == 4
        assert again.list_groups() == ["old-group"]
    finally:
        again.close()


def test_transactions_committed_by_0_1_0_still_count(zk):
    """Version 0.1.0 wrote a znode per transaction under /transactions; a restarted query may replay one."""
    zk.client.create(layout.legacy_transaction("query-old:5"), layout.dumps({"commit_ms": 1}), makepath=True)
    assert zk.transaction_committed("query-old:5")
    assert not zk.transaction_committed("query-old:6")


def _race(workers: int, body) -> None:
    """Run body(i) in `workers` threads that start together; re-raise the first failure."""
    barrier, errors = threading.Barrier(workers), []

    def run(i: int) -> None:
        try:
            barrier.wait()
            body(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors


def test_cas_conflicts_between_two_clients_lose_no_update(zk, zk_url, offsets_dir):
    """Two clients (two sessions) alter one topic znode and create the same offset parents concurrently:
    every compare-and-set loser re-reads and retries, so no update is lost."""
    other = ZkCoordinator(zk_url, offsets_dir=offsets_dir)
    try:
        zk.create_topic("shared", 1, {}, None)
        clients = [zk, other]
        # a distinct (valid) config key per write: a lost update leaves its key missing
        writes = [[("retention.ms", "1000"), ("segment.ms", "1001"), ("retention.bytes", "1002"),
                   ("flush.ms", "1003"), ("flush.messages", "1004"), ("index.interval.bytes", "1005")],
                  [("segment.bytes", "2048"), ("max.message.bytes", "1006"), ("min.insync.replicas", "2"),
                   ("compression.type", "lz4"), ("message.timestamp.type", "LogAppendTime"),
                   ("cleanup.policy", "delete")]]
        rounds = len(writes[0])

        def alter(i: int) -> None:
            for n, (key, value) in enumerate(writes[i]):
                clients[i].alter_topic_config("shared", {key: value})
                clients[i].commit_offsets("racers", {("shared", i * rounds + n): n})
        _race(2, alter)
        config = other.topic("shared").config
        assert config == dict(writes[0] + writes[1])
        assert len(zk.committed("racers")) == 2 * rounds
    finally:
        other.close()


def test_group_state_cas_between_two_clients(zk, zk_url, offsets_dir):
    """Two members join through two clients at once: the group state znode keeps both (CAS retried)."""
    other = ZkCoordinator(zk_url, offsets_dir=offsets_dir)
    try:
        zk.create_topic("jobs", 4, {}, None)
        clients, ids = [zk, other], [None, None]

        def join(i: int) -> None:
            ids[i] = clients[i].join_group(JoinRequest("crew", "", ("jobs",), client_id=f"c{i}")).member_id
        _race(2, join)
        members = {m.member_id for m in zk.describe_group("crew").members}
        assert members == set(ids)
        assert zk.list_groups() == other.list_groups() == ["crew"]
    finally:
        other.close()


def test_the_zookeeper_store_refuses_metadata_that_would_make_a_topic_unusable(zk):
    """The same rules as the SQLite store (tests/unit/test_service_topics.py), whoever calls: nothing is written."""
    zk.create_topic("orders", 1, {"retention.ms": "1000"}, None)
    before = zk.client.get_children("/brokers/topics"), zk.topic("orders")
    for call, error, match in [
        (lambda: zk.create_topic("t", 1, {"segment.bytes": "1"}, None), InvalidConfigError, "segment.bytes"),
        (lambda: zk.create_topic("t", 1, {}, pa.schema([("key", pa.string())])), SchemaMismatchError, "clashes"),
        (lambda: zk.create_topic("../t", 1, {}, None), InvalidTopicError, "illegal characters"),
        (lambda: zk.create_topic("t", 2**40, {}, None), InvalidPartitionsError, "partition count"),
        (lambda: zk.alter_topic_config("orders", {"no.such.key": "1"}), InvalidConfigError, "unknown topic config"),
        (lambda: zk.alter_topic_config("orders", {"segment.bytes": "1"}), InvalidConfigError, "segment.bytes"),
        (lambda: zk.commit_offsets("g", {("orders", 0): "x"}), InvalidRequestError, "must be an int"),
        (lambda: zk.commit_transaction("q:" + "9" * 30), InvalidRequestError, "sequence from 0 to"),
    ]:
        with pytest.raises(error, match=match):
            call()
        assert (zk.client.get_children("/brokers/topics"), zk.topic("orders")) == before
    assert zk.list_groups() == [] and zk.client.get_children("/transaction_ids") == []


def _partition(replicas: tuple[int, ...], leader: int | None, isr: tuple[int, ...]) -> PartitionRegistration:
    return PartitionRegistration(PartitionAssignment(replicas), LeaderAndIsr(leader, 0, isr, 0, 0))


def test_replication_znodes_are_kafkas(zk):
    """Data nodes in persistent /brokers/ids/<id> beside the coordinator instances' ephemerals, a replicated
    topic's assignment in its topic znode, each partition's state in Kafka's fields (leader -1: none)."""
    zk.client.create("/brokers/ids/127.0.0.1_9093", layout.dumps({"version": 1, "instance_id": "i"}),
                     ephemeral=True)
    zk.client.create("/brokers/ids/7", layout.dumps({"version": 1, "instance_id": "7"}), ephemeral=True)
    zk.register_node(1, "h1:9092", "rack-a", directory_id="d1")
    data, stat = zk.client.get("/brokers/ids/1")
    assert stat.ephemeralOwner == 0
    assert layout.loads(data) == {"version": 1, "address": "h1:9092", "rack": "rack-a", "node_epoch": 1,
                                  "directory_id": "d1"}
    # instances are not data nodes
    assert zk.registered_nodes() == [NodeInfo(1, "h1:9092", "rack-a", 1, directory_id="d1")]
    with pytest.raises(InvalidConfigError, match="coordinator instance's registration"):
        zk.register_node(7, "h7:9092", directory_id="d7")

    zk.create_replicated_topic("r", {}, None, {0: _partition((1, 2), 1, (1, 2)), 1: _partition((2, 1), None, (2,))})
    assert layout.loads(zk.client.get("/brokers/topics/r")[0])["assignment"] == {"0": [1, 2], "1": [2, 1]}
    assert layout.loads(zk.client.get("/brokers/topics/r/partitions/0/state")[0]) == {
        "version": 1, "leader": 1, "leader_epoch": 0, "isr": [1, 2], "partition_epoch": 0, "controller_epoch": 0}
    assert layout.loads(zk.client.get("/brokers/topics/r/partitions/1/state")[0])["leader"] == -1
    zk.create_topic("plain", 1, {}, None)
    assert "assignment" not in layout.loads(zk.client.get("/brokers/topics/plain")[0])


def test_partition_state_cas_between_two_clients(zk, zk_url, offsets_dir):
    """Two clients (two sessions) change one partition state from the same read: exactly one wins, the other
    loses the race and stores nothing."""
    other = ZkCoordinator(zk_url, offsets_dir=offsets_dir)
    try:
        zk.create_replicated_topic("r", {}, None, {0: _partition((1, 2, 3), 1, (1, 2, 3))})
        clients, won = [zk, other], [None, None]
        isrs = [(1, 2), (1, 3)]

        def shrink(i: int) -> None:
            won[i] = clients[i].update_partition_states({("r", 0): (0, LeaderAndIsr(1, 0, isrs[i], 1, 0))})
        _race(2, shrink)
        assert sorted(won) == [False, True]
        assert zk.partition_registrations()[("r", 0)].state.isr == isrs[won.index(True)]
    finally:
        other.close()


def test_topic_reads_come_from_memory_until_zookeeper_says_the_topic_changed(own_zookeeper, tmp_path):
    """coordinator/zk_watched_cache.py: a topic read once is answered from memory (with ZooKeeper SIGSTOPped, at
    once); another instance's change reaches it with ZooKeeper's watch, this instance's own change at once, and a
    deleted topic is unknown again."""
    url = own_zookeeper.url("/cached")
    reader = ZkCoordinator(url, offsets_dir=str(tmp_path / "offsets"))
    writer = ZkCoordinator(url, offsets_dir=str(tmp_path / "offsets"))
    try:
        writer.create_topic("kept", 2, {}, None)
        assert not reader.topic_on_loop("kept")  # not read yet: a produce or a read of it would read it on a worker
        assert reader.topic("kept").partitions == 2 and not reader.replicated("kept")
        assert reader.topic_on_loop("kept")
        assert own_zookeeper.process is not None
        os.kill(own_zookeeper.process.pid, signal.SIGSTOP)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a round trip would wait out the pause
                assert pool.submit(lambda: reader.topic("kept").partitions).result(timeout=30) == 2
        finally:
            os.kill(own_zookeeper.process.pid, signal.SIGCONT)
        writer.alter_topic_config("kept", {"retention.ms": "1000"})
        wait_for(lambda: reader.topic("kept").config.get("retention.ms") == "1000", 30,
                 "the other instance's config change seen")
        reader.alter_topic_config("kept", {"retention.ms": "2000"})
        assert reader.topic("kept").config["retention.ms"] == "2000"  # its own write, at once
        writer.set_partitions("kept", 3)
        wait_for(lambda: reader.topic("kept").partitions == 3, 30, "the other instance's partitions seen")
        writer.delete_topic("kept")

        def unknown() -> bool:
            try:
                reader.topic("kept")
            except UnknownTopicError:
                return True
            return False
        wait_for(unknown, 30, "the deleted topic unknown")
    finally:
        reader.close()
        writer.close()


def test_partition_states_come_from_memory_until_zookeeper_says_they_changed(own_zookeeper, tmp_path):
    """The registrations the controller answers every node's heartbeat from: read once, then from memory (with
    ZooKeeper SIGSTOPped, at once); another instance's change reaches the reader with ZooKeeper's watch, its own
    at once, and a topic deleted and created again under its name is read with its own states, never its
    predecessor's (whatever the order its watches fire in)."""
    url = own_zookeeper.url("/states")
    reader = ZkCoordinator(url, offsets_dir=str(tmp_path / "offsets"))
    writer = ZkCoordinator(url, offsets_dir=str(tmp_path / "offsets"))
    try:
        writer.create_replicated_topic("r", {}, None, {0: _partition((1, 2), 1, (1, 2)),
                                                       1: _partition((2, 1), 2, (2, 1))})
        states = lambda: {tp: reg.state for tp, reg in reader.partition_registrations(["r"]).items()}
        assert states()[("r", 0)].leader == 1
        assert own_zookeeper.process is not None
        os.kill(own_zookeeper.process.pid, signal.SIGSTOP)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a round trip would wait out the pause
                assert pool.submit(lambda: states()[("r", 1)].leader).result(timeout=30) == 2
        finally:
            os.kill(own_zookeeper.process.pid, signal.SIGCONT)
        assert writer.update_partition_states({("r", 0): (0, LeaderAndIsr(2, 1, (2,), 1, 0))})
        wait_for(lambda: states()[("r", 0)].leader == 2, 30, "the other instance's new leader seen")
        assert reader.update_partition_states({("r", 1): (0, LeaderAndIsr(1, 1, (1,), 1, 0))})
        assert states()[("r", 1)].leader == 1  # its own write, at once
        old_id = reader.topic("r").topic_id
        reader.delete_topic("r")
        reader.create_replicated_topic("r", {}, None, {0: _partition((3, 1), 3, (3, 1))})
        assert reader.topic("r").topic_id != old_id
        assert states() == {("r", 0): LeaderAndIsr(3, 0, (3, 1), 0, 0)}
        late = reader._state_cache  # the deletion's watch late: the predecessor's state still kept
        late._entries[layout.partition_state("r", 0)] = (old_id, LeaderAndIsr(2, 1, (2,), 1, 0))
        assert states() == {("r", 0): LeaderAndIsr(3, 0, (3, 1), 0, 0)}
        assert reader.partition_registrations()[("r", 0)].assignment.replicas == (3, 1)
    finally:
        reader.close()
        writer.close()


def test_an_instance_keeps_group_states_in_memory_until_zookeeper_says_they_changed(own_zookeeper, tmp_path):
    """ZkGroupStore over zk_watched_cache: an instance's store (one with an election epoch) answers a commit's
    group check from memory once it read the group's state, or found none (with ZooKeeper SIGSTOPped, at once);
    another writer's change reaches it with ZooKeeper's watch, its own at once, and a new epoch reads afresh. A
    commit of a kept group to kept topics runs on a server's event loop. A store without an epoch keeps nothing."""
    url, epoch = own_zookeeper.url("/groups-kept"), [7]
    instance = ZkCoordinator(url, offsets_dir=str(tmp_path / "offsets"), epoch=lambda: epoch[0])
    other = ZkCoordinator(url, offsets_dir=str(tmp_path / "offsets"))
    kept = instance._group_states  # (the store a commit's check reads; commits_on_loop asks it)
    try:
        other.create_topic("t", 1, {}, None)
        instance.check_commit("quiet")  # no state: a commit by hand is allowed, and the absence is kept
        assert kept.keeps("quiet") and not other._group_states.keeps("quiet")
        assert own_zookeeper.process is not None
        os.kill(own_zookeeper.process.pid, signal.SIGSTOP)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a round trip would wait out the pause
                assert pool.submit(lambda: instance.check_commit("quiet")).result(timeout=30) is None
        finally:
            os.kill(own_zookeeper.process.pid, signal.SIGCONT)
        other.join_group(JoinRequest("quiet", "", ("t",)))  # another writer gives the group a member

        def refused() -> bool:
            try:
                instance.check_commit("quiet")
            except UnknownMemberError:
                return True
            return False
        wait_for(refused, 30, "the other writer's member seen through the watch")
        joined = instance.join_group(JoinRequest("own", "", ("t",)))
        with pytest.raises(UnknownMemberError):  # its own write, at once
            instance.check_commit("own")
        instance.sync_group("own", joined.member_id, joined.generation)

        def checked_and_kept() -> bool:  # (the watch of its own write may still forget what it read after it)
            instance.check_commit("own", joined.member_id, joined.generation)
            return kept.keeps("own")
        wait_for(checked_and_kept, 30, "the group's state kept again after its own write")
        instance.commit_offsets("own", {("t", 0): 0}, "", joined.generation, joined.member_id)
        assert instance.topic("t") and instance.commits_on_loop("own", ["t"])  # asks ZooKeeper nothing: on the loop
        assert not instance.commits_on_loop("never-read", ["t"]) and not instance.commits_on_loop("own", ["other"])
        epoch[0] += 1  # elected again: what it kept may be older than the others' writes
        assert not kept.keeps("own")
        instance.check_commit("own", joined.member_id, joined.generation)
        assert kept.keeps("own")
        other.check_commit("own", joined.member_id, joined.generation)
        assert not other._group_states.keeps("own")
    finally:
        instance.close()
        other.close()
