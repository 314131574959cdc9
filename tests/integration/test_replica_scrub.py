"""A damaged copy costs readers nothing while an intact replica exists (docs/replication.md, "Scrubbing and
repair"), on real coordinator and node processes under a steady stream of acks=all writes, with the history
checker:

- a follower restarted with a flipped byte below its high watermark is scrubbed first (unverified until then):
  it finds the damage (a log line naming the offsets), repairs it from an in-sync replica, and is in the ISR,
  healthy, at the end, having never led;
- a byte flipped in the leader's log while it serves: a reader from offset 0 gets every record, since the leader
  repairs the range from a follower before it answers;
- then two failovers: the leader stopped (SIGTERM), restarted, scrubbed and back in the ISR; then the next leader
  SIGKILLed.
Every acknowledged record is read back through the leader with no error, the live replicas' frames are the
same bytes at the end, and the history holds (dense offsets).

The scrubbers run a pass only when a node starts (log.scrubber.backoff.ms is ten minutes here), so the leader's
damage is met by the reader, not by its scrubber.
"""
from __future__ import annotations

import pytest

import fabric
from fabric.storage import frame

TOPIC = "scrubbed"
NODE_EXTRA = ("--log-scrubber-backoff-ms", "600000")

pytestmark = pytest.mark.slow


def flip(storage, directory: str, offset: int) -> frame.FrameHeader:
    """Flip a payload byte of the frame holding `offset` in a partition directory; its header."""
    for path, pos, header, _ in storage.committed_frames(directory, 1 << 62):
        if header.base_offset <= offset < header.next_offset:
            with open(path, "r+b") as f:
                f.seek(pos + frame.HEADER_SIZE + header.length // 2)
                old = f.read(1)[0]
                f.seek(pos + frame.HEADER_SIZE + header.length // 2)
                f.write(bytes([old ^ 0x10]))
            return header
    raise AssertionError(f"no frame holds offset {offset} in {directory}")


def offsets(header: frame.FrameHeader) -> str:
    return f"offsets {header.base_offset}..{header.next_offset - 1}"


def test_damage_on_a_follower_then_on_the_leader_then_failovers_loses_no_acknowledged_record(
        node_cluster, history, replication, storage) -> None:
    cluster = node_cluster(nodes=3, node_extra=NODE_EXTRA)
    recorder = history.recorder("test")
    url = replication.client_url(cluster)
    with fabric.connect(url) as fab:
        fab.create_topic(TOPIC, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        with replication.writers(url, history, TOPIC, 1) as writers:
            writers.wait_acked(0, 30, "acknowledged writes before the damage")
            state = replication.state(fab, TOPIC)
            f = next(i for i in state.isr if i != state.leader)
            cluster.nodes[f].stop()
            damaged = flip(storage, replication.partition_dir(cluster.nodes[f], TOPIC), 5)
            cluster.restart(f)

            replication.eventually(lambda: f"repaired {offsets(damaged)}" in cluster.nodes[f].log(),
                                   f"node {f}'s scrubber to find and repair the damage")
            log = cluster.nodes[f].log()
            assert f"scrubbing partition {TOPIC}-0 found damage: {offsets(damaged)}" in log, log[-3000:]
            replication.wait_isr(fab, TOPIC, set(cluster.nodes))
            # verified once a walk reached what was on disk at the restart (its high watermark passed it)
            replication.eventually(lambda: replication.status(cluster.nodes[f], TOPIC).get("health") == "Healthy",
                                   f"node {f}'s replica to be verified")
            assert replication.state(fab, TOPIC).leader == state.leader  # the damaged replica never led
            writers.wait_acked(0, 10, "acknowledged writes after the follower's repair")

            leader = cluster.nodes[replication.state(fab, TOPIC).leader]
            damaged = flip(storage, replication.partition_dir(leader, TOPIC), 12)
            with fab.consumer(auto_offset_reset="earliest") as consumer:
                consumer.assign([(TOPIC, 0)])
                read: list[int] = []
                replication.eventually(lambda: read.extend(r.offset for r in consumer.poll(0.2)) or (
                    read and read[-1] >= damaged.next_offset), f"a read of {TOPIC}-0 past the leader's damage")
            assert read[:damaged.next_offset + 1] == list(range(damaged.next_offset + 1))
            assert f"repaired {offsets(damaged)}" in leader.log()

            before = replication.state(fab, TOPIC)
            cluster.nodes[before.leader].stop()  # a controlled shutdown: the leadership moves at once
            after = replication.wait_elected(fab, TOPIC, 0, before)
            writers.wait_acked(0, 10, f"acks=all writes acknowledged by node {after.leader}")
            cluster.restart(before.leader)  # back in the ISR once caught up
            replication.wait_isr(fab, TOPIC, set(cluster.nodes))
            cluster.nodes[after.leader].kill()  # a crash: the leadership moves once its session lapses
            last = replication.wait_elected(fab, TOPIC, 0, after)
            writers.wait_acked(0, 10, f"acks=all writes acknowledged by node {last.leader}")
        alive = {i: node for i, node in cluster.nodes.items() if i != after.leader}
        end = replication.wait_in_sync(fab, alive, TOPIC)
        assert len(replication.final_read(fab, recorder, TOPIC)) == end
    replication.assert_identical_replicas(alive, TOPIC, 0, recorder)
    result = history.check(dense=True).assert_valid()
    assert result.sends["ok"] >= 50, result.summary()
