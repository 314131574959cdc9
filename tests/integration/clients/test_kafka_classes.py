"""kafka-python's and confluent-kafka's client classes (fabric.kafka), as their programs construct them, on every
kind of cluster: the fabric named where they name brokers, each client closing the connection it opened."""
from __future__ import annotations

import pytest

from fabric.errors import KafkaException
from fabric.kafka import (
    AdminClient,
    Consumer,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
    NewTopic,
    Producer,
    TopicPartition,
)


def test_kafka_python_classes(fab):
    admin = KafkaAdminClient(bootstrap_servers=fab.url, client_id="setup")
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result()
    admin.close()
    producer = KafkaProducer(bootstrap_servers=fab.url, value_serializer=str.encode, linger_ms=1)
    metas = [producer.send("orders", f"order-{i}", partition=i % 2).get(timeout=30) for i in range(4)]
    producer.close()
    assert sorted((m.partition, m.offset) for m in metas) == [(0, 0), (0, 1), (1, 0), (1, 1)]

    consumer = KafkaConsumer("orders", bootstrap_servers=fab.url, group_id="billing",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000)
    values = sorted(m.value for m in consumer)
    consumer.commit()
    consumer.close()
    assert values == [f"order-{i}".encode() for i in range(4)]
    assert {tp: o.committed for o in fab.describe_group("billing") for tp in [(o.topic, o.partition)]} == {
        ("orders", 0): 2, ("orders", 1): 2}

    with KafkaConsumer(bootstrap_servers=fab.url, group_id="audit", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", 1)])
        polled: dict = {}
        while not polled:
            polled = consumer.poll(timeout_ms=1000, max_records=1)
        assert [(tp, [r.value for r in records]) for tp, records in polled.items()] == [
            (TopicPartition("orders", 1), [b"order-1"])]
        consumer.close(autocommit=False)  # (auto-commit is on: without autocommit=False it would commit 1)
    assert "audit" not in fab.list_groups()


def test_confluent_kafka_classes(fab):
    admin = AdminClient({"bootstrap.servers": fab.url})
    admin.create_topics([NewTopic("orders", num_partitions=2)])["orders"].result()
    admin.close()
    reports = []
    producer = Producer({"bootstrap.servers": fab.url, "linger.ms": 1})
    for i in range(4):
        producer.produce("orders", f"order-{i}".encode(), partition=i % 2,
                         callback=lambda err, msg: reports.append((err, msg.partition(), msg.offset())))
        producer.poll(0)
    assert producer.flush() == 0
    producer.close()
    assert sorted(reports) == [(None, 0, 0), (None, 0, 1), (None, 1, 0), (None, 1, 1)]

    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    seen = []
    while len(seen) < 4:
        msg = consumer.poll(10.0)
        assert msg is not None and msg.error() is None
        seen.append((msg.topic(), msg.partition(), msg.offset(), msg.value(), msg.timestamp()[0]))
    assert consumer.poll(0.2) is None
    consumer.commit(message=msg, asynchronous=False)  # the offset after the last message of its partition
    committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed([TopicPartition("orders", 0),
                                                                                  TopicPartition("orders", 1)])}
    consumer.close()
    assert sorted(s[3] for s in seen) == [f"order-{i}".encode() for i in range(4)]
    assert {s[4] for s in seen} == {1}  # confluent-kafka's TIMESTAMP_CREATE_TIME
    assert committed[(msg.topic(), msg.partition())] == msg.offset() + 1


def test_bad_servers_and_configs_are_refused_naming_the_fix(fab):
    with pytest.raises(KafkaException, match="bootstrap servers are host:port"):
        KafkaProducer(bootstrap_servers="localhost")
    fab.create_topic("listed")
    with KafkaProducer(bootstrap_servers=[fab.url]) as listed:  # (kafka-python's list, of the fabric's URL)
        assert listed.send("listed", b"v").get(timeout=30).offset == 0
    with pytest.raises(KafkaException, match="unknown admin config 'nosuch'; known keys: client_id"):
        KafkaAdminClient(bootstrap_servers=fab.url, nosuch=1)
    with pytest.raises(KafkaException, match="Consumer\\(\\) takes a dict of Kafka's config names"):
        Consumer(["bootstrap.servers"])
    with KafkaConsumer(bootstrap_servers=fab.url) as consumer:
        with pytest.raises(KafkaException, match="poll\\(\\) timeout_ms must be a number of milliseconds >= 0, "
                           "got -1"):
            consumer.poll(timeout_ms=-1)


def test_confluent_messages_of_empty_values_and_tombstones_are_truthy(fab):
    """`if not msg: continue` (a common confluent-kafka loop) must skip no empty value or tombstone."""
    fab.create_topic("table")
    reports = []
    producer = Producer({"bootstrap.servers": fab.url})
    for value in (b"", None):
        producer.produce("table", value, key=b"k", on_delivery=lambda err, msg: reports.append(msg))
    producer.flush()
    producer.close()
    assert [bool(m) for m in reports] == [True, True] and [len(m) for m in reports] == [0, 0]
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["table"])
    messages = [consumer.poll(10.0), consumer.poll(10.0)]
    consumer.close()
    assert all(messages) and [m.value() for m in messages] == [b"", None]


def test_confluent_consumer_assignment_and_watermark_calls(fab):
    """confluent-kafka's incremental_assign / incremental_unassign / unassign on partitions given by hand (the
    others keep their positions), get_watermark_offsets asked and cached, and memberid()."""
    fab.create_topic("orders", partitions=2)
    with fab.producer() as producer:
        for i in range(4):
            producer.send("orders", b"order-%d" % i, partition=i % 2)
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "by-hand", "auto.offset.reset": "earliest"})
    try:
        assert consumer.memberid() is None  # no member: nothing subscribed
        consumer.incremental_assign([p0])
        got = [consumer.poll(10.0), consumer.poll(10.0)]
        assert [(m.partition(), m.offset()) for m in got] == [(0, 0), (0, 1)]
        consumer.incremental_assign([TopicPartition("orders", 1, 1)])  # from offset 1; partition 0 stays at 2
        got = consumer.poll(10.0)
        assert (got.partition(), got.offset()) == (1, 1) and consumer.poll(0.2) is None
        assert consumer.get_watermark_offsets(p0) == (0, 2)
        assert consumer.get_watermark_offsets(p1, cached=True) == (-1001, 2)
        assert consumer.get_watermark_offsets(TopicPartition("other", 0), cached=True) == (-1001, -1001)
        consumer.incremental_unassign([p0])
        assert consumer.assignment() == [p1] and consumer.position(p1) == 2
        consumer.unassign()
        assert consumer.assignment() == []
    finally:
        consumer.close()
    member = Consumer({"bootstrap.servers": fab.url, "group.id": "joined", "auto.offset.reset": "earliest"})
    try:
        member.subscribe(["orders"])
        assert member.poll(10.0) is not None
        assert isinstance(member.memberid(), str) and member.memberid()
        with pytest.raises(KafkaException, match=r"unsubscribe\(\) first"):
            member.unassign()
    finally:
        member.close()


def test_confluent_at_least_once_commits_only_the_offsets_stored(fab):
    """confluent-kafka's at-least-once pattern: enable.auto.offset.store=False, and store_offsets(msg) once a
    message is processed; commit() (and auto-commit) commit what was stored, not what poll() handed out."""
    fab.create_topic("orders")
    with fab.producer() as producer:
        for i in range(5):
            producer.send("orders", b"order-%d" % i)
    tp = TopicPartition("orders", 0)
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "careful", "auto.offset.reset": "earliest",
                         "enable.auto.offset.store": False, "auto.commit.interval.ms": 3_600_000})
    try:
        consumer.subscribe(["orders"])
        messages = [consumer.poll(10.0) for _ in range(5)]
        assert [m.offset() for m in messages] == [0, 1, 2, 3, 4]
        consumer.commit(asynchronous=False)  # nothing stored yet: nothing committed
        assert tp not in fab.cluster.coordinator.committed("careful")
        consumer.store_offsets(messages[1])  # processed up to offset 1
        consumer.commit(asynchronous=False)
        assert fab.cluster.coordinator.committed("careful")[tp].offset == 2
        consumer.store_offsets(offsets=[TopicPartition("orders", 0, 4)])
        with pytest.raises(KafkaException, match="not assigned to this consumer"):
            consumer.store_offsets(offsets=[TopicPartition("orders", 1, 1)])
        consumer.close()  # auto-commit on: a member commits what is stored as it leaves
        assert fab.cluster.coordinator.committed("careful")[tp].offset == 4
    finally:
        consumer.close()
    default = Consumer({"bootstrap.servers": fab.url, "group.id": "eager", "auto.offset.reset": "earliest"})
    try:
        default.subscribe(["orders"])
        assert default.poll(10.0) is not None
        with pytest.raises(KafkaException, match="enable.auto.offset.store=False"):
            default.store_offsets(offsets=[tp])
    finally:
        default.close()
