"""Prometheus metrics (--metrics-port) of a real cluster: a coordinator and three data nodes, each serving
/metrics on a port it picked (port 0, reported by its `status` action), scraped over HTTP and parsed with
prometheus_client's own parser.

The leader node counts produce and fetch requests, bytes and latencies and gives each follower's replication
lag; the coordinator gives group offsets and lag, offline and under-replicated partitions, and counts the
controller's elections and ISR changes: a SIGKILLed leader shows as an election, an ISR shrink and an
under-replicated partition until it restarts and the ISR expands again.

A leader's fabric_producer_ids counts the idempotent producers whose state it holds and falls back once one is
silent for producer.id.expiration.ms; that producer's next sends are still delivered, each record once (refused
as an unknown producer's, it takes a new id and sends again, as a Kafka producer does). Followers hold the state
of the producers whose frames they copy, so a new leader has it at hand.

The endpoint binds 127.0.0.1 unless --metrics-host says otherwise, whatever --listen's host, and with
--metrics-token-file it answers 401 to a scrape without that bearer token.
"""
from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import fabric
from fabric.common.ports import free_port
from fabric.common.records import to_storage
from fabric.common.waiting import wait_for

METRICS = ("--metrics-port", "0")
TOPIC_CONFIG = {"min.insync.replicas": "2"}
SETTLE_S = 60  # a loaded machine may take a while past the 6 s node session to notice, decide and answer


class Scraped:
    """One scrape of a /metrics endpoint on 127.0.0.1:`port`."""

    def __init__(self, port: int) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        self.samples = {(s.name, frozenset(s.labels.items())): s.value
                        for family in text_string_to_metric_families(text) for s in family.samples}

    def value(self, name: str, **labels: str) -> float | None:
        """The sample `name` with exactly these labels, None if the scrape has none."""
        return self.samples.get((name, frozenset(labels.items())))


def node_metrics(cluster, node_id: int) -> Scraped:
    return Scraped(cluster.nodes[node_id].status()["metrics_port"])


def coordinator_metrics(cluster) -> Scraped:
    return Scraped(cluster.coordinator.status().metrics_port)


def test_nodes_and_the_coordinator_serve_request_replication_and_group_metrics(node_cluster, drain) -> None:
    cluster = node_cluster(coordinator_extra=METRICS, node_extra=METRICS)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("metered", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        fab.create_topic("local", partitions=1)  # stored in the coordinator's own directory
        with fab.producer() as producer:
            for i in range(50):
                producer.send("metered", b"m%d" % i, partition=0)
            for i in range(10):
                producer.send("local", b"l%d" % i, partition=0)
        for topic, group, count in (("metered", "replicated-readers", 50), ("local", "local-readers", 10)):
            consumer = fab.consumer(topic, group_id=group, auto_offset_reset="earliest")
            drain(consumer, count)
            consumer.commit()
            consumer.close()
        with fab.producer() as producer:
            for i in range(5):
                producer.send("local", b"late%d" % i, partition=0)
        leader = fab.describe_topic("metered").partitions[0].leader
        fab.create_topic("published", partitions=1)  # a transaction's publish is a produce request too
        appended = coordinator_metrics(cluster).value("fabric_produce_bytes_total")
        batch = to_storage(pa.table({"value": [b"p"] * 10}), None, time.time_ns() // 1000).to_batches()[0]
        assert fab.cluster.publish("metered-txn:1", {("published", 0): [batch]})
        assert coordinator_metrics(cluster).value("fabric_produce_bytes_total") > appended
    followers = [str(n) for n in cluster.nodes if n != leader]

    node = node_metrics(cluster, leader)
    assert node.value("fabric_produce_requests_total") >= 1
    assert node.value("fabric_produce_bytes_total") > 0
    assert node.value("fabric_produce_latency_seconds_count") == node.value("fabric_produce_requests_total")
    assert node.value("fabric_fetch_requests_total") >= 1
    assert node.value("fabric_fetch_bytes_total") > 0
    assert node.value("fabric_fetch_latency_seconds_count") == node.value("fabric_fetch_requests_total")
    assert node.value("fabric_leader_partitions") == 1
    assert node.value("fabric_partition_high_watermark", topic="metered", partition="0") == 50
    assert node.value("fabric_partition_log_end_offset", topic="metered", partition="0") == 50
    for follower in followers:
        assert node.value("fabric_replication_lag_seconds", topic="metered", partition="0", follower=follower) >= 0

    def caught_up() -> bool:  # acks=all answered once the ISR had every record; the lag gauges say so too
        scraped = node_metrics(cluster, leader)
        return scraped.value("fabric_under_replicated_partitions") == 0 and all(
            scraped.value("fabric_replication_lag_messages", topic="metered", partition="0", follower=f) == 0
            for f in followers)
    wait_for(caught_up, SETTLE_S, "both followers at the leader's log end", interval=0.5)

    coordinator = coordinator_metrics(cluster)
    assert coordinator.value("fabric_active_controller") == 1
    assert coordinator.value("fabric_live_nodes") == 3
    assert coordinator.value("fabric_offline_partitions") == 0
    assert coordinator.value("fabric_under_replicated_partitions") == 0
    assert coordinator.value("fabric_produce_requests_total") >= 2  # the "local" topic's appends
    local = dict(group="local-readers", topic="local", partition="0")
    assert coordinator.value("fabric_consumer_group_committed_offset", **local) == 10
    assert coordinator.value("fabric_consumer_group_lag", **local) == 5
    replicated = dict(group="replicated-readers", topic="metered", partition="0")
    assert coordinator.value("fabric_consumer_group_committed_offset", **replicated) == 50
    wait_for(lambda: coordinator_metrics(cluster).value("fabric_consumer_group_lag", **replicated) == 0, SETTLE_S,
             "the group's lag in the replicated topic, from the high watermark its leader reports", interval=0.5)


EXPIRATION_MS = 8000  # long enough that the first scrape after the sends comes well before it, on a loaded machine


def test_a_silent_producer_is_forgotten_and_its_next_sends_are_delivered_once(node_cluster, drain) -> None:
    cluster = node_cluster(node_extra=(*METRICS, "--producer-id-expiration-ms", str(EXPIRATION_MS),
                                       "--log-retention-check-interval-ms", "200"))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("idle-producers", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        leader = fab.describe_topic("idle-producers").partitions[0].leader
        with fab.producer() as producer:  # idempotent: acks=all by default
            for i in range(5):
                producer.send("idle-producers", b"before-%d" % i).get()
            assert node_metrics(cluster, leader).value("fabric_producer_ids") == 1
            wait_for(lambda: node_metrics(cluster, leader).value("fabric_producer_ids") == 0, SETTLE_S * 2,
                     f"the leader to forget the producer silent for {EXPIRATION_MS} ms", interval=0.5)
            for i in range(5):
                producer.send("idle-producers", b"after-%d" % i).get()
            assert node_metrics(cluster, leader).value("fabric_producer_ids") == 1  # under its new id
        consumer = fab.consumer("idle-producers", auto_offset_reset="earliest")
        records = drain(consumer, 10)
        consumer.close()
    assert [r.value for r in records] == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]


def test_followers_hold_the_producer_state_they_copy_and_the_new_leader_keeps_it(node_cluster, drain) -> None:
    """A follower loads its partition's producer state as it copies (in the background, without the partition
    lock) and keeps it with every frame, so the one elected when the leader is SIGKILLed has it at hand; the
    producer's sends after the failover are each delivered once."""
    cluster = node_cluster(node_extra=METRICS)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("followed", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        old = fab.describe_topic("followed").partitions[0]
        followers = [n for n in old.replicas if n != old.leader]
        with fab.producer() as producer:  # idempotent: acks=all by default
            for i in range(5):
                producer.send("followed", b"before-%d" % i).get()
            wait_for(lambda: all(node_metrics(cluster, f).value("fabric_producer_ids") == 1 for f in followers),
                     SETTLE_S, "both followers to hold the producer's state", interval=0.5)
            cluster.nodes[old.leader].kill()
            for i in range(5):
                producer.send("followed", b"after-%d" % i).get()
        new = fab.describe_topic("followed").partitions[0].leader
        assert new in followers
        assert node_metrics(cluster, new).value("fabric_producer_ids") == 1
        consumer = fab.consumer("followed", auto_offset_reset="earliest")
        records = drain(consumer, 10)
        consumer.close()
    assert [r.value for r in records] == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]


def test_a_killed_leader_is_an_election_an_isr_shrink_and_an_under_replicated_partition_until_it_rejoins(
        node_cluster) -> None:
    """Killing the leader (rather than a follower) also moves the election counter; its ISR shrinks and expands
    as a follower's would."""
    cluster = node_cluster(coordinator_extra=METRICS, node_extra=METRICS)
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("fragile", partitions=1, replication_factor=3, config=TOPIC_CONFIG)
        with fab.producer() as producer:
            for i in range(20):
                producer.send("fragile", b"before%d" % i, partition=0)
        old = fab.describe_topic("fragile").partitions[0]
        assert len(old.isr) == 3
        before = coordinator_metrics(cluster)
        elected, shrinks, expands = (before.value("fabric_leader_elections_total", kind="elected"),
                                     before.value("fabric_isr_shrinks_total"), before.value("fabric_isr_expands_total"))
        assert before.value("fabric_under_replicated_partitions") == 0

        cluster.nodes[old.leader].kill()

        def shrunk() -> bool:
            scraped = coordinator_metrics(cluster)
            return (scraped.value("fabric_under_replicated_partitions") == 1
                    and scraped.value("fabric_isr_shrinks_total") > shrinks
                    and scraped.value("fabric_leader_elections_total", kind="elected") > elected)
        wait_for(shrunk, SETTLE_S, "the coordinator to count the election and the ISR shrink", interval=0.5)
        assert coordinator_metrics(cluster).value("fabric_offline_partitions") == 0
        new_leader = fab.describe_topic("fragile").partitions[0].leader
        assert new_leader != old.leader
        wait_for(lambda: node_metrics(cluster, new_leader).value("fabric_under_replicated_partitions") == 1,
                 SETTLE_S, "the new leader to see its partition under-replicated", interval=0.5)
        with fab.producer() as producer:  # two of three replicas meet min.insync.replicas
            for i in range(20):
                producer.send("fragile", b"after%d" % i, partition=0)

        cluster.restart(old.leader)

        def expanded() -> bool:
            scraped = coordinator_metrics(cluster)
            return (scraped.value("fabric_under_replicated_partitions") == 0
                    and scraped.value("fabric_isr_expands_total") > expands)
        wait_for(expanded, SETTLE_S, "the coordinator to count the ISR expanding again", interval=0.5)
        assert len(fab.describe_topic("fragile").partitions[0].isr) == 3
    rejoined = node_metrics(cluster, old.leader)  # a new process on a new metrics port, following now
    assert rejoined.value("fabric_leader_partitions") == 0
    assert rejoined.value("fabric_produce_requests_total") == 0


def listening_hosts(port: int) -> set[str]:
    """The local addresses sockets of this machine listen on at `port` (from /proc/net/tcp and tcp6)."""
    hosts = set()
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(table) as rows:
            for row in (line.split() for line in rows.readlines()[1:]):
                address, _, hex_port = row[1].partition(":")
                if int(hex_port, 16) == port and row[3] == "0A":  # 0A: LISTEN
                    raw = bytes.fromhex(address)  # 32-bit words in host (little-endian) order
                    hosts.add(socket.inet_ntop(family, b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))))
    return hosts


def test_the_endpoint_binds_loopback_whatever_the_listen_host_and_asks_for_its_token(coordinators, tmp_path) -> None:
    """A coordinator serving Flight on every interface still serves metrics on 127.0.0.1 only, and only to a
    scrape bearing the token of --metrics-token-file (Prometheus's `authorization` setting)."""
    (tmp_path / "metrics-token").write_text("scrape-s3cret\n")
    port = free_port()
    instance = coordinators(port=port, extra=("--listen", f"0.0.0.0:{port}", *METRICS, "--metrics-token-file",
                                              str(tmp_path / "metrics-token")))
    metrics_port = instance.status().metrics_port
    assert listening_hosts(port) & {"0.0.0.0", "::"} and listening_hosts(metrics_port) == {"127.0.0.1"}
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
        assert refused.value.code == 401
    request = urllib.request.Request(url, headers={"Authorization": "Bearer scrape-s3cret"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200 and b"fabric_produce_requests_total" in answer.read()
