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


def test_the_preferred_replica_leads_again_after_it_rejoined(node_cluster, fabric_cli, history, replication) -> None:
    cluster = node_cluster()
    recorder = history.recorder("producer")
    sent = replication.values("v", 20)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("pref", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        first = replication.described(fab, "pref")
        preferred = first.replicas[0]
        assert first.leader == preferred
        with replication.sender(fab.producer(linger_ms=0), recorder, "pref") as sender:
            for i, value in enumerate(sent):
                sender.send(value)
                if i == 9:
                    cluster.nodes[preferred].kill()
                    replication.wait_elected(fab, "pref", 0, first)
        cluster.restart(preferred)
        replication.wait_isr(fab, "pref", {1, 2, 3})
        moved = replication.described(fab, "pref")
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
        read = replication.final_read(fab, recorder, "pref")  # from the preferred leader
        assert [v for _, v in read] == sent
    history.check(dense=True).assert_valid()


def test_a_partition_moves_to_other_nodes_and_keeps_every_record(node_cluster, fabric_cli, history,
                                                                 replication) -> None:
    """`fabric partitions reassign`: the dry run changes nothing; --execute adds node 4 as a follower that copies
    the log and joins the ISR, then the replicas become the target and the node that left deletes its copy;
    --verify says it is done. Records written before and during the move are all there, once."""
    cluster = node_cluster(nodes=4)
    recorder = history.recorder("producer")
    sent = replication.values("v", 60)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("moved", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        before = fab.partition_assignment("moved", 0)
        outside = next(n for n in (1, 2, 3, 4) if n not in before.assignment.replicas)
        leaving = before.assignment.replicas[-1]
        target = [outside, *before.assignment.replicas[:2]]
        replicas = ",".join(map(str, target))

        with replication.sender(fab.producer(linger_ms=0), recorder, "moved") as sender:
            sender.send_all(sent[:30])
            dry = fabric_cli("partitions", "reassign", "--topic", "moved", "--partition", "0", "--replicas",
                             replicas, "--url", cluster.url)
            assert dry.returncode == 0 and "dry run" in dry.stdout, dry.stderr
            assert fab.partition_assignment("moved", 0) == before
            started = fabric_cli("partitions", "reassign", "--topic", "moved", "--partition", "0", "--replicas",
                                 replicas, "--execute", "--url", cluster.url)
            assert started.returncode == 0 and "Started" in started.stdout, started.stderr
            sender.send_all(sent[30:])
            replication.eventually(lambda: fab.partition_assignment("moved", 0).assignment.replicas == tuple(target),
                                   f"moved-0 on {target}")
        done = fab.partition_assignment("moved", 0)
        assert not done.assignment.target and sorted(done.state.isr) == sorted(target)
        verified = fabric_cli("partitions", "reassign", "--topic", "moved", "--partition", "0", "--replicas",
                              replicas, "--verify", "--url", cluster.url)
        assert verified.returncode == 0 and "is complete" in verified.stdout, verified.stderr
        gone = replication.partition_dir(cluster.nodes[leaving], "moved")
        replication.eventually(lambda: not os.path.exists(gone), f"node {leaving} deleted its copy of moved-0")
        replication.final_read(fab, recorder, "moved")
    history.check(dense=True).assert_valid()
