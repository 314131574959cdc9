"""Replication on a healthy cluster (real coordinator and node processes, replication factor 3): every replica
copies the leader's log and the high watermark reaches all of them; consumers read below the high watermark and
long-poll at its end (one fetch, held by the leader until a record is committed). A cluster serving TLS does all
of it, and its offset commits, over TLS only."""
from __future__ import annotations

import threading

import pyarrow.flight as flight
import pytest

import fabric
from fabric.client.consumer import Consumer
from fabric.common.errors import CoordinatorUnavailableError
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.waiting import wait_for
from fabric.server import wire

SETTLE_S = 60  # a loaded machine may take a while to answer, elect or copy


def test_every_replica_holds_the_log_and_the_high_watermark(shared_cluster, replication) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("copied", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer(linger_ms=0) as producer:
            for i in range(50):
                producer.send("copied", b"v%d" % i, partition=i % 2).result(60)
        described = fab.describe_topic("copied").partitions
        assert [p.end_offset for p in described] == [25, 25]  # acks=all: committed before acknowledged
        assert all(sorted(p.isr) == [1, 2, 3] == sorted(p.replicas) for p in described)
        for p in (0, 1):  # followers learn the high watermark on their next fetch
            assert replication.wait_in_sync(fab, shared_cluster.nodes, "copied", p) == 25
        for node_id, node in shared_cluster.nodes.items():  # one fetcher per leader node, for all it leads here
            fetchers = {f["leader"]: f["partitions"] for f in node.status()["fetchers"]}
            assert node_id not in fetchers and len(fetchers) <= len(shared_cluster.nodes) - 1
            assert all(["copied", p.partition] in fetchers[p.leader] for p in described if p.leader != node_id)


def test_followers_fetch_in_sessions_and_open_a_new_one_when_theirs_is_taken(shared_cluster, replication) -> None:
    """KIP-227 fetch sessions: each follower's fetcher holds a session at its leader (the node's status shows its
    id, and the leader counts the sessions it holds). When another caller opens a session under the follower's id
    (a raw replica_fetch here; a restarted leader forgets every session the same way), the follower's next fetch
    is refused (FetchSessionIdNotFoundError): it opens a new session and goes on copying, so a write that needs it
    (min.insync.replicas 3) is acknowledged and every replica holds it."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("sessioned", partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
        with fab.producer(linger_ms=0) as producer:
            producer.send("sessioned", b"a").result(SETTLE_S)
        leader = fab.describe_topic("sessioned").partitions[0].leader
        follower = next(n for n in sorted(shared_cluster.nodes) if n != leader)

        def session() -> int:
            return next((f["session"] for f in shared_cluster.nodes[follower].status()["fetchers"]
                         if f["leader"] == leader), 0)
        replication.eventually(lambda: session() != 0, "the follower's fetch session at its leader")
        taken = session()
        assert shared_cluster.nodes[leader].status()["fetch_sessions"] >= 2  # (one per follower node)
        raw = ProtocolConnection(shared_cluster.nodes[leader].status()["protocol_address"], None, None, SETTLE_S,
                                 wire.exception_of)
        try:
            raw.call("replica_fetch", {"replica_id": follower, "partitions": [], "max_wait_ms": 0,
                                       "session": {"id": 0, "epoch": 0}})
        finally:
            raw.close()
        replication.eventually(lambda: session() not in (0, taken), "the follower's new fetch session")
        with fab.producer(linger_ms=0) as producer:
            producer.send("sessioned", b"b").result(SETTLE_S)
        assert replication.wait_in_sync(fab, shared_cluster.nodes, "sessioned") == 2


def test_a_consumer_long_polls_the_leader(shared_cluster, flaky_cluster, replication) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("polled", partitions=1, replication_factor=3)
        flaky = flaky_cluster(fab.cluster)
        consumer = Consumer(flaky, auto_offset_reset="earliest", fetch_max_wait_ms=20_000)
        consumer.assign([("polled", 0)])

        def append_once_held() -> None:
            replication.eventually(lambda: flaky.calls["fetch"] >= 2, "the consumer's long-polling fetch")
            with fab.producer(linger_ms=0) as producer:
                producer.send("polled", b"x").result(60)
        writer = threading.Thread(target=append_once_held)
        writer.start()
        assert [r.value for r in consumer.poll(timeout=120)] == [b"x"]
        writer.join(60)
        assert flaky.calls["fetch"] == 2  # one empty pass, then one fetch the leader held until x was committed


def test_a_consumer_with_a_rack_reads_from_a_follower_there(node_cluster, history, replication) -> None:
    """KIP-392: with the leader paused (SIGSTOP), a consumer whose client_rack is a follower's rack still reads
    every committed record, from that follower. Sessions of 60 s keep the controller from moving the leadership
    meanwhile, which the unchanged leader epoch confirms."""
    cluster = node_cluster(racks=("a", "b", "c"), node_extra=("--session-timeout-ms", "60000"),
                           coordinator_extra=("--node-session-timeout-ms", "60000"))
    recorder = history.recorder("producer")
    sent = replication.values("v", 30)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("racked", partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
        with replication.sender(fab.producer(linger_ms=0), recorder, "racked") as sender:
            assert sender.send_all(sent) == list(range(30))
        before = replication.state(fab, "racked")
        follower = next(r for r in before.isr if r != before.leader)
        replication.eventually(lambda: [replication.status(cluster.nodes[follower], "racked").get(k)
                                        for k in ("log_end", "high_watermark")] == [30, 30],
                               f"node {follower} has every record and the high watermark")
        consumer = fab.consumer("racked", auto_offset_reset="earliest", client_rack="abc"[follower - 1])
        assert consumer.position("racked", 0) == 0  # the start offset comes from the leader, as in Kafka
        replication.pause(cluster.nodes[before.leader])
        try:
            seen: list[tuple[int, bytes]] = []
            while len(seen) < 30:
                seen += [(r.offset, r.value) for r in consumer.poll(timeout=60)]
            consumer.close()
            after = replication.state(fab, "racked")
        finally:
            replication.resume(cluster.nodes[before.leader])
        assert after.leader_epoch == before.leader_epoch  # the leader never changed: the follower served it all
        assert [v for _, v in seen] == sent
        recorder.read(0, seen, end=30, topic="racked", source=f"node {follower}, a follower")
    history.check(dense=True).assert_valid()


def test_a_held_acks_all_produce_lets_the_partitions_next_produce_append(node_cluster, replication) -> None:
    """The leader holds an acks=all produce's answer without holding the partition: with both followers SIGSTOPped
    (and kept in the ISR), a second producer of the same client, on the same connection, still appends behind the
    first; once the followers resume, both are acknowledged, in order. (Served one at a time, the second waited
    for the first's replicas before it could append.)"""
    cluster = node_cluster(nodes=3, node_extra=("--replica-lag-time-max-ms", "600000"))
    with fabric.connect(f"{cluster.url}?timeout_ms=300000") as fab:
        fab.create_topic("held", replication_factor=3, config={"min.insync.replicas": "2"})
        leader = cluster.nodes[replication.described(fab, "held").leader]
        followers = [node for node in cluster.nodes.values() if node is not leader]

        def log_end() -> int:
            return next(int(r["log_end"]) for r in leader.status()["replicas"] if r["topic"] == "held")
        slow = dict(linger_ms=0, request_timeout_ms=240_000, delivery_timeout_ms=240_000)
        with fab.producer(**slow) as first, fab.producer(**slow) as second:
            assert first.send("held", b"warm").result(SETTLE_S).offset == 0
            replication.pause(*followers)
            answers: dict[str, int] = {}
            try:
                for name, producer, end in (("a", first, 2), ("b", second, 3)):
                    thread = threading.Thread(target=lambda p=producer, n=name: answers.__setitem__(
                        n, p.send("held", n.encode()).result(SETTLE_S * 4).offset), daemon=True)
                    thread.start()
                    wait_for(lambda e=end: log_end() == e, SETTLE_S, f"{name} appended at the leader")
                assert answers == {}  # neither is acknowledged: the followers have neither
            finally:
                replication.resume(*followers)
            wait_for(lambda: answers == {"a": 1, "b": 2}, SETTLE_S, "both acknowledged")


def test_a_tls_cluster_replicates_and_commits_over_tls_only(node_cluster, tls_files, replication, drain,
                                                           monkeypatch) -> None:
    """Every process serves TLS only and trusts the cluster's certificate ($FABRIC_TLS_CA): the nodes register and
    heartbeat, followers fetch from the leader, the coordinator writes the replicated offsets topic on the nodes,
    and a client produces, consumes and commits, all over TLS; a plaintext call to any of them is refused."""
    cert, key = tls_files
    monkeypatch.setenv("FABRIC_TLS_CA", cert)
    cluster = node_cluster(tls=(cert, key), coordinator_extra=("--offsets-topic-replication-factor", "3"))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("sealed", partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
        with fab.producer(linger_ms=0) as producer:  # acks=all with all 3 in sync: every follower fetched it
            assert [producer.send("sealed", b"v%d" % i).result(60).offset for i in range(20)] == list(range(20))
        assert replication.wait_in_sync(fab, cluster.nodes, "sealed") == 20
        consumer = fab.consumer("sealed", group_id="sealers", auto_offset_reset="earliest")
        assert [r.value for r in drain(consumer, 20, timeout=60)] == [b"v%d" % i for i in range(20)]
        consumer.commit()
        consumer.close()
        assert {tp: c.offset for tp, c in fab.cluster.coordinator.committed("sealers").items()} == {("sealed", 0): 20}
        for offset in range(10):  # sent from the coordinator's loop once its connection to the leader is open
            fab.cluster.coordinator.commit_offsets("sealers", {("sealed", 0): offset})
        assert fab.cluster.coordinator.committed("sealers")[("sealed", 0)].offset == 9
    with fabric.connect(f"fabric://{cluster.coordinator.address}?timeout_ms=1500") as plaintext:
        with pytest.raises(CoordinatorUnavailableError):
            plaintext.list_topics()
    for node in cluster.nodes.values():
        with flight.connect(f"grpc+tcp://{node.address}") as client, pytest.raises(flight.FlightError):
            list(client.do_action(flight.Action("status", b"{}"), flight.FlightCallOptions(timeout=5)))
