"""Retention and DeleteRecords on replicated topics (docs/replication.md, "Retention and deleting records"), with
real node processes: the leader moves the log start (never past its high watermark) and every follower takes it
from its fetch answers.

- On demand (the shared 3-node cluster): `enforce_retention` deletes old segments at the leader and the followers
  follow its log start; `delete_records` moves the log start on every replica, stops at the high watermark, and a
  consumer resetting to the earliest offset starts there.
- In the background (a cluster of its own, log.retention.check.interval.ms 300): a follower SIGKILLed while the
  leader's retention deletes past its log end rejoins, starting again at the leader's log start (once, no loop),
  and holds what the others hold; the leader SIGKILLed then, the new leader serves from the same log start and
  its own retention goes on.

Every wait is on a condition (the replication kit's `eventually`), never a sleep.
"""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

import fabric
from fabric.common.errors import OffsetOutOfRangeError

pytestmark = pytest.mark.slow

CONFIG = {"segment.bytes": "4096", "retention.bytes": "8192", "min.insync.replicas": "2"}


def write(fab: fabric.Fabric, topic: str, batches: int, tag: str) -> None:
    """`batches` acks=all batches of 5 records of about 100 bytes each."""
    with fab.producer(enable_idempotence=False, linger_ms=0, acks="all") as producer:
        for b in range(batches):
            producer.send_batch(topic, pa.table({"value": [b"%s-%d-%d" % (tag.encode(), b, i) * 8 for i in range(5)]}))


def log_starts(replication, nodes: dict, topic: str) -> set[int | None]:
    """The log start of each node's replica of `topic`-0, as the nodes report them."""
    return {replication.status(node, topic).get("log_start") for node in nodes.values()}


def segments(replication, node, topic: str) -> int:
    return sum(name.endswith(".arrows") for name in os.listdir(replication.partition_dir(node, topic)))


def read_from_earliest(fab: fabric.Fabric, replication, topic: str) -> list[int]:
    """The offsets a consumer starting at the earliest offset reads up to the high watermark."""
    offsets: list[int] = []
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        end = replication.eventually(lambda: (consumer.end_offsets([(topic, 0)])[(topic, 0)],),
                                     f"the leader of {topic}-0 to answer")[0]
        consumer.seek_to_beginning((topic, 0))

        def read_up_to_end() -> bool:
            polled = [r.offset for r in consumer.poll(0.2)]
            offsets.extend(polled)
            return not polled and consumer.position(topic, 0) >= end
        replication.eventually(read_up_to_end, f"{topic}-0 to be read up to {end}")
    return offsets


def test_retention_and_delete_records_move_the_log_start_of_every_replica(replicated_cluster, replication) -> None:
    cluster, topic = replicated_cluster, "expiring"
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic(topic, config=CONFIG)  # replication factor 3, the cluster's default
        try:
            write(fab, topic, 60, "a")
            end = replication.wait_in_sync(fab, cluster.nodes, topic)
            before = {n: segments(replication, node, topic) for n, node in cluster.nodes.items()}
            assert fab.enforce_retention(topic) > 0  # at the leader, below its high watermark
            start = replication.described(fab, topic).start_offset
            assert 0 < start < end
            replication.eventually(lambda: log_starts(replication, cluster.nodes, topic) == {start},
                                   f"every replica of {topic}-0 to start at the leader's log start {start}")
            for n, node in cluster.nodes.items():  # the followers deleted their old segments too
                assert segments(replication, node, topic) < before[n] - 2, (n, before[n])

            low = fab.delete_records(topic, 0, start + 7)
            assert low == start + 7 == replication.described(fab, topic).start_offset
            replication.eventually(lambda: log_starts(replication, cluster.nodes, topic) == {low},
                                   f"every replica of {topic}-0 to start at {low}")
            assert read_from_earliest(fab, replication, topic) == list(range(low, end))
            with pytest.raises(OffsetOutOfRangeError, match=f"up to its high watermark {end}"):
                fab.delete_records(topic, 0, end + 1)
        finally:
            fab.delete_topic(topic)


def test_a_follower_the_leader_deleted_past_rejoins_from_its_log_start_and_a_new_leader_goes_on(
        node_cluster, replication) -> None:
    cluster = node_cluster(nodes=3, node_extra=("--log-retention-check-interval-ms", "300"))
    topic = "expiring"
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic(topic, replication_factor=3, config=CONFIG)
        write(fab, topic, 10, "a")
        held = replication.wait_in_sync(fab, cluster.nodes, topic)
        leader = replication.state(fab, topic).leader
        behind = next(n for n in cluster.nodes if n != leader)
        cluster.nodes[behind].kill()
        others = {n: node for n, node in cluster.nodes.items() if n != behind}
        replication.wait_isr(fab, topic, set(others))
        write(fab, topic, 80, "b")
        # the leader's own maintenance deletes past what the killed follower holds; the other follower follows
        replication.eventually(lambda: len(starts := log_starts(replication, others, topic)) == 1 and
                               next(iter(starts)) > held, f"the leader's retention to delete past offset {held}")

        cluster.restart(behind)
        end = replication.wait_in_sync(fab, cluster.nodes, topic)
        start = replication.eventually(lambda: len(s := log_starts(replication, cluster.nodes, topic)) == 1 and s,
                                       "every replica to start at the leader's log start").pop()
        assert held < start < end
        restarts = cluster.nodes[behind].log().count("starting again at")
        assert 1 <= restarts <= 2, cluster.nodes[behind].log()  # once (twice if retention ran in between)

        state = replication.state(fab, topic)  # the leader SIGKILLed: the new one serves from the same start
        cluster.nodes[state.leader].kill()
        replication.wait_elected(fab, topic, 0, state)
        survivors = {n: node for n, node in cluster.nodes.items() if n != state.leader}
        assert read_from_earliest(fab, replication, topic) == list(range(start, end))
        write(fab, topic, 40, "c")  # and its retention goes on from its own log
        replication.eventually(lambda: len(s := log_starts(replication, survivors, topic)) == 1 and s.pop() > start,
                               "the new leader's retention to move the log start on both survivors")
