"""The consumer methods Kafka's Python clients have, on every kind of cluster: TopicPartition objects, pattern
subscription that picks up topics created later, pause / resume, commit_async, partitions_for, commit({})
committing nothing, and deserializers."""
from __future__ import annotations

import json
import threading
import time

import pytest

import fabric
from fabric import TopicPartition
from fabric.common.errors import InvalidArgumentError, InvalidConfigError, UnknownPartitionError
from fabric.common.waiting import wait_for


def fill(fab, topic: str, partitions: int = 2, per_partition: int = 3) -> None:
    fab.create_topic(topic, partitions=partitions)
    with fab.producer() as producer:
        for p in range(partitions):
            for i in range(per_partition):
                producer.send(topic, f"{topic}-{p}-{i}".encode(), partition=p)


def test_partitions_come_back_as_topic_partitions_and_are_accepted_as_pairs(fab):
    fill(fab, "orders")
    with fab.consumer(group_id="g", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", 0), ("orders", 1)])
        assigned = consumer.assignment()
        assert assigned == [TopicPartition("orders", 0), TopicPartition("orders", 1)] == [("orders", 0), ("orders", 1)]
        assert (assigned[1].topic, assigned[1].partition) == ("orders", 1)
        ends = consumer.end_offsets(assigned)
        assert ends == {("orders", 0): 3, ("orders", 1): 3} and all(isinstance(tp, TopicPartition) for tp in ends)
        assert repr(next(iter(consumer.beginning_offsets([("orders", 0)])))) == \
            "TopicPartition(topic='orders', partition=0)"
        consumer.commit({TopicPartition("orders", 0): 2})
        committed = consumer.committed()
        assert committed == {("orders", 0): 2, ("orders", 1): None}
        assert all(isinstance(tp, TopicPartition) for tp in committed)
        assert consumer.partitions_for("orders") == consumer.partitions_for_topic("orders") == {0, 1}


def test_commit_of_an_empty_dict_commits_nothing(fab, drain):
    fill(fab, "orders", partitions=1)
    with fab.consumer("orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        drain(consumer, 3)
        consumer.commit({})
        assert consumer.committed([("orders", 0)]) == {("orders", 0): None}
        consumer.commit()
        assert consumer.committed([("orders", 0)]) == {("orders", 0): 3}


def test_pattern_subscription_follows_topics_created_later(fab, drain):
    fill(fab, "events-a", partitions=1)
    fill(fab, "other", partitions=1)
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.subscribe(pattern="^events-.*")
        assert consumer.subscription() == ["events-a"]
        assert sorted(r.value for r in drain(consumer, 3)) == [b"events-a-0-0", b"events-a-0-1", b"events-a-0-2"]
        fill(fab, "events-b", partitions=1)
        wait_for(lambda: consumer.poll(0.1) == [] and "events-b" in consumer.subscription(), 30,
                 "the pattern subscription to pick up events-b")
        consumer.seek_to_beginning(("events-b", 0))
        assert sorted(r.value for r in drain(consumer, 3)) == [b"events-b-0-0", b"events-b-0-1", b"events-b-0-2"]


def test_a_topic_the_pattern_picks_up_is_assigned_in_the_same_poll(fab):
    """The pattern's topics and the partitions read are refreshed on timers of their own: a poll that finds a new
    topic assigns its partitions at once, even when the assignment's own refresh is not due (the consumer's
    timers are set so), so assignment() never lags subscription()."""
    fill(fab, "events-a", partitions=1)
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.subscribe(pattern="^events-.*")
        fill(fab, "events-b", partitions=2)
        consumer._pattern_at, consumer._metadata_at = 0.0, time.monotonic() + 3600
        consumer.poll(0)
        assert consumer.subscription() == ["events-a", "events-b"]
        assert sorted(consumer.assignment()) == [("events-a", 0), ("events-b", 0), ("events-b", 1)]


def test_a_group_member_with_a_pattern_is_assigned_new_topics(fab, drain):
    fill(fab, "logs-1", partitions=1)
    with fab.consumer(group_id="pattern-group", auto_offset_reset="earliest") as consumer:
        consumer.subscribe(pattern=r"logs-\d+")
        assert len(drain(consumer, 3)) == 3
        fill(fab, "logs-2", partitions=1)
        records = drain(consumer, 3)
        assert {r.topic for r in records} == {"logs-2"}
        assert set(consumer.assignment()) == {("logs-1", 0), ("logs-2", 0)}


def test_bad_patterns_are_refused(fab):
    with fab.consumer() as consumer:
        with pytest.raises(InvalidArgumentError, match="not a regular expression"):
            consumer.subscribe(pattern="(")
        with pytest.raises(InvalidArgumentError, match="topics or pattern=, not both"):
            consumer.subscribe(["a"], pattern="a")


def test_pause_stops_fetching_a_partition_until_resumed(fab, drain):
    fill(fab, "orders", partitions=2)
    with fab.consumer(auto_offset_reset="earliest", max_poll_records=1) as consumer:
        consumer.assign([("orders", 0), ("orders", 1)])
        first = drain(consumer, 1)  # may leave fetched records of its partition buffered
        held = TopicPartition(first[0].topic, first[0].partition)
        consumer.pause(held)
        assert consumer.paused() == {held}
        other = drain(consumer, 3)
        assert {r.partition for r in other} == {1 - held.partition}
        assert consumer.poll(0.2) == []  # only the paused partition has records left
        consumer.resume(held)
        rest = drain(consumer, 2)
        assert [r.offset for r in rest] == [1, 2] and consumer.paused() == set()  # nothing skipped, nothing twice
        with pytest.raises(UnknownPartitionError, match="not assigned"):
            consumer.pause(("orders", 7))


def test_commit_async_commits_in_order_and_calls_back(fab, drain):
    fill(fab, "orders", partitions=1)
    done = threading.Event()
    seen: list = []
    with fab.consumer("orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        drain(consumer, 3)
        first = consumer.commit_async({("orders", 0): 1})
        second = consumer.commit_async(callback=lambda offsets, error: (seen.append((offsets, error)), done.set()))
        assert second.result(timeout=30) is None and first.done()
        assert done.wait(30) and seen == [({("orders", 0): 3}, None)]
        assert isinstance(next(iter(seen[0][0])), TopicPartition)
        assert consumer.committed() == {("orders", 0): 3}
        failed = consumer.commit_async({("orders", 5): 1})  # no such partition: refused by the coordinator
        assert isinstance(failed.exception(timeout=30), UnknownPartitionError)
    assert fabric.connect(fab.url).list_groups() == ["g"]


def test_deserializers_turn_keys_and_values(fab, drain):
    fab.create_topic("events", partitions=1)
    with fab.producer(value_serializer=lambda v: json.dumps(v).encode()) as producer:
        producer.send("events", {"n": 1}, key=b"k")
        producer.send("events", None, key=b"k")
        producer.send("events", {"n": 2}, key=b"k2", headers=[("h", b"vv")])
    with fab.consumer("events", auto_offset_reset="earliest", value_deserializer=json.loads,
                      key_deserializer=bytes.decode) as consumer:
        records = drain(consumer, 3)
    assert [(r.key, r.value) for r in records] == [("k", {"n": 1}), ("k", None), ("k2", {"n": 2})]
    # kafka-python's ConsumerRecord fields beside them: the sizes as stored, not as deserialized
    assert [(r.serialized_key_size, r.serialized_value_size, r.serialized_header_size) for r in records] == [
        (1, 8, -1), (1, -1, -1), (2, 8, 3)]
    assert (records[0].checksum, records[0].leader_epoch) == (None, -1)
    with pytest.raises(InvalidConfigError, match="value_deserializer must be a function"):
        fab.consumer(value_deserializer="json")


def test_a_failing_deserializer_names_the_record_and_how_to_skip_it(fab, drain):
    fab.create_topic("events", partitions=1)
    with fab.producer() as producer:
        producer.send("events", b"not json")
    with fab.consumer("events", auto_offset_reset="earliest", value_deserializer=json.loads) as consumer:
        with pytest.raises(InvalidArgumentError, match=r"events-0 offset 0 .*seek\('events', 0, 1\)"):
            wait_for(lambda: consumer.poll(0.2), 30, "a record")
