"""Commits typed as each of Kafka's Python clients types them, metadata included, on every kind of cluster:
kafka-python's commit({tp: OffsetAndMetadata(offset, metadata)}) (metadata None stores none) and confluent-kafka's
commit(offsets=[TopicPartition(topic, partition, offset, metadata)]); partitions with different metadata each keep
their own, read back by kafka-python's committed(tp, metadata=True) and confluent-kafka's committed([tp])."""
from __future__ import annotations

import pytest

from fabric.errors import KafkaError
from fabric.kafka import Consumer, KafkaConsumer, KafkaProducer, OffsetAndMetadata, Producer, TopicPartition


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


def test_offsets_sent_to_a_transaction_keep_each_partitions_metadata(fab, topic):
    """send_offsets_to_transaction typed as kafka-python does ({tp: OffsetAndMetadata}) and as confluent-kafka does
    ([TopicPartition(topic, partition, offset, metadata)], the consumer's group metadata): each partition's metadata
    is committed with the transaction; a partition sent again takes its new offset and metadata, the others keep
    theirs; metadata that is not a string is refused with nothing of it sent."""
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = KafkaProducer(bootstrap_servers=fab.url, transactional_id="noting-txn")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"out", partition=0)
        producer.send_offsets_to_transaction({p0: OffsetAndMetadata(1, "first"), p1: OffsetAndMetadata(2, "kept")},
                                             "noting-txn-group")
        producer.send_offsets_to_transaction({p0: OffsetAndMetadata(3, "again", -1)}, "noting-txn-group")
        with pytest.raises(KafkaError, match=r"the metadata send_offsets_to_transaction stores for .* is a string"):
            producer.send_offsets_to_transaction({p1: OffsetAndMetadata(3, 7)}, "noting-txn-group")
        producer.commit_transaction()
    finally:
        producer.close()
    reader = KafkaConsumer(bootstrap_servers=fab.url, group_id="noting-txn-group", enable_auto_commit=False)
    try:
        assert [reader.committed(tp, metadata=True) for tp in (p0, p1)] == [
            OffsetAndMetadata(3, "again"), OffsetAndMetadata(2, "kept")]
    finally:
        reader.close()

    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "noting-txn-confluent",
                         "enable.auto.commit": False})
    confluent = Producer({"bootstrap.servers": fab.url, "transactional.id": "noting-txn-confluent"})
    try:
        consumer.assign([p0, p1])
        confluent.init_transactions()
        confluent.begin_transaction()
        confluent.send_offsets_to_transaction([TopicPartition(topic, 0, 2, "from-confluent"),
                                               TopicPartition(topic, 1, 1)], consumer.consumer_group_metadata())
        confluent.commit_transaction()
        assert [(tp.offset, tp.metadata) for tp in consumer.committed([p0, p1])] == [(2, "from-confluent"),
                                                                                     (1, None)]
    finally:
        confluent.flush()
        consumer.close()
