"""Rebalance callbacks given as each client gives them, on every kind of cluster: confluent-kafka's
subscribe(on_assign=, on_revoke=) called with the consumer (and its librdkafka habit of assign() inside on_assign
to start the partitions at OFFSET_BEGINNING), kafka-python's subscribe(listener=...), and confluent-kafka's
logical offsets in seek() and assign()."""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidArgumentError, InvalidConfigError
from fabric.common.waiting import wait_for
from fabric.kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, Consumer, KafkaConsumer, TopicPartition

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
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "billing", "auto.offset.reset": "latest"})

    def on_assign(c, partitions):
        calls.append(("assign", c is consumer, sorted(partitions)))
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
