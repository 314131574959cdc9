"""Commits typed as each of Kafka's Python clients types them, metadata included, on every kind of cluster:
kafka-python's commit({tp: OffsetAndMetadata(offset, metadata)}) (metadata None stores none) and confluent-kafka's
commit(offsets=[TopicPartition(topic, partition, offset, metadata)]); partitions with different metadata each keep
their own, read back by kafka-python's committed(tp, metadata=True) and confluent-kafka's committed([tp])."""
from __future__ import annotations

import pytest

from fabric.errors import KafkaError
from fabric.kafka import Consumer, KafkaConsumer, OffsetAndMetadata, TopicPartition


@pytest.fixture
def topic(fab) -> str:
    fab.create_topic("noted", partitions=2)
    with fab.producer() as producer:
        for partition in (0, 1):
            for i in range(3):
                producer.send("noted", f"r{i}".encode(), partition=partition)
    return "noted"


def test_kafka_python_commits_offset_and_metadata_values(fab, topic):
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = KafkaConsumer(bootstrap_servers=fab.url, group_id="noting", enable_auto_commit=False)
    try:
        consumer.assign([p0, p1])
        consumer.commit({p0: OffsetAndMetadata(2, None), p1: OffsetAndMetadata(3, "batch-7", -1)})
        assert consumer.committed(p0, metadata=True) == OffsetAndMetadata(2, "")
        assert consumer.committed(p1, metadata=True) == OffsetAndMetadata(3, "batch-7")
        assert consumer.committed(p1) == 3
        consumer.commit({p0: OffsetAndMetadata(3, "batch-8"), p1: OffsetAndMetadata(1, "batch-8")})
        assert [consumer.committed(tp, metadata=True) for tp in (p0, p1)] == [
            OffsetAndMetadata(3, "batch-8"), OffsetAndMetadata(1, "batch-8")]
        with pytest.raises(KafkaError, match=r"the metadata commit\(\) stores for .* is a string or None, got"):
            consumer.commit({p0: OffsetAndMetadata(1, b"bytes")})
        assert consumer.committed(p0) == 3  # nothing of the refused commit was stored
    finally:
        consumer.close()


def test_confluent_commits_topic_partitions_carrying_metadata(fab, topic):
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "noting-confluent", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        noted = TopicPartition(topic, 0, 2, "from-confluent")
        assert (noted.offset, noted.metadata, noted) == (2, "from-confluent", (topic, 0))
        consumer.commit(offsets=[noted, TopicPartition(topic, 1, 1)], asynchronous=False)
        assert [(tp.offset, tp.metadata) for tp in consumer.committed([TopicPartition(topic, 0),
                                                                      TopicPartition(topic, 1)])] == [
            (2, "from-confluent"), (1, None)]  # (confluent-kafka's committed() carries the metadata)
    finally:
        consumer.close()
    reader = KafkaConsumer(bootstrap_servers=fab.url, group_id="noting-confluent", enable_auto_commit=False)
    try:
        assert reader.committed(TopicPartition(topic, 0), metadata=True) == OffsetAndMetadata(2, "from-confluent")
        assert reader.committed(TopicPartition(topic, 1), metadata=True) == OffsetAndMetadata(1, "")
    finally:
        reader.close()
