"""The producer, on an embedded fabric and over a coordinator service: placement by key and sticky null keys,
batches, size limits, compression and timestamps."""
from __future__ import annotations

import time

import pyarrow as pa
import pytest

from fabric.client.partitioner import partition_for_key
from fabric.common.errors import (
    InvalidRecordError,
    RecordTooLargeError,
    SchemaMismatchError,
    UnknownPartitionError,
)


def test_produce_consume_round_trip_with_keys_headers_and_timestamps(fab, drain):
    fab.create_topic("events", partitions=4)
    now = time.time_ns() // 1_000_000  # recent: older records would be due for retention (7 days)
    with fab.producer(linger_ms=1) as producer:
        futures = [producer.send("events", f"value-{i}".encode(), key=f"user-{i % 7}",
                                 headers={"n": str(i)}, timestamp=now + i) for i in range(200)]
        results = [f.result(timeout=10) for f in futures]
    for i, meta in enumerate(results):
        assert meta.partition == partition_for_key(f"user-{i % 7}".encode(), 4)
    with fab.consumer("events", auto_offset_reset="earliest") as consumer:
        records = drain(consumer, 200)
    by_value = {r.value: r for r in records}
    assert set(by_value) == {f"value-{i}".encode() for i in range(200)}
    r = by_value[b"value-42"]
    assert (r.key, r.headers, r.timestamp, r.timestamp_type) == (b"user-0", [("n", b"42")], now + 42, 0)
    assert (r.partition, r.offset) == (results[42].partition, results[42].offset)
    for p in range(4):  # offsets are dense per partition and follow send order
        offsets = [x.offset for x in records if x.partition == p]
        assert sorted(offsets) == list(range(len(offsets)))


def test_null_keys_stick_to_one_partition_per_batch(fab):
    fab.create_topic("sticky", partitions=8)
    with fab.producer(linger_ms=60_000, batch_size=1 << 30) as producer:
        futures = [producer.send("sticky", b"v") for _ in range(50)]
        producer.flush()
        assert len({f.result().partition for f in futures}) == 1


def test_send_batch_partitions_like_send(fab):
    fab.create_topic("batch", partitions=5)
    keys = [f"k{i}".encode() for i in range(1000)]
    table = pa.table({"key": keys, "value": [b"v%d" % i for i in range(1000)]})
    with fab.producer() as producer:
        metas = producer.send_batch("batch", table)
    assert sum(m.count for m in metas) == 1000
    consumer = fab.consumer("batch", auto_offset_reset="earliest")
    got = consumer.poll_batch(5)
    assert got.num_rows == 1000
    keys, partitions = got.column("key").to_pylist(), got.column("partition").to_pylist()
    for key, partition in zip(keys, partitions, strict=True):
        assert partition == partition_for_key(key, 5)


def test_record_too_large_is_rejected_before_anything_is_written(fab):
    fab.create_topic("small", config={"max.message.bytes": 100})
    with fab.producer() as producer:
        with pytest.raises(RecordTooLargeError, match="max.message.bytes=100"):
            producer.send("small", b"x" * 101)
        with pytest.raises(RecordTooLargeError, match="row 1"):
            producer.send_batch("small", pa.table({"value": [b"ok", b"x" * 200]}))
    assert fab.describe_topic("small").partitions[0].end_offset == 0


def test_compression_round_trips(fab):
    fab.create_topic("z")
    for codec in ("lz4", "zstd"):
        with fab.producer(compression_type=codec) as producer:
            producer.send_batch("z", pa.table({"value": [codec.encode() * 100] * 1000}))
    table = fab.consumer("z", auto_offset_reset="earliest").poll_batch(5)
    assert table.num_rows == 2000
    assert set(table.column("value").to_pylist()) == {b"lz4" * 100, b"zstd" * 100}


def test_log_append_time_overrides_producer_timestamps(fab, drain):
    fab.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})
    before = time.time_ns() // 1_000_000
    with fab.producer() as producer:
        producer.send("t", b"x", timestamp=5).result()
    [record] = drain(fab.consumer("t", auto_offset_reset="earliest"), 1)
    assert record.timestamp_type == 1 and record.timestamp >= before


def test_typed_topic_refuses_extra_fields_naming_them(fab):
    fab.create_topic("pay", schema=pa.schema([("user", pa.string()), ("amount", pa.float64())]))
    with fab.producer() as producer:
        with pytest.raises(SchemaMismatchError, match=r"\['oops'\].*not in the topic's schema"):
            producer.send("pay", {"user": "a", "amount": 1.0, "oops": 1})
        with pytest.raises(SchemaMismatchError, match=r"unexpected column\(s\) \['oops'\]"):
            producer.send_batch("pay", pa.table({"user": ["a"], "amount": [1.0], "oops": [1]}))
        producer.send("pay", {"user": "b", "amount": 2.0}).result()
    assert [r.value for r in fab.consumer("pay", auto_offset_reset="earliest").poll(5)] == [
        {"user": "b", "amount": 2.0}]


@pytest.mark.parametrize("bad, error, message", [
    (dict(value=5), InvalidRecordError, "value must be bytes, str or None, got int"),
    (dict(key=5), InvalidRecordError, "key must be bytes, str or None, got int"),
    (dict(partition="0"), InvalidRecordError, "partition must be an int.*got str"),
    (dict(partition=True), InvalidRecordError, "partition must be an int.*got bool"),
    (dict(partition=2), UnknownPartitionError, "no partition 2"),
    (dict(headers=[1, 2]), InvalidRecordError, "each header must be a"),
    (dict(headers={"h": 5}), InvalidRecordError, "header 'h' value must be bytes"),
    (dict(headers="h=v"), InvalidRecordError, "headers must be a dict or a list"),
    (dict(timestamp=1.5), InvalidRecordError, "timestamp must be an int of milliseconds"),
    (dict(timestamp=-1), InvalidRecordError, "out of range"),
])
def test_send_refuses_wrong_types_at_send(fab, bad, error, message):
    fab.create_topic("t", partitions=2)
    with fab.producer(linger_ms=60_000) as producer:
        with pytest.raises(error, match=message):
            producer.send("t", **{"value": b"v", **bad})
        producer.send("t", b"ok", partition=0).result()
    assert fab.describe_topic("t").partitions[0].end_offset == 1


def test_bad_record_is_refused_alone_and_buffered_records_are_delivered(fab):
    fab.create_topic("t")
    now = time.time_ns() // 1_000_000
    with fab.producer(linger_ms=60_000, batch_size=1 << 30) as producer:
        good = [producer.send("t", b"%d" % i, timestamp=now) for i in range(3)]
        with pytest.raises(InvalidRecordError, match="timestamp 4611686018427387904 is out of range"):
            producer.send("t", b"bad", timestamp=2**62)  # out of range once in µs
        with pytest.raises(InvalidRecordError, match="value must be bytes"):
            producer.send("t", {"not": "bytes"})
        good.append(producer.send("t", b"3"))
        producer.flush()
        assert [f.result().offset for f in good] == [0, 1, 2, 3]
    assert [r.value for r in fab.consumer("t", auto_offset_reset="earliest").poll(5)] == [b"0", b"1", b"2", b"3"]


def test_send_batch_refuses_bad_timestamps_partitions_and_topic_column(fab):
    fab.create_topic("t", partitions=2)
    with fab.producer() as producer:
        with pytest.raises(InvalidRecordError, match="row 1 has timestamp .* out of range"):
            producer.send_batch("t", pa.table({"value": [b"a", b"b"],
                                               "timestamp": pa.array([0, -1], pa.timestamp("ms"))}))
        with pytest.raises(InvalidRecordError, match="column 'partition' must hold integers"):
            producer.send_batch("t", pa.table({"value": [b"a"], "partition": [0.5]}))
        with pytest.raises(InvalidRecordError, match="'topic' column names other topics"):
            producer.send_batch("t", pa.table({"value": [b"a"], "topic": ["elsewhere"]}))
        with pytest.raises(InvalidRecordError, match="takes a pyarrow.Table"):
            producer.send_batch("t", {"value": [b"a"]})
        producer.send_batch("t", pa.table({"value": [b"a"], "topic": ["t"], "partition": [1]}))
    assert [p.end_offset for p in fab.describe_topic("t").partitions] == [0, 1]
