"""The replicated cluster with replication factor 1 (docs/replication.md, step 3) as real processes: a coordinator
that runs the controller and data nodes that register, heartbeat and serve the partitions they lead. Clients
route produce and fetch to leaders; a SIGKILLed node's partitions go offline after node.session.timeout.ms and
come back when it restarts; nodes refuse partitions they do not lead and stale leader epochs; the controller's
calls are authorized on the cluster resource."""
from __future__ import annotations

import json
import os
import shutil
import signal
from collections import Counter

import pytest

import fabric
from fabric.common.errors import (
    AuthenticationError,
    AuthorizationError,
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidReplicationFactorError,
    LeaderNotAvailableError,
    NotLeaderError,
    UnknownPartitionError,
)
from fabric.common.waiting import wait_for
from fabric.server.launcher import NodeProcess
from fabric.server.node.repair import range_call
from fabric.storage import frame

# a loaded machine may take a while past the session timeout to notice, decide and answer
SETTLE_S = 30


def leaders(fab, topic: str) -> dict[int, int | None]:
    return {p.partition: p.leader for p in fab.describe_topic(topic).partitions}


def test_a_replicated_topic_spreads_its_leaders_and_clients_route_to_them(shared_cluster, drain, fabric_cli,
                                                                          raw) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        assert [(n.id, n.alive) for n in fab.list_nodes()] == [(1, True), (2, True), (3, True)]
        fab.create_topic("spread", partitions=6, replication_factor=1)
        described = fab.describe_topic("spread").partitions
        assert Counter(p.leader for p in described) == {1: 2, 2: 2, 3: 2}
        assert all(p.replicas == (p.leader,) and p.isr == (p.leader,) and p.leader_epoch == 0 for p in described)
        with fab.producer() as producer:
            for i in range(600):
                producer.send("spread", b"v%d" % i, key=b"k%d" % i)
        ends = {p.partition: p.end_offset for p in fab.describe_topic("spread").partitions}
        assert sum(ends.values()) == 600 and all(ends.values())
        for node in shared_cluster.nodes.values():  # each node holds exactly the partitions it leads
            status = raw.action(node.address, "status")
            assert sorted(p for _, p in status["leaders"]) == sorted(p for p, n in leaders(fab, "spread").items()
                                                                     if n == status["node_id"])
        consumer = fab.consumer("spread", group_id="readers", auto_offset_reset="earliest")
        records = drain(consumer, 600)
        assert sorted(r.value for r in records) == sorted(b"v%d" % i for i in range(600))
        consumer.commit()
        consumer.close()
        assert all(g.lag == 0 for g in fab.describe_group("readers"))
        with pytest.raises(UnknownPartitionError, match="there is no partition 6"):  # checked once per topic
            fab.cluster.commit_offsets("readers", {("spread", 0): 0, ("spread", 6): 0})
        assert all(g.lag == 0 for g in fab.describe_group("readers"))  # nothing of the refused commit stored
        fab.create_topic("plain", partitions=2)  # a topic without a replication factor stays the coordinator's
        with fab.producer() as producer:
            producer.send("plain", b"x").result()
        assert fab.describe_topic("plain").partitions[0].replicas == ()
        with pytest.raises(InvalidReplicationFactorError, match="replication factor 4 is larger than the 3 live"):
            fab.create_topic("too-many", replication_factor=4)
        with pytest.raises(fabric.InvalidArgumentError, match="replication_factor must be an integer from 1"):
            fab.create_topic("none", replication_factor=0)
    listed = fabric_cli("nodes", "list", "--format", "json", "--url", shared_cluster.url)
    assert listed.returncode == 0, listed.stderr
    assert [(n["id"], n["alive"]) for n in json.loads(listed.stdout)] == [(1, True), (2, True), (3, True)]
    created = fabric_cli("topics", "create", "cli-made", "--partitions", "3", "--replication-factor", "1",
                         "--url", shared_cluster.url)
    assert created.returncode == 0, created.stderr
    shown = fabric_cli("topics", "describe", "cli-made", "--url", shared_cluster.url)
    assert shown.returncode == 0 and "LEADER" in shown.stdout and "LEADER-EPOCH" in shown.stdout, shown.stderr


def test_nodes_refuse_partitions_they_do_not_lead_and_stale_epochs(shared_cluster, raw) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("refusals", partitions=3, replication_factor=1)
        owner = leaders(fab, "refusals")
    other = next(n for i, n in shared_cluster.nodes.items() if i != owner[0])
    with pytest.raises(NotLeaderError, match="does not lead refusals-0|hosts no replica of refusals-0"):
        raw.append(other.address, "refusals", 0, 0)
    with pytest.raises(FencedLeaderEpochError, match="older than"):
        raw.append(shared_cluster.nodes[owner[0]].address, "refusals", 0, -1)
    assert raw.append(shared_cluster.nodes[owner[0]].address, "refusals", 0, 0) == 0
    with pytest.raises(NotLeaderError, match="replicated: its partitions are served by their leader nodes"):
        raw.action(shared_cluster.coordinator.address, "partition_state", topic="refusals", partition=0)
    with fabric.connect(f"file://{shared_cluster.coordinator.data_dir}") as embedded:
        with pytest.raises(InvalidConfigError, match="needs a cluster with data nodes"):
            embedded.create_topic("embedded-rf", replication_factor=1)


def test_a_killed_node_takes_its_partitions_offline_until_it_rejoins(node_cluster, fabric_cli, raw) -> None:
    cluster = node_cluster(nodes=2)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("fragile", partitions=4, replication_factor=1)
        with fab.producer() as producer:
            for p in range(4):
                producer.send("fragile", b"before", partition=p)
        on_one = sorted(p for p, leader in leaders(fab, "fragile").items() if leader == 1)
        cluster.nodes[1].kill()
        wait_for(lambda: all(leaders(fab, "fragile")[p] is None for p in on_one), SETTLE_S,
                 "node 1's partitions to go offline")
        offline = fab.describe_topic("fragile").partitions[on_one[0]]
        assert (offline.replicas, offline.isr, offline.end_offset) == ((1,), (1,), -1)
        assert [n.alive for n in fab.list_nodes()] == [False, True]
        shown = fabric_cli("topics", "describe", "--unavailable-partitions", "--format", "json", "--url", cluster.url)
        assert [p["partition"] for t in json.loads(shown.stdout) for p in t["partitions"]] == on_one, shown.stderr
        text = fabric_cli("topics", "describe", "fragile", "--unavailable-partitions", "--url", cluster.url).stdout
        assert text.count("none (offline)") == len(on_one)
        with fab.producer(retries=0, request_timeout_ms=15_000) as producer:  # one attempt: its answer is the error
            with pytest.raises(LeaderNotAvailableError, match=f"fragile-{on_one[0]} is offline"):
                producer.send("fragile", b"lost", partition=on_one[0]).result(SETTLE_S)
        with fab.producer() as producer:
            others = [p for p in range(4) if p not in on_one]
            assert producer.send("fragile", b"fine", partition=others[0]).result(SETTLE_S).offset == 1
        cluster.restart(1)
        with fab.producer(delivery_timeout_ms=SETTLE_S * 1000, request_timeout_ms=10_000) as producer:
            assert producer.send("fragile", b"after", partition=on_one[0]).result(SETTLE_S).offset == 1
        back = fab.describe_topic("fragile").partitions[on_one[0]]
        assert back.leader == 1 and back.leader_epoch == 2  # offline (1), then elected again (2)
        consumer = fab.consumer(auto_offset_reset="earliest")
        consumer.assign([("fragile", on_one[0])])
        assert [r.value for r in consumer.poll(5)] == [b"before", b"after"]
        consumer.close()
    with pytest.raises(FencedLeaderEpochError):
        raw.append(cluster.nodes[1].address, "fragile", on_one[0], 0)


def test_the_controllers_calls_need_cluster_action_and_describe_shows_only_described_topics(node_cluster, tmp_path,
                                                                                           raw) -> None:
    (tmp_path / "tokens").write_text("admin-secret admin\nnode-secret node\napp-secret app\n")
    (tmp_path / "acls").write_text("admin admin topic:*\nadmin admin group:*\nnode cluster_action cluster:fabric\n"
                                   "app describe topic:visible\n")
    files = ("--tokens-file", str(tmp_path / "tokens"), "--acl-file", str(tmp_path / "acls"))
    cluster = node_cluster(nodes=1, coordinator_extra=files, node_token="node-secret", node_extra=files)
    with fabric.connect(cluster.coordinator.url("token=admin-secret")) as fab:
        assert [n.alive for n in fab.list_nodes()] == [True]  # the launcher waited for it with the node's token
        fab.create_topic("visible", replication_factor=1)
        fab.create_topic("hidden", replication_factor=1)
        with fab.producer() as producer:  # the node authorizes the admin's token as the coordinator does
            assert producer.send("visible", b"x").result(SETTLE_S).offset == 0
    node = cluster.nodes[1].address
    with pytest.raises(AuthorizationError, match="not allowed to write topic:visible"):
        raw.call(node, raw.append_call("visible"), "app-secret")
    assert raw.action(node, "partition_state", token="app-secret", topic="visible", partition=0).end_offset == 1
    with pytest.raises(AuthorizationError, match="not allowed to describe topic:hidden"):
        raw.action(node, "partition_state", token="app-secret", topic="hidden", partition=0)
    copy = range_call(("visible", 0), 0, 1, "")  # a replica repairing a damaged range asks another for its copy
    with pytest.raises(AuthorizationError, match="not allowed to cluster_action cluster:fabric"):
        raw.call(node, copy, "app-secret")
    assert frame.unpack_header(raw.call(node, copy, "node-secret"), 0).base_offset == 0
    coordinator = cluster.coordinator.address
    with pytest.raises(AuthorizationError, match="not allowed to cluster_action cluster:fabric"):
        raw.action(coordinator, "register_node", token="app-secret", node_id=7, address="127.0.0.1:1",
                   directory_id="d7")
    with pytest.raises(AuthorizationError, match="not allowed to cluster_action cluster:fabric"):
        raw.action(coordinator, "node_heartbeat", token="app-secret", node_id=1, node_epoch=1)
    with pytest.raises(AuthorizationError, match="not allowed to create topic:mine"):
        raw.action(coordinator, "create_topic", token="app-secret", name="mine", partitions=1, config={},
                   value_schema=None, replication_factor=1)
    seen = raw.action(coordinator, "describe_cluster", token="app-secret")
    assert sorted({tp[0] for tp in seen.partitions}) == ["visible"] and [n.id for n in seen.nodes] == [1]
    assert sorted({tp[0] for tp in raw.action(coordinator, "describe_cluster", token="admin-secret").partitions}) == [
        "hidden", "visible"]
    with pytest.raises(fabric.InvalidRequestError, match="argument 'node_epoch' must be int"):
        raw.action(coordinator, "node_heartbeat", token="node-secret", node_id=1, node_epoch="1")
    with pytest.raises(fabric.InvalidRequestError, match="node id must be an int from 0"):
        raw.action(coordinator, "register_node", token="node-secret", node_id=-3, address="127.0.0.1:1",
                   directory_id="d")


@pytest.mark.zookeeper
def test_the_elected_coordinator_runs_the_controller_and_its_successor_takes_over(node_cluster, zk_url, tmp_path,
                                                                                 the_active) -> None:
    config = tmp_path / "zk.properties"
    config.write_text(f"coordinator.store={zk_url}\nzookeeper.session.timeout.ms=2000\n")
    cluster = node_cluster(nodes=2, coordinator_extra=("--config", str(config)), instances=2)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("ha", partitions=2, replication_factor=1)
        with fab.producer() as producer:
            assert producer.send("ha", b"one", partition=0).result(SETTLE_S).offset == 0
        first = wait_for(lambda: the_active(fab), SETTLE_S, "an active coordinator")
        before = fab.cluster.describe_cluster(refresh=True)
        next(c for c in cluster.coordinators if c.address == first.instance).kill()
        wait_for(lambda: (the_active(fab) or first).instance != first.instance, SETTLE_S, "the standby to take over")
        after = fab.cluster.describe_cluster(refresh=True)
        assert after.controller_epoch > before.controller_epoch
        with fab.producer(delivery_timeout_ms=SETTLE_S * 1000, request_timeout_ms=10_000) as producer:
            assert producer.send("ha", b"two", partition=0).result(SETTLE_S).offset == 1
        # the nodes heartbeat to the new controller: alive past a whole session, leaders unchanged
        wait_for(lambda: fab.cluster.describe_cluster(refresh=True).controller_epoch == after.controller_epoch
                 and all(n.alive for n in fab.list_nodes()), SETTLE_S, "the nodes to stay alive")
        assert {tp: r.state.leader for tp, r in after.partitions.items()} == {
            tp: r.state.leader for tp, r in before.partitions.items()}


def test_a_node_stops_in_time_on_sigterm_even_without_its_coordinator(node_cluster) -> None:
    cluster = node_cluster(nodes=1)
    cluster.coordinator.kill()
    node = cluster.nodes[1].process
    assert node is not None
    node.terminate()
    assert node.wait(timeout=SETTLE_S) == 0  # node.shutdown.timeout.ms is 5 s; exit 1 would mean it gave up


def test_a_node_stopped_with_sigterm_hands_its_leadership_over_before_it_exits(node_cluster) -> None:
    """Kafka's controlled shutdown: SIGTERM to a partition's leader moves the leadership to an in-sync replica and
    takes the node out of the ISR before the process exits, not a session timeout later (the session here is
    120 s, longer than anything below waits); producing goes on at the new leader and nothing acknowledged is
    lost."""
    cluster = node_cluster(nodes=3, coordinator_extra=("--node-session-timeout-ms", "120000"),
                           node_extra=("--session-timeout-ms", "120000", "--shutdown-timeout-ms", "20000"))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("handover", replication_factor=3, config={"min.insync.replicas": "2"})
        sent = [b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)]
        with fab.producer(acks="all", linger_ms=0) as producer:
            for value in sent[:10]:
                producer.send("handover", value, partition=0).result(SETTLE_S)
            registration = fab.partition_assignment("handover", 0)
            assert registration is not None and len(registration.state.isr) == 3
            leader = registration.state.leader
            cluster.nodes[leader].kill(signal.SIGTERM)  # returns once the process exited
            assert cluster.nodes[leader].process.returncode == 0
            after = fab.partition_assignment("handover", 0)
            assert after is not None and after.state.leader not in (None, leader)
            assert leader not in after.state.isr and after.state.leader_epoch > registration.state.leader_epoch
            assert not next(n for n in fab.list_nodes() if n.id == leader).alive
            for offset, value in enumerate(sent[10:], start=10):
                assert producer.send("handover", value, partition=0).result(SETTLE_S).offset == offset
        with fab.consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign([("handover", 0)])
            got: list[bytes] = []
            wait_for(lambda: got.extend(r.value for r in consumer.poll(1)) or len(got) >= len(sent), SETTLE_S,
                     "every acknowledged record at the new leader")
            assert got == sent


def test_a_second_node_process_on_the_same_data_directory_is_refused(shared_cluster) -> None:
    """A careless operator starts a node twice: the second process refuses the directory the first serves (two
    writers would corrupt its logs) and exits with the fix; the first goes on serving, its registration intact."""
    first = shared_cluster.nodes[1]
    epoch = first.status()["node_epoch"]
    twin = NodeProcess(1, first.data_dir, first.coordinator, extra=first.extra)
    with pytest.raises(RuntimeError, match="is in use by another node process; stop that process first"):
        twin.start(timeout=60)
    assert twin.process is not None and twin.process.returncode == 1
    assert first.status()["node_epoch"] == epoch  # the twin never registered


def test_a_node_whose_data_directory_is_made_again_under_it_exits_before_it_shares_it_with_another(
        node_cluster, tmp_path) -> None:
    """A careless operator deletes a running node's data directory and starts a node on it again without stopping
    the first: the new process's lock file is not the one the first locked (an flock does not survive its file's
    deletion), so the first sees it within a maintenance round and exits at once, writing nothing more, and the
    two never write the same files; the controller moves its leadership on, as after a SIGKILL, and the new node
    serves the directory. (A directory only deleted leaves the node serving, its replicas offline:
    test_replica_storage.)"""
    cluster = node_cluster(nodes=2)
    cluster.nodes[2].stop()  # (node 2 again, its log kept outside the directory the test deletes)
    first = NodeProcess(2, cluster.nodes[2].data_dir, cluster.nodes[2].coordinator, extra=cluster.nodes[2].extra,
                        log_dir=str(tmp_path / "first"))
    second = NodeProcess(2, first.data_dir, first.coordinator, extra=first.extra, log_dir=str(tmp_path / "second"))
    first.start()
    try:
        with fabric.connect(cluster.url) as fab:
            fab.create_topic("pulled", partitions=2, replication_factor=2, config={"min.insync.replicas": "1"})
            wait_for(lambda: all(len(p.isr) == 2 for p in fab.describe_topic("pulled").partitions), SETTLE_S,
                     "both replicas in sync")
            shutil.rmtree(first.data_dir)
            second.start()  # (ready once it registered: the first's lease lapsed, the first having exited)
            assert first.process.poll() == 1
            assert "is not the lock file this node claimed" in first.log()
            with fab.producer(acks="all") as producer:
                assert producer.send("pulled", b"after", partition=0).result(SETTLE_S).offset == 0
            wait_for(lambda: all(len(p.isr) == 2 for p in fab.describe_topic("pulled").partitions), SETTLE_S,
                     "the second node in sync")
    finally:
        first.stop()
        second.stop()


def test_a_second_process_with_a_live_nodes_id_is_refused_and_changes_nothing(shared_cluster, tmp_path) -> None:
    """A careless operator starts `--id 1` again, on an empty data directory and another port, while node 1 is
    alive. The controller refuses its registrations (the id's lease is held from another data directory), naming
    the id and the live node's address; it retries for two sessions (a replaced disk waits so for its old
    process's lease to lapse), then exits non-zero. Node 1 keeps its registration and node epoch, and no
    partition changes."""
    first = shared_cluster.nodes[1]
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("claimed", partitions=3, replication_factor=3)
        before = fab.cluster.describe_cluster(refresh=True)
        twin = NodeProcess(1, str(tmp_path / "twin"), first.coordinator, extra=first.extra)
        try:
            with pytest.raises(RuntimeError, match=f"node id 1 is held by a live node process at {first.address}"):
                twin.start(timeout=60)
        finally:
            twin.stop()
        assert twin.process is not None and twin.process.returncode == 1
        assert "that process is alive" in twin.log()
        after = fab.cluster.describe_cluster(refresh=True)
        assert after.nodes == before.nodes and all(n.alive for n in after.nodes)
        assert {tp: reg for tp, reg in after.partitions.items() if tp[0] == "claimed"} == {
            tp: reg for tp, reg in before.partitions.items() if tp[0] == "claimed"}
        with fab.producer(acks="all") as producer:
            assert [producer.send("claimed", b"still", partition=p).result(SETTLE_S).offset for p in range(3)] == [
                0, 0, 0]


@pytest.mark.parametrize("store", [(), pytest.param(("--zookeeper",), marks=pytest.mark.zookeeper)],
                         ids=["sqlite", "zookeeper"])
def test_a_local_cluster_in_one_command(fabric_cli, tmp_path, store) -> None:
    """`fabric cluster up` with a tokens file: its processes authenticate each other with the token of
    --token-file, which no process shows on its command line (/proc/PID/cmdline, what `ps` prints)."""
    data = str(tmp_path / "local")
    (tmp_path / "tokens").write_text("admin-s3cret admin\nnode-s3cret node\n")
    (tmp_path / "node-token").write_text("node-s3cret\n")
    up = fabric_cli("cluster", "up", "--nodes", "2", "--data", data, *store, "--tokens-file", str(tmp_path / "tokens"),
                    "--token-file", str(tmp_path / "node-token"), timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        url = up.stdout.strip()
        assert url.startswith("fabric://127.0.0.1:") and "s3cret" not in url
        with open(os.path.join(data, "cluster.json")) as state:
            processes = json.load(state)["processes"]
        for process in processes:
            with open(f"/proc/{process['pid']}/cmdline", "rb") as cmdline:
                argv = cmdline.read()
            assert b"s3cret" not in argv, argv
            assert process["role"] == "zookeeper" or b"--tokens-file" in argv, argv
        with pytest.raises(AuthenticationError):
            with fabric.connect(url) as anonymous:
                anonymous.list_topics()
        with fabric.connect(url + "?token=admin-s3cret") as fab:
            assert [n.id for n in fab.list_nodes() if n.alive] == [1, 2]
            # group offsets live on the nodes (offsets.topic.replication.factor 3, capped at the 2 nodes), so a
            # transactional producer can commit a group's offsets with its records
            fab.create_topic("t", partitions=1, replication_factor=2)
            producer = fab.producer(transactional_id="up")
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("t", b"v")
            producer.send_offsets_to_transaction({("t", 0): 0}, "g")
            producer.commit_transaction()
            assert fab.cluster.coordinator.committed("g")[("t", 0)].offset == 0
        again = fabric_cli("cluster", "up", "--data", data)
        assert again.returncode == 1 and "is running" in again.stderr
        status = fabric_cli("cluster", "status", "--data", data)
        assert status.returncode == 0 and status.stdout.count("running") == 3 + len(store), status.stdout
    finally:
        down = fabric_cli("cluster", "down", "--data", data, timeout=120)
    assert down.returncode == 0, down.stderr
    assert "no cluster state" in fabric_cli("cluster", "status", "--data", data).stderr
