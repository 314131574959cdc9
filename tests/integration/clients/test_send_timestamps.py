"""The timestamp a send reports, on every kind of cluster: kafka-python's RecordMetadata.timestamp and
confluent-kafka's delivery message timestamp() are the record's stored timestamp on a CreateTime topic (the one
sent, or the producer's stamp), and not known (-1; confluent's not-available) where the log stamps it."""
from __future__ import annotations

import time

import pyarrow as pa

import fabric
from fabric.client.confluent_message import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE

HOUR_MS = 3_600_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_record_metadata_reports_the_timestamp_sent(fab):
    fab.create_topic("plain", partitions=1)
    fab.create_topic("typed", schema=pa.schema([("user", pa.string())]))
    stamp = now_ms() - HOUR_MS  # an hour ago: within the topics' retention
    with fab.producer() as producer:
        assert producer.send("plain", b"x", timestamp_ms=stamp).get(timeout=30).timestamp == stamp
        assert producer.send("typed", {"user": "a"}, timestamp=stamp + 1).get(timeout=30).timestamp == stamp + 1


def test_record_metadata_of_a_record_sent_without_a_timestamp_is_the_producers_stamp(fab, drain):
    fab.create_topic("events", partitions=1)
    with fab.producer() as producer:
        before = now_ms()
        metadata = producer.send("events", b"x").get(timeout=30)
        after = now_ms()
    assert before <= metadata.timestamp <= after
    [record] = drain(fab.consumer("events", auto_offset_reset="earliest"), 1)
    assert (record.offset, record.timestamp) == (metadata.offset, metadata.timestamp)


def test_each_record_of_a_batch_reports_its_own_stored_timestamp(fab, drain):
    """One batch over two partitions, some records stamped by the sender, some by the producer: each future
    reports the timestamp a consumer reads at the offset it reports."""
    fab.create_topic("events", partitions=2)
    stamp = now_ms() - HOUR_MS
    with fab.producer(linger_ms=60_000) as producer:
        futures = [producer.send("events", b"%d" % i, key=b"k%d" % i, timestamp=stamp + i if i % 2 else None)
                   for i in range(8)]
        before = now_ms()
        assert producer.flush() == 0
        after = now_ms()
    metas = [f.get(timeout=30) for f in futures]
    assert [m.timestamp for m in metas[1::2]] == [stamp + 1, stamp + 3, stamp + 5, stamp + 7]
    [stamped] = {m.timestamp for m in metas[0::2]}  # the batch's one stamp
    assert before <= stamped <= after and {m.partition for m in metas} == {0, 1}
    stored = drain(fab.consumer("events", auto_offset_reset="earliest"), 8)
    assert {(m.partition, m.offset): m.timestamp for m in metas} == {(r.partition, r.offset): r.timestamp
                                                                     for r in stored}


def test_a_log_append_time_topic_reports_no_timestamp(fab):
    fab.create_topic("stamps", config={"message.timestamp.type": "LogAppendTime"})
    with fab.producer() as producer:
        assert producer.send("stamps", b"x").get(timeout=30).timestamp == -1
        assert producer.send("stamps", b"y", timestamp=now_ms()).get(timeout=30).timestamp == -1
        reports = []
        producer.produce("stamps", b"z", on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
        assert producer.flush() == 0
    assert reports == [(None, (TIMESTAMP_NOT_AVAILABLE, 0))]


def test_confluent_delivery_message_carries_the_producers_stamp(fab, drain):
    fab.create_topic("orders", partitions=1)
    stamp = now_ms() - HOUR_MS
    reports = []
    with fab.producer({"linger.ms": 5}) as producer:
        before = now_ms()
        producer.produce("orders", b"now", on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
        producer.produce("orders", b"then", timestamp=stamp,
                         on_delivery=lambda err, msg: reports.append((err, msg.timestamp())))
        assert producer.flush() == 0
        after = now_ms()
    [(error, (kind, ms)), then] = reports
    assert error is None and kind == TIMESTAMP_CREATE_TIME and before <= ms <= after
    assert then == (None, (TIMESTAMP_CREATE_TIME, stamp))
    stored = drain(fab.consumer("orders", auto_offset_reset="earliest"), 2)
    assert [r.timestamp for r in stored] == [ms, stamp]


def test_a_committed_transaction_reports_its_records_timestamps(fabric_dir):
    with fabric.connect(f"file://{fabric_dir}") as fab:
        fab.create_topic("events", partitions=2)
        stamp = now_ms() - HOUR_MS
        with fab.producer(transactional_id="stamps") as producer:
            producer.init_transactions()
            producer.begin_transaction()
            given = producer.send("events", b"given", key=b"a", timestamp=stamp)
            before = now_ms()
            stamped = producer.send("events", b"stamped", key=b"b")
            producer.commit_transaction()
            after = now_ms()
        assert given.get(timeout=30).timestamp == stamp
        assert before <= stamped.get(timeout=30).timestamp <= after
