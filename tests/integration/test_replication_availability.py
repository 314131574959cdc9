"""Availability and durability of replicated partitions when replicas die (docs/replication.md, step 4), with
real coordinator, node and ZooKeeper processes and every record's fate checked by the history checker.

- min.insync.replicas: with two of three replicas SIGKILLed, acks=all is refused (NotEnoughReplicasError) within
  the producer's delivery timeout while acks=1 still lands on the leader; the restarted followers catch up, rejoin
  the ISR and acks=all works again, nothing acknowledged lost.
- The whole ISR down: the partition is offline (describe, `--unavailable-partitions`, producers told so) until an
  ISR member returns; a returning out-of-sync replica does not lead. With unclean.leader.election.enable it does:
  the controller warns, writes continue, exactly the records acknowledged after it left the ISR are lost, and the
  old leader truncates its divergent records when it rejoins.
- A follower whose data directory is wiped (a replaced disk) rebuilds from the leader, byte for byte, and
  rejoins the ISR, and only once it holds the log (KIP-903: not on the strength of its former incarnation's
  progress).
- Controller failover on ZooKeeper: with the active coordinator SIGKILLed (or SIGSTOPped, a zombie) as a node dies,
  the standby takes over, moves the dead node's partitions to new leaders, and every partition state written since
  carries its controller epoch; acks=all writes go on throughout.

Every wait is on a condition with a generous deadline (the machine may be loaded); a node is declared dead
NodeCluster.SESSION_MS after its last heartbeat. The waits, the recorded producers and writers, the final reads and
the comparison of replicas on disk are the `replication` fixture's (tests/replication_kit.py).
"""
from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

import fabric
from fabric.common.errors import LeaderNotAvailableError, NotEnoughReplicasError

pytestmark = pytest.mark.slow


# -- the tests ------------------------------------------------------------------------------------------------
def test_min_insync_replicas_refuses_acks_all_while_followers_are_down(node_cluster, history, fabric_cli,
                                                                      replication) -> None:
    """Kafka's case: RF 3, min.insync.replicas 2, both followers down. acks=all is refused without writing
    (NotEnoughReplicasError, retried until delivery_timeout_ms); acks=1 is written to the leader, but the high
    watermark stays until the ISR is back to min.insync.replicas (KIP-966). The followers return, catch up and
    rejoin; nothing acknowledged is lost, nothing refused appears."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    values = replication.values
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("mir", replication_factor=3, config={"min.insync.replicas": "2"})
        leader = replication.described(fab, "mir").leader
        followers = {1, 2, 3} - {leader}
        with replication.sender(fab.producer(acks="all"), recorder, "mir") as w:
            assert w.send_all(values("all-before", 10)) == list(range(10))
        for n in followers:
            cluster.nodes[n].kill()
        described = replication.wait_isr(fab, "mir", {leader})
        assert (described.leader, described.end_offset) == (leader, 10)
        shown = fabric_cli("topics", "describe", "mir", "--under-replicated-partitions", "--format", "json",
                           "--url", cluster.url)
        assert [(p["partition"], p["isr"]) for t in json.loads(shown.stdout) for p in t["partitions"]] == [
            (0, [leader])], shown.stderr

        with replication.sender(fab.producer(acks="all", delivery_timeout_ms=5000, request_timeout_ms=2000,
                                             retry_backoff_ms=100), recorder, "mir") as w:
            began = time.monotonic()
            with pytest.raises(NotEnoughReplicasError, match="below its min.insync.replicas 2") as refused:
                w.send(b"all-refused")
            took = time.monotonic() - began
        assert type(refused.value) is NotEnoughReplicasError  # refused before the append, not after it
        assert took < 5 + 10, f"refused after {took:.1f} s, past delivery_timeout_ms (5 s) and slack"
        with replication.sender(fab.producer(acks="1"), recorder, "mir") as w:
            assert w.send_all(values("one-alone", 5)) == list(range(10, 15))
        assert replication.status(cluster.nodes[leader], "mir")["log_end"] == 15
        # the ISR is below min.insync.replicas: the high watermark does not advance
        assert replication.eventually(lambda: replication.led(fab, "mir"), "the leader to answer").end_offset == 10

        for n in followers:
            cluster.restart(n)
        assert replication.wait_in_sync(fab, cluster.nodes, "mir") == 15
        with replication.sender(fab.producer(acks="all"), recorder, "mir") as w:
            assert w.send_all(values("all-after", 5)) == list(range(15, 20))
        replication.wait_in_sync(fab, cluster.nodes, "mir")
        read = replication.final_read(fab, recorder, "mir")
    assert b"all-refused" not in [v for _, v in read]
    assert history.check(dense=True).assert_valid().sends == {"ok": 20, "fail": 1}


def lose_the_whole_isr(replication: Any, cluster: Any, fab: fabric.Fabric, recorder: Any, topic: str, unclean: bool
                       ) -> tuple[int, int, int]:
    """RF 3 topic `topic` (one partition). Records "early" are written with every replica in sync; then node X,
    a follower, is SIGKILLed and leaves the ISR; records "late" are written with the other two; then those two
    die: the partition goes offline (describe, the CLI, producers). Returns (X, the old leader, the one ISR
    member the controller kept)."""
    fab.create_topic(topic, replication_factor=3,
                     config={"unclean.leader.election.enable": "true"} if unclean else {})
    leader = replication.described(fab, topic).leader
    x = min({1, 2, 3} - {leader})
    with replication.sender(fab.producer(acks="all"), recorder, topic) as w:
        assert w.send_all(replication.values(f"{topic}-early", 10)) == list(range(10))
        cluster.nodes[x].kill()
        replication.wait_isr(fab, topic, {1, 2, 3} - {x})
        assert w.send_all(replication.values(f"{topic}-late", 6)) == list(range(10, 16))
    for n in {1, 2, 3} - {x}:
        cluster.nodes[n].kill()
    offline = replication.wait_offline(fab, topic)
    assert len(offline.isr) == 1 and x not in offline.isr, offline  # the last member to die keeps the log
    assert offline.end_offset == -1  # unknown while offline
    with replication.sender(fab.producer(retries=0, request_timeout_ms=15_000), recorder, topic) as w:  # one attempt
        with pytest.raises(LeaderNotAvailableError, match=f"{topic}-0 is offline"):
            w.send(f"{topic}-refused-offline".encode())
    return x, leader, offline.isr[0]


def unavailable(fabric_cli: Callable[..., Any], url: str) -> list[tuple[str, int]]:
    """What `fabric topics describe --unavailable-partitions --format json` lists."""
    shown = fabric_cli("topics", "describe", "--unavailable-partitions", "--format", "json", "--url", url)
    assert shown.returncode == 0, shown.stderr
    return [(t["name"], p["partition"]) for t in json.loads(shown.stdout) for p in t["partitions"]]


def test_a_partition_with_its_whole_isr_down_is_offline_until_an_isr_member_returns(node_cluster, history,
                                                                                   fabric_cli, replication) -> None:
    """Clean election only: a returning out-of-sync replica does not lead (it lacks acknowledged records); the
    returning ISR member does, under a new leader epoch, with every acknowledged record; the others catch up."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        x, _, last = lose_the_whole_isr(replication, cluster, fab, recorder, "whole", unclean=False)
        assert unavailable(fabric_cli, cluster.url) == [("whole", 0)]
        offline_epoch = replication.state(fab, "whole").leader_epoch

        cluster.restart(x)  # registered: the controller has decided on it
        assert replication.described(fab, "whole").leader is None
        assert unavailable(fabric_cli, cluster.url) == [("whole", 0)]
        cluster.restart(last)
        back = replication.eventually(lambda: (d := replication.led(fab, "whole")) and d.leader == last and d,
                                      "the ISR member to lead")
        assert back.leader_epoch > offline_epoch and back.end_offset == 16
        assert unavailable(fabric_cli, cluster.url) == []
        with replication.sender(fab.producer(acks="all"), recorder, "whole") as w:
            assert w.send_all(replication.values("whole-back", 4)) == list(range(16, 20))
        for n in set(cluster.nodes) - {x, last}:
            cluster.restart(n)
        replication.wait_in_sync(fab, cluster.nodes, "whole")
        replication.final_read(fab, recorder, "whole")
    assert history.check(dense=True).assert_valid().sends == {"ok": 20, "fail": 1}


def test_unclean_election_elects_an_out_of_sync_replica_and_reports_what_is_lost(node_cluster, history,
                                                                                replication) -> None:
    """unclean.leader.election.enable=true: the out-of-sync replica X, back alone, leads at once, and the
    controller warns that records may be lost; writes go on. The history checker reports exactly the records
    acknowledged after X left the ISR as lost, and nothing else but their offsets now holding X's new records.
    The old leader, back, truncates those records (KIP-101) and copies X's log byte for byte."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        x, old_leader, _ = lose_the_whole_isr(replication, cluster, fab, recorder, "unclean", unclean=True)
        offline_epoch = replication.state(fab, "unclean").leader_epoch

        cluster.restart(x)
        elected = replication.eventually(lambda: (d := replication.led(fab, "unclean")) and d.leader == x and d,
                                         "X to be elected")
        assert (elected.isr, elected.end_offset) == ((x,), 10) and elected.leader_epoch > offline_epoch
        with open(cluster.coordinator.log_path, errors="replace") as log:
            warnings = [line for line in log if "WARNING" in line and "unclean election" in line]
        assert len(warnings) == 1 and f"unclean election of node {x} " in warnings[0], warnings
        assert "may be lost" in warnings[0]
        with replication.sender(fab.producer(acks="all"), recorder, "unclean") as w:
            assert w.send_all(replication.values("unclean-after", 4)) == list(range(10, 14))

        cluster.restart(old_leader)
        in_sync = {n: cluster.nodes[n] for n in (x, old_leader)}
        replication.wait_in_sync(fab, in_sync, "unclean")
        replication.final_read(fab, recorder, "unclean")
    assert replication.assert_identical_replicas(in_sync, "unclean") == 14

    result = history.check(dense=True)
    late = {v.decode() for v in replication.values("unclean-late", 6)}
    assert {lost.value for lost in result.lost} == late, result.summary()
    # X's new records took the lost records' first offsets
    assert sorted((io.partition, io.offset) for io in result.inconsistent_offsets) == [
        (("unclean", 0), o) for o in range(10, 14)], result.summary()
    assert not (result.duplicates or result.wrong_offsets or result.phantoms or result.gaps), result.summary()


def test_a_follower_with_a_wiped_data_directory_rebuilds_from_the_leader(node_cluster, history, storage,
                                                                         replication) -> None:
    """A replaced disk: the follower is stopped, its whole data directory (node.id file included) removed, and it
    starts again at once on an empty --data, likely before its session lapsed (its new registration then counts
    as a bounce, taking it out of the ISR). It copies the leader's log from offset 0 (several segments), rejoins
    the ISR once caught up, and holds the leader's frames byte for byte; acks=all writes go on meanwhile."""
    cluster = node_cluster(nodes=3)
    recorder = history.recorder("writer")
    values = replication.values
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("wiped", replication_factor=3, config={"min.insync.replicas": "2",
                                                               "segment.bytes": "2048"})
        leader = replication.described(fab, "wiped").leader
        follower = min({1, 2, 3} - {leader})
        with replication.sender(fab.producer(acks="all"), recorder, "wiped") as w:
            w.send_all(values("wiped-before", 30))
            cluster.nodes[follower].stop()
            replication.wipe(cluster.nodes[follower])
            cluster.restart(follower)
            assert w.send_all(values("wiped-while-copying", 10)) == list(range(30, 40))
            assert replication.wait_in_sync(fab, cluster.nodes, "wiped") == 40
            assert replication.status(cluster.nodes[follower], "wiped")["role"] == "Follower"
            assert w.send_all(values("wiped-after", 5)) == list(range(40, 45))
        replication.wait_in_sync(fab, cluster.nodes, "wiped")
        replication.final_read(fab, recorder, "wiped")
    assert replication.assert_identical_replicas(cluster.nodes, "wiped", 0, recorder) == 45
    # the copy spans segments
    assert len(storage.data_files(replication.partition_dir(cluster.nodes[leader], "wiped"))) > 2
    history.check(dense=True).assert_valid()


def test_a_wiped_follower_rejoins_the_isr_only_once_it_holds_the_log(node_cluster, history, replication) -> None:
    """KIP-903's case: a follower's disk is replaced while it is down, long enough to have left the ISR, and
    nothing is written meanwhile. Its leader must not take the log end of the follower's previous incarnation
    for its progress: the follower may rejoin the ISR only once it holds every record below the high watermark,
    else a clean election could make the empty replica leader and lose acknowledged records. Followers fetch one
    frame at a time here, so catching up takes a while, and the node hosts many other partitions, which it opens
    before it fetches this one: its leader decides on the ISR a few times between its registration and its
    first fetch."""
    cluster = node_cluster(nodes=3, node_extra=("--replica-fetch-max-bytes", "1"))
    recorder = history.recorder("writer")
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("a-padding", partitions=300, replication_factor=1)
        fab.create_topic("rejoin", replication_factor=3)
        leader = replication.described(fab, "rejoin").leader
        follower = min({1, 2, 3} - {leader})
        with replication.sender(fab.producer(acks="all"), recorder, "rejoin") as w:
            w.send_all(replication.values("rejoin", 400))
        cluster.nodes[follower].kill()
        replication.wait_isr(fab, "rejoin", {1, 2, 3} - {follower})
        replication.wipe(cluster.nodes[follower])
        cluster.restart(follower)

        def rejoined() -> bool:
            described = replication.led(fab, "rejoin")
            if described is None or follower not in described.isr:
                return False
            holds = replication.status(cluster.nodes[follower], "rejoin").get("log_end", 0)  # read after the ISR
            assert holds >= described.end_offset, (
                f"node {follower} is in the ISR {list(described.isr)} holding {holds} of the "
                f"{described.end_offset} records below the high watermark")
            return True
        replication.eventually(rejoined, f"node {follower} to rejoin the ISR")
        replication.wait_in_sync(fab, cluster.nodes, "rejoin")
        replication.final_read(fab, recorder, "rejoin")
    history.check(dense=True).assert_valid()


@pytest.mark.zookeeper
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "paused"])
def test_a_controller_failover_while_a_node_dies_moves_its_partitions_under_the_new_controller(
        node_cluster, history, zk_url, tmp_path, the_active, how, replication) -> None:
    """Two coordinator instances on ZooKeeper. The active one is SIGKILLed (or SIGSTOPped: a zombie) just after a
    data node is SIGKILLed: the standby wins the election with a higher controller epoch, gives the nodes a
    session, declares the dead node dead and elects new leaders for its partitions (higher leader epochs). Every
    partition state written after the failover carries the new controller epoch, the surviving nodes follow it,
    and acks=all writes to every partition go on across it, nothing lost or duplicated. The zombie, resumed
    with every node lease it held long lapsed, learns it was deposed and changes nothing: its writes are fenced
    by /controller_epoch, the nodes ignore its views."""
    config = tmp_path / "zk.properties"
    config.write_text(f"coordinator.store={zk_url}\nzookeeper.session.timeout.ms=2000\n")
    cluster = node_cluster(nodes=3, coordinator_extra=("--config", str(config)), instances=2)
    # clients give up on an instance that does not answer (the paused one) after 10 s, not 30, then try the
    # other; a writer's send timed out meanwhile is merely of unknown outcome
    url = replication.client_url(cluster)
    eventually = replication.eventually
    with replication.zk_client(zk_url) as zk, fabric.connect(url) as fab:
        fab.create_topic("failover", partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
        first = eventually(lambda: the_active(fab), "an active coordinator")
        deposed = next(c for c in cluster.coordinators if c.address == first.instance)
        before = {p.partition: p for p in fab.describe_topic("failover").partitions}
        victim = before[0].leader
        moved = sorted(p for p, d in before.items() if d.leader == victim)
        survivors = {n: node for n, node in cluster.nodes.items() if n != victim}
        with replication.writers(url, history, "failover", 3) as writers:
            try:
                for p in range(3):
                    writers.wait_acked(p, 5, f"writes to partition {p}")
                cluster.nodes[victim].kill()
                os.kill(deposed.process.pid, how)
                at_failover = replication.zk_states(zk, "failover")  # the deposed controller decides nothing now

                active = eventually(lambda: (a := the_active(fab)) and a.instance != first.instance and a,
                                    "the standby to take over")
                assert active.epoch > first.epoch
                assert int(zk.get("/controller_epoch")[0]) == active.epoch
                eventually(lambda: {node.status()["controller_epoch"] for node in survivors.values()}
                           == {active.epoch}, "the surviving nodes to heartbeat to the new controller")

                def moved_on() -> bool:
                    now = {p.partition: p for p in fab.describe_topic("failover").partitions}
                    return all(now[p].leader not in (None, victim) and now[p].leader_epoch > before[p].leader_epoch
                               for p in moved) and all(victim not in d.isr for d in now.values())
                eventually(moved_on, f"node {victim}'s partitions {moved} to get new leaders and ISRs without it")
                for p in range(3):  # acks=all goes on everywhere, the moved partitions at their new leaders
                    writers.wait_acked(p, 5, f"writes to partition {p} after the failover")
                if how == signal.SIGSTOP:
                    os.kill(deposed.process.pid, signal.SIGCONT)
                    eventually(lambda: not deposed.status().active, "the resumed instance to know it was deposed")
                    for p in range(3):
                        writers.wait_acked(p, 5, f"writes to partition {p} with the deposed instance back")
            finally:
                os.kill(deposed.process.pid, signal.SIGCONT)  # a paused instance must be able to stop after the test

        states = replication.zk_states(zk, "failover")
        for p, state in states.items():
            if state["partition_epoch"] != at_failover[p]["partition_epoch"]:
                assert state["controller_epoch"] == active.epoch, (p, state, at_failover[p])
        for p in moved:
            assert states[p]["leader"] != victim and states[p]["controller_epoch"] == active.epoch, states[p]
            assert states[p]["leader_epoch"] > at_failover[p]["leader_epoch"]
        assert {node.status()["controller_epoch"] for node in survivors.values()} == {active.epoch}
        described = fab.cluster.describe_cluster(refresh=True)
        assert described.controller_epoch == active.epoch
        assert {n.id for n in described.nodes if n.alive} == set(survivors)
        reader = history.recorder("reader")
        for p in range(3):
            replication.wait_in_sync(fab, survivors, "failover", p)
            replication.final_read(fab, reader, "failover", p)
    result = history.check(dense=True).assert_valid()
    assert result.sends["ok"] == sum(writers.acked) >= 30, result.summary()
