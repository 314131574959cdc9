"""Node membership (docs/replication.md, "Node membership") as real processes: a coordinator running the controller
and data nodes with quick leases (NodeCluster.SESSION_MS).

- The coordinator SIGSTOPped until every node has gone a whole session without an answer, then SIGCONTed: the
  controller gives every node a full session before it declares any dead, the nodes resume under their node
  epochs, and no partition state changes (leader, leader epoch, ISR), with a SQLite and a ZooKeeper store.
- A node SIGKILLed and restarted at once on its own data directory rejoins under a new node epoch; one restarted
  at once on a wiped (replaced) disk registers once its old process's lease has lapsed, and rejoins the ISR.

(A second process started with a live node's id is refused: test_cluster.py.)
"""
from __future__ import annotations

import time

import pytest

import fabric
from fabric.common.types import LeaderAndIsr

PARTITIONS = 6


def _states(fab: fabric.Fabric, topic: str) -> dict[int, LeaderAndIsr]:
    return {tp[1]: reg.state for tp, reg in fab.cluster.describe_cluster(refresh=True).partitions.items()
            if tp[0] == topic}


@pytest.mark.parametrize("store", ["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def test_a_paused_coordinator_declares_no_node_dead_and_moves_no_leader(node_cluster, replication, tmp_path,
                                                                        request, store) -> None:
    """The coordinator is SIGSTOPped until every node has stopped serving (each heard no answer for a whole
    session, so every lease is past its end by the controller's clock), then SIGCONTed. No node is declared dead:
    the controller's first call after the gap gives every node a full session, the nodes' heartbeats under their
    old node epochs are answered, and they serve again. A whole session after the resume every partition has the
    leader, leader epoch and ISR it had, every node its node epoch, and acks=all writes go to every partition."""
    extra: tuple[str, ...] = ()
    if store == "zookeeper":
        config = tmp_path / "zk.properties"
        config.write_text(f"coordinator.store={request.getfixturevalue('zk_url')}\n")
        extra = ("--config", str(config))
    cluster = node_cluster(nodes=3, coordinator_extra=extra)
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic("steady", partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer(acks="all") as producer:
            for p in range(PARTITIONS):
                producer.send("steady", b"before", partition=p).result(60)
        for p in range(PARTITIONS):
            replication.wait_in_sync(fab, cluster.nodes, "steady", p)
        before, epochs = _states(fab, "steady"), {n.id: n.node_epoch for n in fab.list_nodes()}

        cluster.coordinator.pause()
        try:
            replication.eventually(lambda: all(replication.status(node, "steady", p).get("role") == "Offline"
                                               for node in cluster.nodes.values() for p in range(PARTITIONS)),
                                   "every node to stop serving, a session without an answer behind it")
        finally:
            cluster.coordinator.resume()
        resumed = time.monotonic()

        def settled() -> bool:
            """A whole session after the resume, every node alive and serving its partitions again."""
            if time.monotonic() - resumed < cluster.SESSION_MS / 1000 or not all(n.alive for n in fab.list_nodes()):
                return False
            roles = [replication.status(node, "steady", p).get("role") for node in cluster.nodes.values()
                     for p in range(PARTITIONS)]
            return roles.count("Leader") == PARTITIONS and roles.count("Follower") == 2 * PARTITIONS
        replication.eventually(settled, "every node serving again a session after the coordinator resumed")
        assert _states(fab, "steady") == before
        assert {n.id: n.node_epoch for n in fab.list_nodes()} == epochs
        with fab.producer(acks="all") as producer:
            assert [producer.send("steady", b"after", partition=p).result(60).offset
                    for p in range(PARTITIONS)] == [1] * PARTITIONS
        assert _states(fab, "steady") == before


def test_a_node_killed_and_restarted_at_once_rejoins_on_its_own_disk_or_a_replaced_one(node_cluster, replication
                                                                                      ) -> None:
    """Node 1 SIGKILLed and started again at once on its data directory: its registration (same directory id,
    while its old lease may still be alive) fences the old process under a new node epoch, and it rejoins the ISR.
    Node 2 SIGKILLed, its data directory wiped (a replaced disk, a new directory id), started again at once: it
    registers once its old process's lease has lapsed (retrying meanwhile, not refused for good), copies the log
    and rejoins the ISR."""
    cluster = node_cluster(nodes=2)
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic("restarted", replication_factor=2)
        with fab.producer(acks="all") as producer:
            producer.send("restarted", b"first").result(60)
            for node_id, wiped in ((1, False), (2, True)):
                epoch = next(n.node_epoch for n in fab.list_nodes() if n.id == node_id)
                cluster.nodes[node_id].kill()
                if wiped:
                    replication.wipe(cluster.nodes[node_id])
                node = cluster.restart(node_id)
                assert node.status()["node_epoch"] > epoch
                replication.wait_isr(fab, "restarted", {1, 2})
                producer.send("restarted", f"after {node_id}".encode()).result(60)
        assert replication.wait_in_sync(fab, cluster.nodes, "restarted") == 3
