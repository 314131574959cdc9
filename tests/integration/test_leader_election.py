"""Kafka's leader elections and reassignments on the replicated cluster (real coordinator and node processes):
after the preferred leader of a partition died and came back in sync, `fabric partitions elect-leaders
--preferred` makes it lead again under a new leader epoch, with every acknowledged record kept; an unclean
election is refused for a topic that does not enable it; `fabric partitions reassign` moves a partition to other
nodes while it is written."""
from __future__ import annotations

import json
import os

import pytest

import fabric
from fabric.common.errors import InvalidConfigError
from fabric.common.waiting import wait_for

SETTLE_S = 60  # a loaded machine may take a while past the session timeout to notice, decide and answer


def test_the_preferred_replica_leads_again_after_it_rejoined(node_cluster, fabric_cli, history) -> None:
    cluster = node_cluster()
    recorder = history.recorder("producer")
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("pref", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        first = fab.describe_topic("pref").partitions[0]
        preferred = first.replicas[0]
        assert first.leader == preferred
        with fab.producer(linger_ms=0) as producer:
            for i in range(20):
                recorder.invoke(b"v%d" % i, 0)
                meta = producer.send("pref", b"v%d" % i, partition=0).result(120)
                recorder.ok(b"v%d" % i, meta.partition, meta.offset)
                if i == 9:
                    cluster.nodes[preferred].kill()
                    wait_for(lambda: fab.describe_topic("pref").partitions[0].leader not in (None, preferred),
                             SETTLE_S, "a new leader elected")
        cluster.restart(preferred)
        wait_for(lambda: preferred in fab.describe_topic("pref").partitions[0].isr, SETTLE_S,
                 f"node {preferred} back in the ISR")
        moved = fab.describe_topic("pref").partitions[0]
        assert moved.leader != preferred
        shown = fabric_cli("partitions", "elect-leaders", "--preferred", "--format", "json", "--url", cluster.url)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout) == [{"topic": "pref", "partition": 0, "leader": preferred,
                                             "leader_epoch": moved.leader_epoch + 1, "isr": list(moved.isr)}]
        again = fabric_cli("partitions", "elect-leaders", "--url", cluster.url)
        assert again.returncode == 0 and "No leader changed" in again.stdout, again.stderr
        with pytest.raises(InvalidConfigError, match="does not enable unclean.leader.election.enable"):
            fab.elect_leaders("unclean", [("pref", 0)])
        refused = fabric_cli("partitions", "elect-leaders", "--partition", "0", "--url", cluster.url)
        assert refused.returncode == 1 and "--partition needs --topic" in refused.stderr
        values = []
        with fab.consumer("pref", auto_offset_reset="earliest") as consumer:  # read from the preferred leader
            while len(values) < 20:
                values += [(r.offset, r.value) for r in consumer.poll(timeout=30)]
        assert [v for _, v in values] == [b"v%d" % i for i in range(20)]
        recorder.read(0, values)
    history.check(dense=True).assert_valid()


def test_a_partition_moves_to_other_nodes_and_keeps_every_record(node_cluster, fabric_cli, history) -> None:
    """`fabric partitions reassign`: the dry run changes nothing; --execute adds node 4 as a follower that copies
    the log and joins the ISR, then the replicas become the target and the node that left deletes its copy;
    --verify says it is done. Records written before and during the move are all there, once."""
    cluster = node_cluster(nodes=4)
    recorder = history.recorder("producer")
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("moved", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        before = fab.partition_assignment("moved", 0)
        outside = next(n for n in (1, 2, 3, 4) if n not in before.assignment.replicas)
        leaving = before.assignment.replicas[-1]
        target = [outside, *before.assignment.replicas[:2]]
        replicas = ",".join(map(str, target))

        def send(i: int) -> None:
            recorder.invoke(b"v%d" % i, 0)
            recorder.ok(b"v%d" % i, 0, producer.send("moved", b"v%d" % i, partition=0).result(120).offset)
        with fab.producer(linger_ms=0) as producer:
            for i in range(30):
                send(i)
            dry = fabric_cli("partitions", "reassign", "--topic", "moved", "--partition", "0", "--replicas",
                             replicas, "--url", cluster.url)
            assert dry.returncode == 0 and "dry run" in dry.stdout, dry.stderr
            assert fab.partition_assignment("moved", 0) == before
            started = fabric_cli("partitions", "reassign", "--topic", "moved", "--partition", "0", "--replicas",
                                 replicas, "--execute", "--url", cluster.url)
            assert started.returncode == 0 and "Started" in started.stdout, started.stderr
            for i in range(30, 60):
                send(i)
            wait_for(lambda: fab.partition_assignment("moved", 0).assignment.replicas == tuple(target), SETTLE_S,
                     f"moved-0 on {target}")
        done = fab.partition_assignment("moved", 0)
        assert not done.assignment.target and sorted(done.state.isr) == sorted(target)
        verified = fabric_cli("partitions", "reassign", "--topic", "moved", "--partition", "0", "--replicas",
                              replicas, "--verify", "--url", cluster.url)
        assert verified.returncode == 0 and "is complete" in verified.stdout, verified.stderr
        gone = cluster.nodes[leaving].data_dir + "/moved/0"
        wait_for(lambda: not os.path.exists(gone), SETTLE_S, f"node {leaving} deleted its copy of moved-0")
        values = []
        with fab.consumer("moved", auto_offset_reset="earliest") as consumer:
            while len(values) < 60:
                values += [(r.offset, r.value) for r in consumer.poll(timeout=30)]
        recorder.read(0, values)
    history.check(dense=True).assert_valid()
