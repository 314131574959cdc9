"""The consumer, on an embedded fabric and over a coordinator service: seeking and positions, offset resets, group
commits, partitions added while consuming, and leaving the group after max_poll_interval_ms. (Group members in
separate processes: tests/integration/test_group_consumers.py.)"""
from __future__ import annotations

import pyarrow as pa
import pytest

from fabric.common.errors import CommitFailedError, InvalidArgumentError, InvalidTopicError, UnknownTopicError
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
    limited = fab.consumer(auto_offset_reset="earliest", max_poll_records=3)
    limited.assign([("t", 0)])
    assert [r.value for r in limited.poll(30)] == [b"0", b"1", b"2"]
    assert limited.position("t", 0) == 3  # the next record poll() returns, not how far it fetched ahead
    limited.close()
    assert consumer.position("t", 0) == 0
    consumer.seek_to_end()
    assert consumer.position("t", 0) == 10
    assert consumer.offsets_for_times({("t", 0): 4500}) == {("t", 0): 4}
    assert consumer.offsets_for_times({("t", 0): 99_999}) == {("t", 0): None}
    assert consumer.beginning_offsets([("t", 0)]) == {("t", 0): 0}
    assert consumer.end_offsets([("t", 0)]) == {("t", 0): 10}


def test_a_fetch_handed_out_over_several_polls_counts_its_bytes_once(fab):
    fab.create_topic("t")
    with fab.producer() as producer:
        producer.send_batch("t", pa.table({"value": [b"x" * 100] * 10}))

    def consumed(**config) -> dict:
        consumer = fab.consumer(auto_offset_reset="earliest", **config)
        consumer.assign([("t", 0)])
        got: list = []
        wait_for(lambda: got.extend(consumer.poll(0.5)) or len(got) == 10, 30, "the 10 records")
        metrics = consumer.metrics()["consumer-fetch-manager-metrics"]
        consumer.close()
        return metrics
    whole, split = consumed(), consumed(max_poll_records=3)
    assert whole["records-consumed-total"] == split["records-consumed-total"] == 10
    assert whole["bytes-consumed-total"] >= 1000
    assert split["bytes-consumed-total"] == whole["bytes-consumed-total"]


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


def test_auto_commit_below_a_log_start_retention_moved_does_not_fail_poll(fab):
    fab.create_topic("t", config={"segment.bytes": 1024, "retention.ms": -1})
    with fab.producer(batch_size=1) as producer:  # a frame per record, ~4 to a segment
        for i in range(5):
            producer.send("t", b"%03d" % i + b"x" * 200)
    consumer = fab.consumer("t", group_id="g", auto_offset_reset="earliest", auto_commit_interval_ms=0,
                            max_poll_records=2)
    assert [r.offset for r in consumer.poll(5)] == [0, 1]  # 2, 3, 4 stay buffered in the consumer
    with fab.producer(batch_size=1) as producer:
        for i in range(5, 25):
            producer.send("t", b"%03d" % i + b"x" * 200)
    fab.alter_topic_config("t", {"retention.bytes": 1024})
    wait_for(lambda: fab.enforce_retention("t") > 0, what="retention to delete segments (a data node learns the "
             "config with its next heartbeat)")
    start = fab.describe_topic("t").partitions[0].start_offset
    assert start > 4  # what the consumer holds is gone from the log: its position is below the log start
    assert [r.offset for r in consumer.poll(5)] == [2, 3]  # the auto-commit of position 4 is skipped, not raised
    assert [r.offset for r in consumer.poll(5)] == [4]
    assert consumer.poll(5)[0].offset == start  # the next fetch resets to the log start (auto_offset_reset)
    consumer.commit()
    assert fab.describe_group("g")[0].committed >= start
    consumer.close()


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


@pytest.mark.parametrize("call, message", [
    (lambda c: c.seek("t", 0, "x"), "seek\\(\\) offset must be an integer"),
    (lambda c: c.seek("t", 0, -1), "seek\\(\\) offset must be an integer from 0"),
    (lambda c: c.seek("t", 0, 1.5), "seek\\(\\) offset must be an integer"),
    (lambda c: c.assign(("t", 0)), "assign\\(\\) takes a list of \\(topic, partition\\) pairs"),
    (lambda c: c.assign([("t", "x")]), "partition of 't' in assign\\(\\) must be an integer"),
    (lambda c: c.seek_to_beginning(("t",)), "takes \\(topic, partition\\) pairs"),
    (lambda c: c.end_offsets("t"), "takes a list of \\(topic, partition\\) pairs"),
    (lambda c: c.offsets_for_times({("t", 0): "x"}), "offsets_for_times\\(\\) \\(ms\\) must be an integer"),
    (lambda c: c.offsets_for_times({("t", 0): -1}), "must be an integer from 0"),
    (lambda c: c.offsets_for_times({("t", 0): 2**62}), "must be an integer from 0 to 253402300799999"),
    (lambda c: c.offsets_for_times([("t", 0)]), "takes a dict"),
    (lambda c: c.poll("x"), "poll\\(\\) timeout must be a number of seconds"),
    (lambda c: c.poll_batch(None), "poll_batch\\(\\) timeout must be a number"),
    (lambda c: c.poll_batch(0, columns="value"), "columns takes a list of column names"),
    (lambda c: c.commit({("t", 0): "x"}), "commit\\(\\) must be an integer"),
    (lambda c: c.commit({("t", 0): -5}), "commit\\(\\) must be an integer from 0"),
    (lambda c: c.commit({"t": 1}), "commit\\(\\) takes \\(topic, partition\\) pairs"),
    (lambda c: c.committed("t"), "committed\\(\\) takes a list"),
])
def test_consumer_refuses_bad_arguments_and_changes_nothing(fab, call, message):
    fab.create_topic("t", config={"retention.ms": -1})
    with fab.producer() as producer:
        producer.send("t", b"x").result()
    consumer = fab.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([("t", 0)])
    consumer.seek("t", 0, 1)
    consumer.commit({("t", 0): 1})
    with pytest.raises(InvalidArgumentError, match=message):
        call(consumer)
    assert consumer.assignment() == [("t", 0)] and consumer.position("t", 0) == 1
    assert consumer.committed() == {("t", 0): 1}
    consumer.close()


def test_consumer_refuses_bad_topics_and_callbacks(fab):
    fab.create_topic("t")
    with pytest.raises(InvalidTopicError, match="must be a string, got list"):
        fab.consumer(["t"])
    with pytest.raises(InvalidArgumentError, match="on_assign and on_revoke must be functions"):
        fab.consumer("t", group_id="g", on_assign=5)
    consumer = fab.consumer("t")
    with pytest.raises(UnknownTopicError):
        consumer.subscribe(["t", "missing"])
    assert consumer.subscription() == ["t"]  # unchanged
    consumer.subscribe("t")  # one topic, as a str
    assert consumer.subscription() == ["t"] and consumer.assignment() == [("t", 0)]
    consumer.subscribe([])  # as Kafka: unsubscribe
    assert consumer.subscription() == [] and consumer.assignment() == []
