"""Replication on a healthy cluster (real coordinator and node processes, replication factor 3): every replica
copies the leader's log and the high watermark reaches all of them; consumers read below the high watermark and
long-poll at its end (one fetch, held by the leader until a record is committed)."""
from __future__ import annotations

import threading

import fabric
from fabric.client.consumer import Consumer
from fabric.common.waiting import wait_for

SETTLE_S = 60


def replica_view(cluster, topic: str, partition: int) -> dict[int, tuple[int, int]]:
    """(log end, high watermark) of the partition on every node, from the nodes' status."""
    out = {}
    for node_id, node in cluster.nodes.items():
        for r in node.status()["replicas"]:
            if (r["topic"], r["partition"]) == (topic, partition):
                out[node_id] = (r["log_end"], r["high_watermark"])
    return out


def test_every_replica_holds_the_log_and_the_high_watermark(shared_cluster) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("copied", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer(linger_ms=0) as producer:
            for i in range(50):
                producer.send("copied", b"v%d" % i, partition=i % 2).result(60)
        described = fab.describe_topic("copied").partitions
        assert [p.end_offset for p in described] == [25, 25]  # acks=all: committed before acknowledged
        assert all(sorted(p.isr) == [1, 2, 3] == sorted(p.replicas) for p in described)
        for p in (0, 1):  # followers learn the high watermark on their next fetch
            wait_for(lambda p=p: set(replica_view(shared_cluster, "copied", p).values()) == {(25, 25)}, SETTLE_S,
                     f"every replica of copied-{p} at log end and high watermark 25")


def test_a_consumer_long_polls_the_leader(shared_cluster, flaky_cluster) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("polled", partitions=1, replication_factor=3)
        flaky = flaky_cluster(fab.cluster)
        consumer = Consumer(flaky, auto_offset_reset="earliest", fetch_max_wait_ms=20_000)
        consumer.assign([("polled", 0)])

        def append_once_held() -> None:
            wait_for(lambda: flaky.calls["fetch"] >= 2, SETTLE_S, "the consumer's long-polling fetch")
            with fab.producer(linger_ms=0) as producer:
                producer.send("polled", b"x").result(60)
        writer = threading.Thread(target=append_once_held)
        writer.start()
        assert [r.value for r in consumer.poll(timeout=120)] == [b"x"]
        writer.join(60)
        assert flaky.calls["fetch"] == 2  # one empty pass, then one fetch the leader held until x was committed


def test_a_consumer_with_a_rack_reads_from_a_follower_there(node_cluster, history) -> None:
    """KIP-392: with the leader paused (SIGSTOP), a consumer whose client_rack is a follower's rack still reads
    every committed record, from that follower. Sessions of 60 s keep the controller from moving the leadership
    meanwhile, which the unchanged leader epoch confirms."""
    cluster = node_cluster(racks=("a", "b", "c"), node_extra=("--session-timeout-ms", "60000"),
                           coordinator_extra=("--node-session-timeout-ms", "60000"))
    recorder = history.recorder("producer")
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("racked", partitions=1, replication_factor=3, config={"min.insync.replicas": "3"})
        with fab.producer(linger_ms=0) as producer:
            for i in range(30):
                recorder.invoke(b"v%d" % i, 0)
                recorder.ok(b"v%d" % i, 0, producer.send("racked", b"v%d" % i, partition=0).result(60).offset)
        before = fab.cluster.describe_cluster(refresh=True).partitions[("racked", 0)].state
        follower = next(r for r in before.isr if r != before.leader)
        wait_for(lambda: replica_view(cluster, "racked", 0)[follower] == (30, 30), SETTLE_S,
                 f"node {follower} has every record and the high watermark")
        consumer = fab.consumer("racked", auto_offset_reset="earliest", client_rack="abc"[follower - 1])
        assert consumer.position("racked", 0) == 0  # the start offset comes from the leader, as in Kafka
        cluster.nodes[before.leader].pause()
        try:
            seen: list[tuple[int, bytes]] = []
            while len(seen) < 30:
                seen += [(r.offset, r.value) for r in consumer.poll(timeout=60)]
            consumer.close()
            after = fab.cluster.describe_cluster(refresh=True).partitions[("racked", 0)].state
        finally:
            cluster.nodes[before.leader].resume()
        assert after.leader_epoch == before.leader_epoch  # the leader never changed: the follower served it all
        assert [v for _, v in seen] == [b"v%d" % i for i in range(30)]
        recorder.read(0, seen)
    history.check(dense=True).assert_valid()
