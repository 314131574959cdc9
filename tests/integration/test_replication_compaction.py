"""Compaction on data nodes (docs/compaction.md, "On data nodes") as real processes: a coordinator and three data
nodes, a compacted topic of replication factor 3 with many overwrites of a few keys.

- `compact_topic` cleans at the partition's leader, below its high watermark: its copy shrinks and a consumer
  reads exactly each key's latest value across the gaps. A follower SIGKILLed before the pass and restarted
  after it copies the cleaned range (gap frames included) and rejoins the ISR; the leaders are then SIGKILLed
  one after the other until that follower leads, and it serves every acknowledged key's latest value.
- The nodes' own maintenance (log.retention.check.interval.ms) cleans every replica, leaders and followers, with
  no call: each ends far smaller than a non-compacted topic of the same writes; the leader SIGKILLed then, the
  new leader serves every key's latest value.

Every wait is on a condition (the replication kit's `eventually`), never a sleep.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

import fabric

pytestmark = pytest.mark.slow

KEYS = [b"k%d" % k for k in range(5)]
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.insync.replicas": "2"}


def overwrite(fab: fabric.Fabric, topic: str, rounds: int, tag: str) -> dict[bytes, bytes]:
    """`rounds` acks=all batches, each a new value of every key; the latest value of each key."""
    with fab.producer(enable_idempotence=False, linger_ms=0, acks="all") as producer:
        for r in range(rounds):
            values = [b"%s-r%d-%s" % (tag.encode(), r, k) * 4 for k in KEYS]
            producer.send_batch(topic, pa.table({"key": KEYS, "value": values}))
    return {k: b"%s-r%d-%s" % (tag.encode(), rounds - 1, k) * 4 for k in KEYS}


def read_all(fab: fabric.Fabric, replication, topic: str) -> list[tuple[int, bytes, bytes]]:
    """Every (offset, key, value) a consumer reads from offset 0 to the high watermark, across the gaps."""
    records: list[tuple[int, bytes, bytes]] = []
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        end = replication.eventually(lambda: (consumer.end_offsets([(topic, 0)])[(topic, 0)],),
                                     f"the leader of {topic}-0 to answer")[0]
        consumer.seek(topic, 0, 0)

        def read_up_to_end() -> bool:  # (the position runs ahead of what poll returned: fetched records wait)
            polled = [(r.offset, r.key, r.value) for r in consumer.poll(0.2)]
            records.extend(polled)
            return not polled and consumer.position(topic, 0) >= end
        replication.eventually(read_up_to_end, f"{topic}-0 to be read up to {end}")
    return records


def latest(records: list[tuple[int, bytes, bytes]]) -> dict[bytes, bytes]:
    return {key: value for _, key, value in records}


def size(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".arrows"))


def test_compact_topic_cleans_the_leader_and_a_restarted_follower_copies_the_cleaned_range(node_cluster,
                                                                                          replication) -> None:
    cluster = node_cluster(nodes=3)
    topic = "changelog"
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic(topic, replication_factor=3, config=CONFIG)
        overwrite(fab, topic, 62, "a")  # (the follower stops inside a segment of the leader)
        leader = replication.state(fab, topic).leader
        behind = next(n for n in (1, 2, 3) if n != leader)
        cluster.nodes[behind].kill()  # it misses the pass, and the writes after it
        others = {n: cluster.nodes[n] for n in (1, 2, 3) if n != behind}
        replication.wait_isr(fab, topic, set(others))
        want = overwrite(fab, topic, 60, "b")
        before = size(replication.partition_dir(cluster.nodes[leader], topic))
        [report] = fab.compact_topic(topic)
        assert report.cleaned and report.records_removed > 400, report.describe()
        after = size(replication.partition_dir(cluster.nodes[leader], topic))
        assert after < before / 3, (before, after)
        records = read_all(fab, replication, topic)
        assert latest(records) == want and len(records) < 100  # 610 written
        offsets = [o for o, _, _ in records]
        assert offsets == sorted(set(offsets))

        cluster.restart(behind)
        replication.wait_in_sync(fab, {**others, behind: cluster.nodes[behind]}, topic)
        # kill the leaders until the restarted follower leads: it serves every key's latest value
        while (state := replication.state(fab, topic)).leader != behind:
            cluster.nodes[state.leader].kill()
            replication.wait_elected(fab, topic, 0, state)
        assert latest(read_all(fab, replication, topic)) == want


def test_the_nodes_clean_every_replica_of_a_compacted_topic_on_their_own(node_cluster, replication) -> None:
    cluster = node_cluster(nodes=3, node_extra=("--log-retention-check-interval-ms", "300"))
    with fabric.connect(replication.client_url(cluster)) as fab:
        # Any dirty segment makes a pass due: with the default min.cleanable.dirty.ratio (0.5), a node whose last
        # pass ran while the writes went on could be left with a few closed segments below the ratio, and nothing
        # written after them to make another pass due (as Kafka's cleaner would): whether the replica ended small
        # then depended on when its passes ran.
        fab.create_topic("changelog", replication_factor=3, config={**CONFIG, "min.cleanable.dirty.ratio": "0.01"})
        fab.create_topic("plain", replication_factor=3, config={**CONFIG, "cleanup.policy": "delete"})
        want = overwrite(fab, "changelog", 120, "a")
        overwrite(fab, "plain", 120, "a")
        replication.wait_in_sync(fab, cluster.nodes, "changelog")
        replication.wait_in_sync(fab, cluster.nodes, "plain")
        plain = {n: size(replication.partition_dir(node, "plain")) for n, node in cluster.nodes.items()}

        def every_replica_small() -> bool:
            return all(size(replication.partition_dir(node, "changelog")) < plain[n] / 4
                       for n, node in cluster.nodes.items())
        replication.eventually(every_replica_small, "every replica of changelog to be compacted by its node")
        assert latest(read_all(fab, replication, "changelog")) == want
        state = replication.state(fab, "changelog")  # the leader SIGKILLed right after its passes
        cluster.nodes[state.leader].kill()
        replication.wait_elected(fab, "changelog", 0, state)
        assert latest(read_all(fab, replication, "changelog")) == want
