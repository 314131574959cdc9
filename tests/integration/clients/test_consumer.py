"""The consumer, on an embedded fabric and over a coordinator service: seeking and positions, offset resets, group
commits, partitions added while consuming, and leaving the group after max_poll_interval_ms. (Group members in
separate processes: tests/integration/test_group_consumers.py.)"""
from __future__ import annotations

import pyarrow as pa
import pytest

from fabric.common.errors import CommitFailedError
from fabric.common.waiting import wait_for

GROUP = "workers"
TOPIC = "jobs"
FAST = dict(session_timeout_ms=1500, heartbeat_interval_ms=250, auto_offset_reset="earliest",
            enable_auto_commit=False)


def produce(fab, partitions: int, per_partition: int) -> None:
    producer = fab.producer()
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(TOPIC, b"v%d" % i, partition=p)
    producer.flush()
    producer.close()


def test_seek_position_and_offsets_for_times(fab, drain):
    fab.create_topic("t", config={"retention.ms": -1, "segment.ms": 2**62})  # timestamps from 1970
    with fab.producer() as producer:
        for i in range(10):
            producer.send("t", b"%d" % i, timestamp=1000 * (i + 1))
    consumer = fab.consumer(auto_offset_reset="earliest")
    consumer.assign([("t", 0)])
    assert consumer.position("t", 0) == 0
    consumer.seek("t", 0, 7)
    assert [r.value for r in drain(consumer, 3)] == [b"7", b"8", b"9"]
    assert consumer.position("t", 0) == 10
    consumer.seek_to_beginning()
    assert consumer.position("t", 0) == 0
    consumer.seek_to_end()
    assert consumer.position("t", 0) == 10
    assert consumer.offsets_for_times({("t", 0): 4500}) == {("t", 0): 4}
    assert consumer.offsets_for_times({("t", 0): 99_999}) == {("t", 0): None}
    assert consumer.beginning_offsets([("t", 0)]) == {("t", 0): 0}
    assert consumer.end_offsets([("t", 0)]) == {("t", 0): 10}


def test_latest_reset_skips_old_records(fab, drain):
    fab.create_topic("t")
    with fab.producer() as producer:
        producer.send("t", b"old").result()
    consumer = fab.consumer("t")  # auto_offset_reset defaults to latest, as Kafka's
    assert consumer.poll(0.1) == []
    with fab.producer() as producer:
        producer.send("t", b"new").result()
    assert [r.value for r in drain(consumer, 1)] == [b"new"]


def test_group_commits_and_resumes(fab, drain):
    fab.create_topic("t", partitions=2)
    with fab.producer() as producer:
        producer.send_batch("t", pa.table({"value": [b"%d" % i for i in range(100)]}))
    first = fab.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                         max_poll_records=30)
    seen = first.poll(5)
    assert len(seen) == 30
    first.commit()
    first.close()
    lag = {(g.topic, g.partition): g.lag for g in fab.describe_group("g")}
    assert sum(lag.values()) == 70
    second = fab.consumer("t", group_id="g", auto_offset_reset="earliest")
    rest = drain(second, 70)
    assert {r.value for r in seen} | {r.value for r in rest} == {b"%d" % i for i in range(100)}
    second.close()  # auto-commit on close
    assert sum(g.lag for g in fab.describe_group("g")) == 0
    assert fab.list_groups() == ["g"]


def test_partitions_added_are_consumed(fab, drain):
    fab.create_topic("grow", partitions=1)
    consumer = fab.consumer("grow", auto_offset_reset="earliest")
    assert consumer.poll(0.1) == []
    fab.create_partitions("grow", 2)
    with fab.producer() as producer:
        producer.send("grow", b"new", partition=1).result()
    assert [(r.partition, r.value) for r in drain(consumer, 1)] == [(1, b"new")]


def test_max_poll_interval_leaves_the_group_and_stale_commit_fails(fab):
    fab.create_topic(TOPIC, partitions=2)
    produce(fab, 2, 3)
    lost: list = []
    slow = fab.consumer(TOPIC, group_id=GROUP, max_poll_interval_ms=800, on_revoke=lost.append, **FAST)
    busy = fab.consumer(TOPIC, group_id=GROUP, **FAST)
    try:
        wait_for(lambda: slow.poll(0.05) is not None and busy.poll(0.05) is not None
                 and len(slow.assignment()) == 1 and len(busy.assignment()) == 1, 30, "two members, one each")
        held, revokes = slow.assignment(), len(lost)
        wait_for(lambda: busy.poll(0.05) is not None and len(busy.assignment()) == 2, 30,
                 "the slow member (not polling) to leave and the busy one to take everything")
        with pytest.raises(CommitFailedError, match="rebalanced"):
            slow.commit({(TOPIC, 0): 1})
        slow.poll(0.05)  # acts on having left: the partition is reported lost, then it rejoins
        assert lost[revokes:] == [held]
    finally:
        slow.close()
        busy.close()
