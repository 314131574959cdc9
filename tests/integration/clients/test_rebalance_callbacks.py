"""Rebalance callbacks given as each client gives them, on every kind of cluster: confluent-kafka's
subscribe(on_assign=, on_revoke=) called with the consumer (and its librdkafka habit of assign() inside on_assign
to start the partitions at OFFSET_BEGINNING), kafka-python's subscribe(listener=...), and confluent-kafka's
logical offsets in seek() and assign(); and a member answering poll() from its prefetch buffer still polls the
group (max_poll_interval_ms, rebalances)."""
from __future__ import annotations

import time

import pytest

from fabric.common.errors import InvalidArgumentError, InvalidConfigError
from fabric.common.types import GroupStatus
from fabric.common.waiting import wait_for
from fabric.kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    OFFSET_STORED,
    Consumer,
    KafkaConsumer,
    TopicPartition,
)

P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


@pytest.fixture
def orders(fab) -> None:
    """orders: 2 partitions of 3 records each."""
    fab.create_topic("orders", partitions=2)
    with fab.producer() as producer:
        for i in range(6):
            producer.send("orders", b"order-%d" % i, partition=i % 2)


def test_confluent_callbacks_get_the_consumer_and_assign_inside_on_assign_sets_the_start(fab, orders):
    calls: list[tuple[str, bool, list]] = []
    offsets: list[list] = []
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "billing", "auto.offset.reset": "latest"})

    def on_assign(c, partitions):
        calls.append(("assign", c is consumer, sorted(partitions)))
        offsets.append([tp.offset for tp in partitions])  # confluent-kafka's: OFFSET_INVALID, no position yet
        for tp in partitions:
            tp.offset = OFFSET_BEGINNING  # (the group has no commit and the reset is latest: start over instead)
        c.assign(partitions)

    consumer.subscribe(["orders"], on_assign=on_assign,
                       on_revoke=lambda c, partitions: calls.append(("revoke", c is consumer, sorted(partitions))))
    seen: list = []
    wait_for(lambda: seen.extend(m for m in [consumer.poll(0.5)] if m is not None) or len(seen) == 6, 60,
             "the member to read the 6 records from the start")
    assert sorted(m.value() for m in seen) == [b"order-%d" % i for i in range(6)]
    assert sorted(consumer.assignment()) == [P0, P1]  # (assign() inside on_assign kept the group's partitions)
    consumer.close()
    assert calls == [("assign", True, [P0, P1]), ("revoke", True, [P0, P1])]
    assert offsets == [[OFFSET_INVALID, OFFSET_INVALID]]


def test_a_confluent_subscription_to_a_regular_expression(fab, orders):
    fab.create_topic("other")
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "by-pattern", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["^ord.*"])
        assert consumer.subscription() == ["orders"] and sorted(consumer.assignment()) == [P0, P1]  # (not "other")
    finally:
        consumer.close()


def test_a_kafka_python_listener_hears_assignments_and_revocations(fab, orders):
    heard: list[tuple[str, list]] = []

    class Listener:
        def on_partitions_assigned(self, assigned):
            heard.append(("assigned", sorted(assigned)))

        def on_partitions_revoked(self, revoked):
            heard.append(("revoked", sorted(revoked)))

    consumer = KafkaConsumer(bootstrap_servers=fab.url, group_id="audit", auto_offset_reset="earliest")
    consumer.subscribe(topics=["orders"], listener=Listener())
    wait_for(lambda: consumer.poll(timeout_ms=500) or heard, 60, "the member to join")
    assert heard[0] == ("assigned", [P0, P1]) and all(tp.topic == "orders" for tp in heard[0][1])
    consumer.close()
    assert heard[-1] == ("revoked", [P0, P1])


def test_logical_offsets_in_seek_and_assign(fab, orders):
    with fab.consumer(group_id="reports", auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.assign([TopicPartition("orders", 0, OFFSET_END), TopicPartition("orders", 1)])
        assert consumer.position(P0) == 3 and consumer.position(P1) == 0
        consumer.seek(TopicPartition("orders", 0, OFFSET_BEGINNING))
        assert consumer.position(P0) == 0
        consumer.commit({P1: 2})
        consumer.seek(TopicPartition("orders", 1, OFFSET_END))
        assert consumer.position(P1) == 3
        consumer.seek(TopicPartition("orders", 1, OFFSET_STORED))  # (back to the group's commit)
        assert consumer.position(P1) == 2
        with pytest.raises(InvalidArgumentError, match="seek\\(\\) offset must be an integer from 0"):
            consumer.seek(TopicPartition("orders", 1, -7))
        with pytest.raises(InvalidArgumentError, match="seek\\(\\) offset must be an integer from 0"):
            consumer.seek(P1, OFFSET_END)  # (a bare -1 beside the partition: kafka-python's form, refused there)


def test_callbacks_given_wrongly_are_refused_naming_the_fix(fab, orders):
    with fab.consumer() as loner:
        with pytest.raises(InvalidConfigError, match="create the consumer with a group"):
            loner.subscribe(["orders"], on_assign=lambda c, p: None)
    with fab.consumer(group_id="g") as member:
        with pytest.raises(InvalidArgumentError, match="listener= .* or on_assign="):
            member.subscribe(["orders"], on_assign=lambda c, p: None, listener=object())
        with pytest.raises(InvalidArgumentError, match="takes a ConsumerRebalanceListener"):
            member.subscribe(["orders"], listener=object())
        with pytest.raises(InvalidArgumentError, match="on_revoke must be a function"):
            member.subscribe(["orders"], on_revoke="print")
        assert member.subscription() == []  # (nothing was subscribed by the refused calls)


GROUP_TIMING = dict(max_poll_interval_ms=3000, session_timeout_ms=6000, heartbeat_interval_ms=100)


def produce_many(fab, topic: str, partitions: int, per_partition: int) -> None:
    """Small records, so one fetch buffers them all and poll(max_records=1) drains them for seconds."""
    fab.create_topic(topic, partitions=partitions)
    with fab.producer() as producer:
        for i in range(partitions * per_partition):
            producer.send(topic, b"%s-%d" % (topic.encode(), i), partition=i % partitions)


def test_polling_from_the_buffer_counts_as_polling_for_max_poll_interval(fab):
    produce_many(fab, "clicks", 1, 2000)
    consumer = fab.consumer("clicks", group_id="dashboard", auto_offset_reset="earliest", enable_auto_commit=False,
                            **GROUP_TIMING)
    try:
        got: list = []
        wait_for(lambda: got.extend(consumer.poll(0.5, max_records=1)) or got, 60, "the member to join and fetch")
        started = time.monotonic()  # (one record every 5 ms: the 2000 buffered last well past max_poll_interval_ms)
        wait_for(lambda: got.extend(consumer.poll(0, max_records=1)) or time.monotonic() - started > 4.5, 60,
                 "the member to poll for longer than max_poll_interval_ms", interval=0.005)
        assert [r.offset for r in got] == list(range(len(got)))
        group = fab.describe_consumer_group("dashboard")
        assert (group.state, len(group.members)) == (GroupStatus.STABLE, 1)
        consumer.commit()  # (still the group's member: the commit's generation is current)
        assert consumer.committed(TopicPartition("clicks", 0)) == len(got)
    finally:
        consumer.close()


def test_a_rebalance_drops_what_the_first_member_buffered_of_partitions_it_gave_up(fab):
    produce_many(fab, "trades", 2, 1000)
    every = {(p, o) for p in range(2) for o in range(1000)}
    revoked: list = []
    got: dict[str, list] = {"first": [], "second": []}
    first = fab.consumer("trades", group_id="settlement", auto_offset_reset="earliest", on_revoke=revoked.append,
                         **GROUP_TIMING)
    second = None
    try:
        wait_for(lambda: got["first"].extend(first.poll(0.5, max_records=1)) or got["first"], 60,
                 "the first member to join and buffer both partitions")
        second = fab.consumer("trades", group_id="settlement", auto_offset_reset="earliest", **GROUP_TIMING)

        def a_round(timeout: float = 0) -> bool:
            """Both members poll; the first one record at a time until the rebalance (its buffer lasts seconds)."""
            few = 100 if revoked or got["second"] else 1
            got["first"].extend(first.poll(timeout, max_records=few))
            got["second"].extend(second.poll(timeout, max_records=100))
            return every <= {(r.partition, r.offset) for records in got.values() for r in records}

        wait_for(a_round, 60, "the two members to read every record", interval=0.005)
        a_round(0.2)  # (drained: neither has anything more to deliver)
        delivered = {name: {(r.partition, r.offset) for r in records} for name, records in got.items()}
        assert delivered["first"] & delivered["second"] == set()
        assert delivered["first"] | delivered["second"] == every
        assert revoked and sorted(revoked[0]) == [("trades", 0), ("trades", 1)]  # (range: eager, all revoked)
    finally:
        first.close()
        if second is not None:
            second.close()
