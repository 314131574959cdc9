"""Replication under failures (docs/replication.md, step 4) as real processes: a coordinator running the controller
and three data nodes, topics of replication factor 3 with min.insync.replicas=2, and Jepsen-style histories.

- Leaders are SIGKILLed (and restarted) under a steady stream of acks=all writes: every acknowledged record
  survives exactly once at its offset, offsets stay dense, and every replica ends with the same frames.
- A SIGSTOPped leader is replaced under a higher leader epoch; once resumed it acknowledges nothing, is refused
  as a leader, and truncates the divergent tail it appended alone.
- KIP-101's scenario: two failovers in a row, each old leader holding an uncommitted tail at the same offsets,
  and the leader epochs (not the high watermark) decide what every replica keeps.

Every send is recorded in the history (tests/history_recorder.py) before and after it happens by the
`replication` kit's Sender, every value is unique, and the producers never retry (retries=0), so no value is
written twice on purpose: an acknowledged acks=all send is "ok" at its offset; a failed send is "fail" only when
it certainly wrote nothing (refused before the append, or the partition offline at the client) and "info"
otherwise (a NotLeaderError may come after the leader appended); an acks=1 send whose leader later fails is
"info" too, since such a record may legitimately be lost. An append made straight to one node (no routing) that
the node refuses as not its leader is "fail": it must never appear. At the end each partition is read from its
leader and from every node's log on disk, and the history is checked with dense offsets.

Timing: a killed or paused node is declared dead `NodeCluster.SESSION_MS` (6 s) after its last heartbeat, so
every wait here is on a condition (the kit's `eventually`) with a deadline of its SETTLE_S, never a sleep.
"""
from __future__ import annotations

import pytest

import fabric
from fabric.common.errors import FencedLeaderEpochError, NotLeaderError, RequestTimedOutError

TOPIC_CONFIG = {"min.insync.replicas": "2"}

pytestmark = pytest.mark.slow


# -- the tests ---------------------------------------------------------------------------------------------------
def test_leaders_killed_under_acks_all_writes_lose_no_acknowledged_record(node_cluster, history,
                                                                          replication) -> None:
    """Three rounds: SIGKILL the leader of a partition while a writer sends acks=all records to both partitions,
    wait for a new leader under a higher epoch and for acknowledgements from it, and for the killed node,
    restarted, to rejoin the ISR. Rounds 1 and 3 restart the node once the controller has declared it dead (its
    lease lapsed); round 2 restarts it at once, and its new registration tells the controller the old process
    died. A restarted node may come back with records it appended but never replicated, which it must truncate
    as it follows the new leader."""
    cluster = node_cluster(nodes=3)
    topic, partitions = "killed", 2
    recorder = history.recorder("test")
    url = replication.client_url(cluster)
    with fabric.connect(url) as fab:
        fab.create_topic(topic, partitions=partitions, replication_factor=3, config=TOPIC_CONFIG)
        with replication.writers(url, history, topic, partitions) as writers:
            for round_ in range(3):
                p = round_ % partitions
                writers.wait_acked(p, 10, f"acknowledged writes to {topic}-{p} before round {round_ + 1}")
                before = replication.state(fab, topic, p)
                victim = before.leader
                cluster.nodes[victim].kill()
                if round_ == 1:
                    cluster.restart(victim)
                after = replication.wait_elected(fab, topic, p, before)
                assert after.leader != victim and after.leader_epoch > before.leader_epoch
                if round_ != 1:  # (a restarted node may rejoin the ISR before the election is seen)
                    assert after.isr == tuple(r for r in before.isr if r != victim), after
                writers.wait_acked(p, 10, f"acks=all writes to {topic}-{p} acknowledged by node {after.leader}")
                if round_ != 1:
                    cluster.restart(victim)
                for q in range(partitions):
                    replication.wait_isr(fab, topic, set(cluster.nodes), q)
            writers.wait_acked(0, 5, "writes after the last round")
        ends = {p: replication.wait_in_sync(fab, cluster.nodes, topic, p) for p in range(partitions)}
        read = {p: replication.final_read(fab, recorder, topic, p) for p in range(partitions)}
    assert {p: len(records) for p, records in read.items()} == ends
    for p in range(partitions):
        replication.assert_identical_replicas(cluster.nodes, topic, p, recorder)
    result = history.check(dense=True).assert_valid()
    assert result.sends["ok"] >= 65 and result.reads == partitions * 4, result.summary()  # as the waits saw


def test_a_paused_leader_is_fenced_and_truncates_its_divergent_tail(node_cluster, history, raw, replication) -> None:
    """The divergent tail, built deterministically: with the writer paused and every replica caught up, SIGSTOP
    both followers, wait until the leader has heard no fetch from them for QUIET_MS (so none is pending at the
    leader, see the kit's wait_quiet), append 3 records with acks=1 to the leader alone (recorded as info), then
    SIGSTOP the leader and SIGCONT the followers. The controller declares the paused leader dead and elects a
    follower under a higher epoch; writes go on there. The old leader, resumed, acknowledges no acks=all append
    quoting its old epoch (it refuses it, or gives up waiting for followers that no longer fetch from it),
    refuses any append once it has learned it is a follower, truncates its 3 records (the new leader never had
    them) and ends with the same frames as the others."""
    cluster = node_cluster(nodes=3, node_extra=replication.FETCH_WAIT)
    topic = "paused"
    recorder = history.recorder("test")
    url = replication.client_url(cluster)
    with fabric.connect(url) as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        with replication.writers(url, history, topic, 1) as writer, \
                replication.sender(fab.producer(acks="1", retries=0, linger_ms=0), recorder, topic) as acks_1:
            writer.wait_acked(0, 20, "acknowledged writes before the pause")
            writer.pause()
            committed = replication.wait_in_sync(fab, cluster.nodes, topic)
            before = replication.state(fab, topic)
            old = cluster.nodes[before.leader]
            followers = [n for i, n in cluster.nodes.items() if i != before.leader]
            tail = replication.values("alone", 3)
            assert replication.append_alone(acks_1, old, followers, tail) == [committed, committed + 1, committed + 2]
            replication.pause(old)
            replication.resume(*followers)
            writer.resume()
            after = replication.wait_elected(fab, topic, 0, before)
            writer.wait_acked(0, 10, f"acks=all writes acknowledged by the new leader, node {after.leader}")

            replication.resume(old)
            recorder.invoke("zombie-all", 0, topic)
            with pytest.raises((NotLeaderError, FencedLeaderEpochError, RequestTimedOutError)) as refused:
                raw.append(old.address, topic, 0, before.leader_epoch, b"zombie-all", acks="all", timeout_ms=5000)
            recorder.info("zombie-all", refused.value)
            replication.eventually(lambda: replication.status(old, topic).get("role") == "Follower",
                                   f"node {old.node_id} to follow")
            recorder.invoke("zombie-1", 0, topic)
            with pytest.raises((NotLeaderError, FencedLeaderEpochError)) as refused:
                raw.append(old.address, topic, 0, before.leader_epoch, b"zombie-1", acks="1")
            recorder.fail("zombie-1", refused.value)
            writer.wait_acked(0, 10, "acks=all writes after the old leader is back")
        replication.wait_in_sync(fab, cluster.nodes, topic)
        read = replication.final_read(fab, recorder, topic)
    assert not {v for _, v in read} & {*tail, b"zombie-all"}, "the old leader's divergent tail survived"
    replication.assert_identical_replicas(cluster.nodes, topic, 0, recorder)
    result = history.check(dense=True).assert_valid()
    assert result.sends["ok"] >= 40, result.summary()


def test_two_fast_failovers_with_divergent_tails_leave_no_divergence(node_cluster, history, replication) -> None:
    """KIP-101's scenario, where truncating to the high watermark would leave replicas diverged. Every replica
    holds the committed records 0..X-1 (acks=all), then:
    1. A (the leader) appends 3 records at X.. with acks=1 while B and C are SIGSTOPped and quiet (wait_quiet);
       A is SIGKILLed and B, C resumed: the controller elects B under a new epoch.
    2. Once C follows B, B appends 2 other records at X.. with acks=1 while C is SIGSTOPped and quiet; B is
       SIGKILLed and C resumed: C, never having had either tail, is elected alone (ISR [C]).
    3. C appends 4 more records at X.. with acks=1. C stays leader to the end, so these are recorded "ok" at
       their offsets: nothing may drop them. A's and B's tails are recorded "info", since both leaders failed.
    4. A returns, then B: each truncates its tail where its own last epoch ends in C's log (X), copies C's
       records and rejoins the ISR; acks=all writes follow.
    replica.lag.time.max.ms is 60 s, so a paused follower stays in the ISR and remains electable."""
    cluster = node_cluster(nodes=3, node_extra=("--replica-lag-time-max-ms", "60000", *replication.FETCH_WAIT))
    topic = "kip101"
    recorder = history.recorder("test")
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        with replication.sender(fab.producer(acks="all", retries=0, linger_ms=0), recorder, topic) as acks_all, \
                replication.sender(fab.producer(acks="1", retries=0, linger_ms=0), recorder, topic) as acks_1:
            acks_all.send_all(replication.values("committed", 10))
            end = replication.wait_in_sync(fab, cluster.nodes, topic)
            first = replication.state(fab, topic)
            a = cluster.nodes[first.leader]
            others = [n for i, n in cluster.nodes.items() if i != first.leader]

            tail_a = replication.values("a", 3)
            at_a = replication.append_alone(acks_1, a, others, tail_a)
            a.kill()
            replication.resume(*others)
            second = replication.wait_elected(fab, topic, 0, first)
            b = cluster.nodes[second.leader]
            c = next(n for n in others if n is not b)
            assert replication.status(b, topic).get("log_end") == end, "B must not hold A's tail"

            replication.eventually(lambda: replication.follower(b, topic, 0, c.node_id).get("log_end") == end,
                                   f"node {c.node_id} to follow node {b.node_id}")
            tail_b = replication.values("b", 2)
            at_b = replication.append_alone(acks_1, b, [c], tail_b)
            b.kill()
            replication.resume(c)
            third = replication.wait_elected(fab, topic, 0, second)
            assert third.leader == c.node_id and third.isr == (c.node_id,), third
            kept = replication.values("c", 4)
            at_c = acks_1.send_all(kept)
            for offsets in (at_a, at_b, at_c):
                assert offsets == list(range(end, end + len(offsets))), offsets

            back = {c.node_id}
            for node in (a, b):
                cluster.restart(node.node_id)
                back.add(node.node_id)
                replication.wait_isr(fab, topic, back)
            acks_all.send_all(replication.values("after", 10))
        replication.wait_in_sync(fab, cluster.nodes, topic)
        read = replication.final_read(fab, recorder, topic)
    assert not {v for _, v in read} & {*tail_a, *tail_b}, "a failed leader's tail survived"
    assert [v for o, v in read if end <= o < end + 4] == kept
    replication.assert_identical_replicas(cluster.nodes, topic, 0, recorder)
    history.check(dense=True).assert_valid()
