"""Storage failure moves leadership (Kafka's log-directory failure handling; docs/replication.md, "Replica
health"): a data node whose disk is full or read-only, or whose data directory is deleted under it, reports those
replicas offline with its heartbeat. The controller moves their leaderships to in-sync replicas and takes them out
of their ISRs at once (replica.lag.time.max.ms is ten minutes here, so nothing else could), and an idempotent
producer's sends succeed on the new leaders without the caller retrying. The node logs the failure once per
replica, with no traceback, and its errors name the node and the partition and are retriable. Once the disk works
again, its replicas rejoin the ISR; a replica whose directory was deleted rejoins once the node restarts.

Real coordinator and node processes; the disk is a real tmpfs (`small_disk`) filled up and remounted read-only.
Every send is recorded in a history (tests/history_recorder.py) and every partition is read back at the end.
"""
from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

import fabric

TOPIC, PARTITIONS = "t", 3  # placement is round-robin: each node leads one partition and follows the others
NODE_EXTRA = ("--replica-lag-time-max-ms", "600000")
VALUE = b"." * 20_000  # more than a tmpfs page: a full disk refuses every append

pytestmark = pytest.mark.slow


def led_by(replication, fab: fabric.Fabric, node_id: int) -> int:
    """The partition node `node_id` leads (the controller's view)."""
    return next(p for p in range(PARTITIONS) if replication.state(fab, TOPIC, p).leader == node_id)


def send_everywhere(sender, tag: str) -> None:
    """Two acks=all records to each partition, each acknowledged (the producer retries what it may)."""
    for p in range(PARTITIONS):
        sender.send_all([f"{tag}-{p}-{i}".encode() + VALUE for i in range(2)], p)


def assert_quiet(node, mark: int, what: str) -> None:
    """Since byte `mark` of the node's log: no traceback, no recovery repeated, a few warnings at most."""
    text = node.log()[mark:]
    warnings = re.findall(r"^\S+ \S+ (?:WARNING|ERROR|CRITICAL) .*$", text, re.MULTILINE)
    assert "Traceback" not in text and len(re.findall("recovered to end offset", text)) <= PARTITIONS, text[-3000:]
    assert len(warnings) <= 3 * PARTITIONS, f"{what}: {len(warnings)} warnings:\n" + "\n".join(warnings[-20:])


@contextmanager
def recorded(cluster, history, replication) -> Iterator[tuple[fabric.Fabric, Any]]:
    """Topic t on the cluster, two acks=all records sent to each partition through a recorded idempotent
    producer (`sender`); after the block, once every replica is in sync, each partition is read back whole and the
    history checked."""
    recorder = history.recorder("test")
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        with replication.sender(fab.producer(acks="all", linger_ms=0), recorder, TOPIC) as sender:
            send_everywhere(sender, "before")
            yield fab, sender
            send_everywhere(sender, "after")
        for p in range(PARTITIONS):
            replication.wait_in_sync(fab, cluster.nodes, TOPIC, p)
            replication.final_read(fab, recorder, TOPIC, p)
    history.check(dense=True).assert_valid()


def wait_isrs(replication, fab: fabric.Fabric, isr: set[int]) -> None:
    for p in range(PARTITIONS):
        replication.wait_isr(fab, TOPIC, isr, p)


def test_a_full_then_read_only_disk_moves_leaderships_and_the_replicas_rejoin_once_it_works(
        node_cluster, small_disk, history, replication) -> None:
    cluster = node_cluster(nodes=3, node_extra=NODE_EXTRA, data_dirs={1: small_disk.path / "node1"})
    node = cluster.nodes[1]
    with recorded(cluster, history, replication) as (fab, sender):
        for phase, (fail, mend) in {"full": (small_disk.fill, small_disk.free),
                                    "read-only": (lambda: small_disk.remount("ro"),
                                                  lambda: small_disk.remount("rw"))}.items():
            replication.eventually(lambda: fab.elect_leaders("preferred") or True, "a preferred election")
            led = led_by(replication, fab, 1)
            mark = len(node.log())
            fail()
            send_everywhere(sender, phase)  # no retry here: a failing send fails the test
            assert replication.state(fab, TOPIC, led).leader != 1, f"{phase}: node 1 still leads {TOPIC}-{led}"
            wait_isrs(replication, fab, {2, 3})
            offline = replication.status(node, TOPIC, led)
            assert (offline["health"], offline["role"]) == ("Offline", "Follower"), offline
            assert_quiet(node, mark, phase)
            mend()
            wait_isrs(replication, fab, {1, 2, 3})
            assert replication.status(node, TOPIC, led)["health"] == "Healthy"


def test_a_data_directory_deleted_under_a_node_moves_its_leaderships_until_it_restarts(
        node_cluster, history, replication, tmp_path) -> None:
    cluster = node_cluster(nodes=3, node_extra=NODE_EXTRA, data_dirs={1: tmp_path / "deleted"})
    node = cluster.nodes[1]
    with recorded(cluster, history, replication) as (fab, sender):
        led = led_by(replication, fab, 1)
        mark = len(node.log())
        shutil.rmtree(node.data_dir)
        send_everywhere(sender, "deleted")  # no retry here: a failing send fails the test
        wait_isrs(replication, fab, {2, 3})
        for p in range(PARTITIONS):
            offline = replication.status(node, TOPIC, p)
            assert (offline["health"], offline["role"]) == ("Offline", "Follower"), offline
            assert "is gone" in offline["reason"], offline
        assert replication.state(fab, TOPIC, led).leader != 1
        assert_quiet(node, mark, "a deleted data directory")
        cluster.restart(1)  # its replicas start empty: they copy the partitions again and rejoin
        wait_isrs(replication, fab, {1, 2, 3})


def test_a_replica_that_cannot_take_its_role_is_reported_offline_and_rejoins_once_it_can(
        node_cluster, replication) -> None:
    """A file where a partition's directory goes on one node (an operator's mistake, not a disk failure): that
    replica is reported offline, so acks=all writes do not wait on it for replica.lag.time.max.ms (ten minutes
    here), the node goes on serving its other partitions, and once the file is removed the replica takes its role
    with the next heartbeat and rejoins the ISR."""
    cluster = node_cluster(nodes=3, node_extra=NODE_EXTRA)
    node = cluster.nodes[2]
    blocked = os.path.join(node.data_dir, "x", "0")
    os.makedirs(os.path.dirname(blocked))
    with open(blocked, "w") as handle:
        handle.write("not a partition directory")
    with fabric.connect(replication.client_url(cluster)) as fab:
        mark = len(node.log())
        for topic in ("x", "y"):
            fab.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        replication.wait_isr(fab, "x", {1, 3})
        refused = replication.status(node, "x")
        assert refused["health"] == "Offline" and "cannot take its role" in refused["reason"], refused
        with fab.producer(acks="all", linger_ms=0) as producer:
            for topic in ("x", "y"):
                assert producer.send(topic, b"v").get(timeout=60).offset == 0
        replication.wait_in_sync(fab, cluster.nodes, "y")
        assert_quiet(node, mark, "a file where a partition's directory goes")
        os.remove(blocked)
        replication.wait_in_sync(fab, cluster.nodes, "x")
        assert replication.status(node, "x")["health"] == "Healthy"
        replication.assert_identical_replicas(cluster.nodes, "x")
