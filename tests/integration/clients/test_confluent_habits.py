"""confluent-kafka's calls, typed as its users type them from memory, on every kind of cluster: partitions in one
list (pause([tp]), resume([tp]), position([tp]), committed([tp])), a TopicPartition carrying its offset
(assign, seek, commit(offsets=[...])), commit(message=...) and commit(asynchronous=...), and KafkaException."""
from __future__ import annotations

import time

import pytest

from fabric import TopicPartition


def test_partition_lists_and_topic_partitions_carrying_offsets(fab, drain):
    from fabric.errors import KafkaException
    fab.create_topic("orders", partitions=2)
    with fab.producer() as producer:
        for i in range(10):
            producer.send("orders", f"order-{i}".encode(), partition=i % 2)
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)

    consumer = fab.consumer(group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition("orders", 0, 3), TopicPartition("orders", 1)])
    consumer.pause([p1])
    assert [(m.partition, m.offset) for m in drain(consumer, 2)] == [(0, 3), (0, 4)]
    consumer.resume([p1])
    assert [(m.partition, m.offset) for m in drain(consumer, 5)] == [(1, i) for i in range(5)]

    consumer.seek(TopicPartition("orders", 0, 1))
    assert [(tp.partition, tp.offset) for tp in consumer.position([p0, p1])] == [(0, 1), (1, 5)]
    consumer.commit(offsets=[TopicPartition("orders", 0, 4)], asynchronous=False)
    assert [tp.offset for tp in consumer.committed([p0])] == [4]
    last = drain(consumer, 4)[-1]
    consumer.commit(message=last, asynchronous=False)
    assert [(tp.partition, tp.offset) for tp in consumer.committed([p0, p1])] == [(0, 5), (1, None)]
    consumer.commit(asynchronous=True)
    consumer.close()  # waits for the commit
    with fab.consumer(group_id="billing") as reader:
        assert [tp.offset for tp in reader.committed([p0, p1])] == [5, 5]

    with pytest.raises(KafkaException, match=r"pause\(\[tp1, tp2\]\)"):
        fab.consumer().pause("orders")
    with pytest.raises(KafkaException):
        fab.consumer().assign([TopicPartition("no-such-topic", 0)])


def test_a_failed_produce_reports_confluent_kafkas_error_value(fab):
    """A delivery callback's err is what confluent-kafka gives: a KafkaError value (err.code(), err.name(),
    err.str(), err.retriable() as methods), the message's error() the same, and `raise KafkaException(err)` keeps
    it as args[0]."""
    from fabric.kafka import KafkaError, KafkaException
    fab.create_topic("doomed", partitions=1)
    reports = []
    producer = fab.producer({"linger.ms": 60_000})
    producer.produce("doomed", b"x", on_delivery=lambda err, msg: reports.append((err, msg)))
    fab.delete_topic("doomed")  # the record fails when it is sent
    producer.flush()
    [(err, msg)] = reports
    assert isinstance(err, KafkaError) and msg.error() is err and (msg.partition(), msg.offset()) == (-1, -1)
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and err.name() == "UNKNOWN_TOPIC_OR_PART"
    assert "doomed" in err.str() and err.retriable() is False and err.fatal() is False  # (methods, not flags)
    with pytest.raises(KafkaException) as raised:
        raise KafkaException(err)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    producer.close()


def test_a_config_dict_produce_poll_flush_and_consume(fab):
    """confluent-kafka's producer and consumer lines: a config dict of Kafka's names (group.id among them),
    produce() with its delivery callback's message methods, poll(0), len(), flush() -> 0, consume()."""
    from fabric.errors import KafkaException
    fab.create_topic("orders", partitions=2)
    reports = []
    producer = fab.producer({"linger.ms": 5, "acks": "all"})
    for i in range(6):
        producer.poll(0)
        producer.produce("orders", f"order-{i}".encode(), key=b"k", partition=i % 2 if i < 5 else -1,
                         on_delivery=lambda err, msg: reports.append((err, msg)), headers={"h": b"v"})
    stamp = int(time.time() * 1000) - 3_600_000  # an hour ago: within the topic's retention
    producer.produce("orders", b"stamped", partition=0, timestamp=stamp)
    assert producer.flush() == 0 and len(producer) == 0
    assert producer  # (truthy with nothing queued: `if not producer:` must not take it for a missing one)
    assert [e for e, _ in reports] == [None] * 6
    first = reports[0][1]
    assert (first.topic(), first.partition(), first.offset(), first.key(), first.value(), first.headers()) == \
        ("orders", 0, 0, b"k", b"order-0", [("h", b"v")])
    assert sorted((m.partition(), m.offset()) for _, m in reports[:5]) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    with pytest.raises(KafkaException, match="callback= or on_delivery="):
        producer.produce("orders", b"x", callback=print, on_delivery=print)
    with pytest.raises(KafkaException, match="poll\\(\\) timeout must be a number of seconds >= 0, got -5"):
        producer.poll(-5)
    producer.close()

    consumer = fab.consumer({"group.id": "billing", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    assert consumer.group_id == "billing"
    consumer.subscribe(["orders"])
    got = []
    while len(got) < 7:
        batch = consumer.consume(num_messages=3, timeout=10)
        assert 1 <= len(batch) <= 3
        got += batch
    assert sorted(r.value for r in got) == sorted([f"order-{i}".encode() for i in range(6)] + [b"stamped"])
    assert [r.timestamp for r in got if r.value == b"stamped"] == [stamp]
    consumer.commit(asynchronous=False)
    consumer.close()

    with pytest.raises(KafkaException, match="'linger.ms' is given twice"):
        fab.producer({"linger.ms": 5}, linger_ms=6)
    with pytest.raises(KafkaException, match="group_id='a' and group.id='b' differ"):
        fab.consumer({"group.id": "b"}, group_id="a")


def test_confluent_programs_first_lines_errors_and_flush_answers(fab):
    """What confluent-kafka programs type first: `from confluent_kafka import KafkaError, KafkaException` (the
    error codes a poll loop compares, KafkaError._PARTITION_EOF among them, and the base every fabric error is),
    Producer.flush(timeout) answering how many records are still queued (never raising), and a delivery callback
    whose message holds the key and value produced as text as bytes; a commit that waits answers the partitions it
    committed, and a TopicPartition has confluent-kafka's defaults (partition -1, no error). A fabric error answers
    its Kafka code as a KafkaException's does (`e.args[0].code()`) and as kafka-python's (`e.errno`)."""
    from fabric.kafka import KafkaError, KafkaException, Producer
    assert (KafkaError._PARTITION_EOF, KafkaError._MSG_TIMED_OUT, KafkaError.UNKNOWN_TOPIC_OR_PART) == (-191, -192, 3)
    eof = KafkaError(KafkaError._PARTITION_EOF)
    assert (eof.code(), eof.name(), eof == KafkaError._PARTITION_EOF, eof.retriable()) == (
        -191, "_PARTITION_EOF", True, False)
    with pytest.raises(KafkaException) as raised:
        raise KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "it is there"))
    assert (raised.value.args[0].code(), str(raised.value.args[0])) == (36, "it is there")
    with pytest.raises(KafkaException) as raised:  # every fabric error, its Kafka code where programs look
        fab.consumer().assign([TopicPartition("no-such-topic", 0)])
    text = raised.value.args[0]
    assert (text.code(), text.name(), text.retriable(), text.fatal(), text.txn_requires_abort()) == (
        KafkaError.UNKNOWN_TOPIC_OR_PART, "UNKNOWN_TOPIC_OR_PART", False, False, False)
    assert text.str() == str(raised.value) == text and "no-such-topic" in text
    assert (raised.value.errno, raised.value.message) == (3, "UNKNOWN_TOPIC_OR_PART")  # kafka-python's names

    fab.create_topic("texts")
    delivered = []
    producer = Producer({"bootstrap.servers": fab.url, "linger.ms": 600_000})
    producer.produce("texts", "héllo", key="k1", on_delivery=lambda err, msg: delivered.append((err, msg)))
    assert producer.flush(0) == 1 and len(producer) == 1  # lingering: still queued, and no error
    assert producer.flush(-1) == 0 and len(producer) == 0
    [(error, message)] = delivered
    assert error is None and (message.key(), message.value()) == (b"k1", "héllo".encode())
    assert (message.leader_epoch(), message.latency()) == (None, None)
    message.set_value(b"rewritten")
    message.set_key(None)
    message.set_headers([("h", b"v")])
    assert (message.key(), message.value(), message.headers()) == (None, b"rewritten", [("h", b"v")])
    producer.close()
    from fabric.kafka import AdminClient
    admin = AdminClient({"bootstrap.servers": fab.url})
    assert admin.poll(0) == 0
    admin.close()
    from fabric.kafka import Consumer
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "first-lines", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("texts", 0)])
    assert consumer.poll(30).value() == "héllo".encode()
    committed = consumer.commit(asynchronous=False)  # confluent-kafka's answer: the partitions committed
    assert [(tp.topic, tp.partition, tp.offset, tp.error) for tp in committed] == [("texts", 0, 1, None)]
    assert consumer.commit(asynchronous=True) is None
    consumer.close()
    assert (TopicPartition("texts").partition, TopicPartition("texts", 0).error) == (-1, None)


def test_enable_partition_eof_ends_a_read_until_the_end_loop(fab):
    """confluent-kafka's "read everything, then stop" loop: with enable.partition.eof, a poll that finds nothing
    answers a Message whose error() is KafkaError._PARTITION_EOF, once per partition each time its end is reached
    (again after a new record); off (the default, or False), none; a value that is no boolean is refused."""
    from fabric.kafka import Consumer, KafkaError, KafkaException
    fab.create_topic("ends", partitions=2)
    with fab.producer() as producer:
        for i in range(3):
            producer.send("ends", b"v%d" % i, partition=0)
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "to-the-end", "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    consumer.subscribe(["ends"])
    values, ended = [], set()
    deadline = time.monotonic() + 120
    while len(ended) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                raise KafkaException(msg.error())
            ended.add((msg.topic(), msg.partition(), msg.offset()))
        else:
            values.append(msg.value())
    assert values == [b"v0", b"v1", b"v2"] and ended == {("ends", 0, 3), ("ends", 1, 0)}
    assert consumer.poll(0.2) is None  # each end reported once
    with fab.producer() as producer:
        producer.send("ends", b"v3", partition=1).get(30)
    assert consumer.poll(30).value() == b"v3"
    again = consumer.poll(30)
    assert (again.partition(), again.offset(), again.error().code()) == (1, 1, KafkaError._PARTITION_EOF)
    consumer.close()
    plain = Consumer({"bootstrap.servers": fab.url, "group.id": "plain", "auto.offset.reset": "earliest",
                      "enable.partition.eof": False})
    plain.assign([TopicPartition("ends", 1)])
    assert plain.poll(30).value() == b"v3" and plain.poll(0.5) is None
    plain.close()
    with pytest.raises(KafkaException, match="'enable.partition.eof': must be true or false"):
        Consumer({"bootstrap.servers": fab.url, "enable.partition.eof": "sometimes"})
