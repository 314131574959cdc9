"""kafka-python's calls, typed as its users type them from memory, on every kind of cluster: a TopicPartition
per argument (seek(tp, offset), position(tp), committed(tp), pause(tp, ...)), the consumer's topics(),
highwater(tp) and metrics(), the producer's partitions_for(topic) and metrics(), an iteration that ends after
consumer_timeout_ms, and kafka-python's error names from fabric.errors."""
from __future__ import annotations

import time

import pytest

import fabric
from fabric import TopicPartition
from fabric.common.ports import free_port
from fabric.common.waiting import wait_for
from fabric.kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata


def fill(fab, topic: str, partitions: int, per_partition: int) -> None:
    fab.create_topic(topic, partitions=partitions)
    with fab.producer() as producer:
        for p in range(partitions):
            for i in range(per_partition):
                producer.send(topic, f"{p}-{i}".encode(), partition=p)


def test_seek_position_committed_and_pause_take_topic_partitions(fab, drain):
    fill(fab, "orders", partitions=3, per_partition=10)
    tp = TopicPartition("orders", 0)
    consumer = fab.consumer(group_id="billing", enable_auto_commit=False)
    consumer.assign([tp])
    assert consumer.committed(tp) is None
    consumer.seek(tp, 5)
    assert consumer.position(tp) == 5
    assert [r.offset for r in drain(consumer, 5)] == [5, 6, 7, 8, 9]
    assert consumer.position(tp) == 10
    consumer.commit()
    assert consumer.committed(tp) == 10
    assert consumer.committed(TopicPartition("orders", 1)) is None  # not assigned: asked of the group
    consumer.seek("orders", 0, 2)  # the fabric's own forms still work
    assert consumer.position("orders", 0) == 2
    assert consumer.committed([tp]) == {tp: 10}
    consumer.close()

    p0, p1, p2 = (TopicPartition("orders", p) for p in range(3))
    consumer = fab.consumer(auto_offset_reset="earliest")
    consumer.assign([p0, p1, p2])
    consumer.pause(p0, p1)
    assert consumer.paused() == {p0, p1}
    assert {r.partition for r in drain(consumer, 10)} == {2}
    consumer.resume(p0, p1)
    assert consumer.paused() == set()
    assert {r.partition for r in drain(consumer, 20)} == {0, 1}
    consumer.close()


def test_topics_highwater_partitions_for_metrics_and_consumer_timeout_ms(fab, drain):
    fill(fab, "orders", partitions=2, per_partition=3)
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    consumer = fab.consumer(auto_offset_reset="earliest")
    assert "orders" in consumer.topics()
    assert not any(topic.startswith("__") for topic in consumer.topics())
    consumer.assign([p0, p1])
    assert consumer.highwater(p0) is None  # nothing looked up or fetched yet
    records = drain(consumer, 6)
    assert consumer.highwater(p0) == consumer.highwater(p1) == 3
    consumer.seek(p0, 1)
    fetch = consumer.metrics()["consumer-fetch-manager-metrics"]
    assert fetch["records-consumed-total"] == 6
    assert fetch["bytes-consumed-total"] >= sum(len(r.value) for r in records)
    assert fetch["records-lag"] == {p0: 2, p1: 0} and fetch["records-lag-max"] == 2
    assert consumer.metrics()["consumer-coordinator-metrics"]["assigned-partitions"] == 2
    consumer.close()

    producer = fab.producer()
    assert producer.partitions_for("orders") == {0, 1}
    for i in range(4):
        producer.send("orders", b"x" * 10, partition=i % 2)
    producer.flush()
    sent = producer.metrics()["producer-metrics"]
    assert sent["record-send-total"] == 4 and sent["byte-total"] >= 40
    assert sent["record-error-total"] == 0
    producer.close()

    consumer = fab.consumer("orders", auto_offset_reset="earliest", consumer_timeout_ms=1000)
    assert sorted(message.value for message in consumer) == [b"0-0", b"0-1", b"0-2", b"1-0", b"1-1", b"1-2"] + \
        [b"x" * 10] * 4  # the loop ends once no record came for a second
    consumer.close()
    assert fab.consumer().config["consumer_timeout_ms"] == float("inf")  # kafka-python's default: forever


def test_kafka_python_error_names_catch_the_fabric_errors(fab):
    from fabric.errors import (
        IllegalStateError,
        KafkaError,
        MessageSizeTooLargeError,
        NoOffsetForPartitionError,
        UnknownTopicOrPartitionError,
    )
    fill(fab, "orders", partitions=1, per_partition=1)
    producer = fab.producer(max_request_size=100)
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send("no-such-topic", b"x")
    with pytest.raises(MessageSizeTooLargeError):
        producer.send("orders", b"x" * 1000)
    with pytest.raises(IllegalStateError):
        producer.begin_transaction()
    producer.close()
    consumer = fab.consumer(group_id="billing")
    with pytest.raises(UnknownTopicOrPartitionError):
        consumer.assign([TopicPartition("orders", 7)])
    fresh = fab.consumer(group_id="fresh", auto_offset_reset="none")
    fresh.assign([TopicPartition("orders", 0)])
    with pytest.raises(NoOffsetForPartitionError):
        fresh.poll(1)
    with pytest.raises(KafkaError):
        consumer.seek(TopicPartition("orders", 0), -1)
    consumer.close()


def test_no_brokers_available_when_nothing_answers():
    from fabric.errors import KafkaError, NoBrokersAvailable
    with pytest.raises(NoBrokersAvailable) as raised:
        fabric.connect(f"fabric://127.0.0.1:{free_port()}?timeout_ms=300").list_topics()
    assert isinstance(raised.value, KafkaError)


def test_fabric_errors_has_every_error_and_kafka_python_names_for_the_same_meaning():
    import fabric.errors
    from fabric.common import errors
    for name, value in vars(errors).items():
        if isinstance(value, type) and issubclass(value, (Exception, Warning)):
            assert getattr(fabric.errors, name) is value
    same = {"KafkaError": "FabricError", "CommitFailedError": "CommitFailedError",
            "NotLeaderForPartitionError": "NotLeaderError", "TopicAuthorizationFailedError": "AuthorizationError",
            "RecordTooLargeError": "RecordTooLargeError", "NoOffsetForPartitionError": "NoOffsetForPartitionError",
            "TopicAlreadyExistsError": "TopicExistsError", "UnknownMemberIdError": "UnknownMemberError",
            "KafkaTimeoutError": "ClientTimeoutError"}
    for kafka_name, fabric_name in same.items():
        assert getattr(fabric.errors, kafka_name) is getattr(errors, fabric_name)
    assert issubclass(errors.UnknownTopicError, errors.UnknownTopicOrPartitionError)
    assert issubclass(errors.UnknownPartitionError, errors.UnknownTopicOrPartitionError)


def test_send_timestamp_ms_and_poll_max_records(fab):
    """kafka-python's send(timestamp_ms=...) (its RecordMetadata's topic_partition too) and poll(max_records=...)."""
    fab.create_topic("stamps")
    stamp = int(time.time() * 1000) - 3_600_000  # an hour ago: within the topic's retention
    with fab.producer() as producer:
        meta = producer.send("stamps", b"a", timestamp_ms=stamp).get()
        for value in (b"b", b"c"):
            producer.send("stamps", value)
    assert (meta.offset, meta.topic_partition, meta.log_start_offset) == (0, TopicPartition("stamps", 0), -1)
    with fab.consumer("stamps", auto_offset_reset="earliest") as consumer:
        first = consumer.poll(10, max_records=1)
        assert [(r.value, r.timestamp) for r in first] == [(b"a", stamp)]
        rest = []
        while len(rest) < 2:
            rest += consumer.poll(10, max_records=2)
        assert [r.value for r in rest] == [b"b", b"c"]


def test_a_consume_transform_produce_loop_commits_with_the_group_id_while_its_consumer_is_a_member(fab):
    """kafka-python's transactional loop: send_offsets_to_transaction(offsets, group_id), its only form, names the
    group of the live KafkaConsumer that read the records. Kafka takes a producer transaction's offsets without a
    member (TxnOffsetCommit's clients before KIP-447) whatever the group's members; the commit becomes visible with
    the transaction's records, and the consumer's next committed() reads it."""
    fill(fab, "tx-in", partitions=1, per_partition=4)
    fab.create_topic("tx-out")
    consumer = KafkaConsumer("tx-in", bootstrap_servers=fab.url, group_id="tx-loop", enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed")
    producer = KafkaProducer(bootstrap_servers=fab.url, transactional_id="tx-loop-1")
    try:
        producer.init_transactions()
        records = []
        deadline = time.monotonic() + 60
        while len(records) < 4 and time.monotonic() < deadline:
            records += [r for batch in consumer.poll(timeout_ms=500).values() for r in batch]
        assert [r.value for r in records] == [b"0-0", b"0-1", b"0-2", b"0-3"]
        producer.begin_transaction()
        for record in records:
            producer.send("tx-out", record.value.upper())
        tp = TopicPartition("tx-in", 0)
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(records[-1].offset + 1, None)}, "tx-loop")
        producer.commit_transaction()
        assert consumer.committed(tp) == 4  # the consumer is still the group's member
    finally:
        producer.close()
        consumer.close()


def test_next_a_listener_subclass_commit_async_callbacks_and_connection_error_names(fab):
    """kafka-python's lines: next(consumer) (StopIteration after consumer_timeout_ms, and a later next() waits
    again), a ConsumerRebalanceListener subclass given to subscribe(), commit_async(callback=...) called with
    {TopicPartition: OffsetAndMetadata}, and the connection errors' names a program catches."""
    from fabric.errors import (
        GroupCoordinatorNotAvailableError,
        KafkaConnectionError,
        NoBrokersAvailable,
        NodeNotReadyError,
    )
    from fabric.kafka import ConsumerRebalanceListener
    assert KafkaConnectionError is NodeNotReadyError is GroupCoordinatorNotAvailableError is NoBrokersAvailable
    fill(fab, "nexts", partitions=1, per_partition=2)
    assigned: list = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned_now):
            assigned.extend(assigned_now)

    consumer = KafkaConsumer(bootstrap_servers=fab.url, group_id="nexting", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    try:
        consumer.subscribe(["nexts"], listener=Listener())
        assert [next(consumer).value, next(consumer).value] == [b"0-0", b"0-1"]
        assert assigned == [TopicPartition("nexts", 0)]
        with pytest.raises(StopIteration):
            next(consumer)
        done: list = []
        consumer.commit_async({TopicPartition("nexts", 0): OffsetAndMetadata(2, "noted")},
                              callback=lambda offsets, error: done.append((offsets, error)))
        wait_for(lambda: done, 30, "the commit's callback")  # (it runs after the future's result is set)
        assert done == [({TopicPartition("nexts", 0): OffsetAndMetadata(2, "noted")}, None)]
        with fab.producer() as producer:
            producer.send("nexts", b"0-2", partition=0).get(30)
        assert next(consumer).value == b"0-2"  # (iterating again after StopIteration)
    finally:
        consumer.close()
    with pytest.raises(TypeError):
        ConsumerRebalanceListener()  # (abstract, as kafka-python's)
