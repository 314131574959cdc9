"""Lookups answered in the shape of the client a program was written for, on every kind of cluster:
confluent-kafka's Consumer answers lists of TopicPartitions carrying offsets (OFFSET_INVALID where none is),
kafka-python's offsets_for_times answers OffsetAndTimestamp with the found record's own timestamp, as Kafka's
ListOffsets by time does, and so does the admin client's list_offsets."""
from __future__ import annotations

import time

import pytest

from fabric.errors import KafkaException
from fabric.kafka import (
    AdminClient,
    Consumer,
    KafkaConsumer,
    KafkaProducer,
    OffsetAndTimestamp,
    OffsetSpec,
    TopicPartition,
)


@pytest.fixture
def stamped(fab) -> int:
    """Topic `events` of two partitions; partition 0 holds records stamped t, t + 1 s, t + 2 s (t an hour ago,
    within the topic's retention), partition 1 one record stamped t + 2 s. Returns t (ms)."""
    t = int(time.time() * 1000) - 3_600_000
    fab.create_topic("events", partitions=2)
    with fab.producer() as producer:
        for i in range(3):
            producer.send("events", f"e{i}".encode(), partition=0, timestamp=t + 1000 * i)
        producer.send("events", b"late", partition=1, timestamp=t + 2000)
    return t


def test_confluent_consumer_answers_lists_of_topic_partitions(fab, stamped):
    p0, p1 = TopicPartition("events", 0), TopicPartition("events", 1)
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "billing", "enable.auto.commit": False})
    try:
        consumer.assign([p0, TopicPartition("events", 1, 1)])
        consumer.commit(offsets=[TopicPartition("events", 0, 2)], asynchronous=False)
        committed = consumer.committed([p0, p1], timeout=10)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 2), (1, -1001)]
        assert committed[0].offset == 2  # (a list: indexed as confluent-kafka's users index it)
        assert [(tp.partition, tp.offset) for tp in consumer.committed()] == [(0, 2), (1, -1001)]
        assert [tp.offset for tp in consumer.committed([p0], 5.0)] == [2]  # (the timeout given positionally)
        with pytest.raises(KafkaException, match="committed\\(\\) timeout must be a number of seconds"):
            consumer.committed([p0], "soon")
        # (partition 1 from the offset assign() gave, partition 0 from the group's commit)
        assert [(tp.partition, tp.offset) for tp in consumer.position([p1, p0])] == [(1, 1), (0, 2)]

        found = consumer.offsets_for_times([TopicPartition("events", 0, stamped + 500),
                                            TopicPartition("events", 1, stamped + 2000),
                                            TopicPartition("events", 1, stamped + 2001)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in found] == [(0, 1), (1, -1)]  # (the last pair named wins)
        assert [tp.offset for tp in consumer.offsets_for_times([TopicPartition("events", 0, stamped)])] == [0]
        assert [tp.offset for tp in consumer.offsets_for_times({p0: stamped + 1})] == [1]  # (kafka-python's form)
        with pytest.raises(KafkaException, match=r"with its time \(ms\) as its offset"):
            consumer.offsets_for_times([p0])
        with pytest.raises(KafkaException, match="must be an integer from 0"):
            consumer.offsets_for_times([TopicPartition("events", 0, -2)])
        assert consumer.position(p0) == 2 and consumer.committed(p1) is None  # (the fabric's one-partition forms)
    finally:
        consumer.close()


def test_kafka_python_offsets_for_times_carry_the_found_records_timestamp(fab, stamped):
    consumer = KafkaConsumer(bootstrap_servers=fab.url)
    producer = KafkaProducer(bootstrap_servers=fab.url)
    try:
        found = consumer.offsets_for_times({TopicPartition("events", 0): stamped + 1,
                                            TopicPartition("events", 1): stamped + 2001})
        assert found == {TopicPartition("events", 0): OffsetAndTimestamp(1, stamped + 1000),
                         TopicPartition("events", 1): None}
        assert found[TopicPartition("events", 0)].timestamp == stamped + 1000
        assert consumer.bootstrap_connected() and producer.bootstrap_connected()
        with pytest.raises(KafkaException, match="must be an integer from 0"):
            consumer.offsets_for_times({TopicPartition("events", 0): -5})
    finally:
        consumer.close()
        producer.close()


def test_list_offsets_by_time_answers_the_found_records_timestamp(fab, stamped):
    admin = AdminClient({"bootstrap.servers": fab.url})
    try:
        asked = {TopicPartition("events", 0): OffsetSpec.for_timestamp(stamped + 1500),
                 TopicPartition("events", 1): OffsetSpec.for_timestamp(stamped + 2001)}
        answers = {tp: future.result() for tp, future in admin.list_offsets(asked).items()}
        assert [(a.offset, a.timestamp) for a in answers.values()] == [(2, stamped + 2000), (-1, -1)]
        latest = admin.list_offsets({TopicPartition("events", 0): OffsetSpec.latest()})
        assert [(a.offset, a.timestamp) for a in (f.result() for f in latest.values())] == [(3, -1)]
    finally:
        admin.close()


def test_a_principal_that_may_only_describe_the_topic_gets_the_offset_by_time_without_its_timestamp(
        secured_service):
    """A time lookup needs `describe` on the topic, as Kafka's ListOffsets; reading the found record's timestamp
    needs `read`, so a principal without it gets the offset and timestamp -1, not an AuthorizationError."""
    import fabric
    instance = secured_service({"admin-secret": "admin", "viewer-secret": "viewer"}, "viewer describe topic:events\n")
    stamp = int(time.time() * 1000) - 3_600_000  # (an hour ago: within the topic's retention)
    with fabric.connect(instance.url("token=admin-secret")) as admin_fab:
        admin_fab.create_topic("events")
        with admin_fab.producer() as producer:
            producer.send("events", b"e0", timestamp=stamp).get(timeout=30)
    spec = {TopicPartition("events", 0): OffsetSpec.for_timestamp(stamp - 1000)}
    for token, timestamp in (("admin-secret", stamp), ("viewer-secret", -1)):
        admin = AdminClient({"bootstrap.servers": instance.url(f"token={token}")})
        try:
            answer = admin.list_offsets(spec)[TopicPartition("events", 0)].result()
            assert (answer.offset, answer.timestamp) == (0, timestamp), token
        finally:
            admin.close()


def test_list_offsets_max_timestamp_answers_the_first_record_of_the_largest_timestamp(fab, stamped):
    """KIP-734: the record with the largest timestamp, not the last one; the first of two that share it; -1 for a
    partition with no record."""
    fab.create_topic("spare")
    with fab.producer() as producer:  # partition 0 now: t, t + 1 s, t + 2 s, t + 5 s, t + 3 s, t + 5 s
        for shift in (5000, 3000, 5000):
            producer.send("events", b"more", partition=0, timestamp=stamped + shift)
    admin = AdminClient({"bootstrap.servers": fab.url})
    try:
        asked = {TopicPartition("events", 0): OffsetSpec.max_timestamp(),
                 TopicPartition("events", 1): OffsetSpec.max_timestamp(),
                 TopicPartition("spare", 0): OffsetSpec.max_timestamp()}
        answers = [f.result() for f in admin.list_offsets(asked).values()]
        assert [(a.offset, a.timestamp) for a in answers] == [(3, stamped + 5000), (0, stamped + 2000), (-1, -1)]
    finally:
        admin.close()
