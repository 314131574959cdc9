"""The Python client API: admin, producer, consumer, typed topics, and the errors users see.

Every test taking `fab` runs twice: against an embedded fabric (file://) and against a real coordinator
service process serving the same kind of directory (fabric://), since clients must not care which."""
from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest

import fabric
from fabric.errors import (InvalidConfigError, InvalidPartitionsError, InvalidTopicError, RecordTooLargeError,
                           SchemaMismatchError, TopicExistsError, UnknownPartitionError, UnknownTopicError)
from fabric.partitioner import partition_for_key
from coordinator.launcher import CoordinatorProcess
from tests.consuming import drain


@pytest.fixture(params=["file", "fabric"])
def fab(request, fabric_dir):
    """The same client API over an embedded fabric and over a coordinator service."""
    if request.param == "file":
        url = f"file://{fabric_dir}"
    else:
        instance = CoordinatorProcess(fabric_dir).start()
        request.addfinalizer(instance.stop)
        url = instance.url()
    with fabric.connect(url) as handle:
        yield handle




def test_connect_defaults_to_env_then_fabric_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FABRIC_URL", raising=False)
    assert fabric.connect().url == f"file://{tmp_path}/fabric-data"
    monkeypatch.setenv("FABRIC_URL", str(tmp_path / "other"))
    assert fabric.connect().url == f"file://{tmp_path}/other"
    with pytest.raises(InvalidConfigError, match="unsupported fabric URL"):
        fabric.connect("http://example")


def test_topic_admin_round_trip(fab):
    fab.create_topic("orders", partitions=3, config={"retention.ms": 1000})
    assert fab.list_topics() == ["orders"]
    desc = fab.describe_topic("orders")
    assert [p.partition for p in desc.partitions] == [0, 1, 2]
    assert desc.overrides == {"retention.ms": "1000"}
    assert desc.config["segment.bytes"] == str(1 << 30)
    fab.alter_topic_config("orders", {"retention.ms": 5000, "segment.bytes": 4096})
    assert fab.describe_topic("orders").overrides == {"retention.ms": "5000", "segment.bytes": "4096"}
    fab.alter_topic_config("orders", {"retention.ms": None})
    assert fab.describe_topic("orders").overrides == {"segment.bytes": "4096"}
    fab.create_partitions("orders", 5)
    assert len(fab.describe_topic("orders").partitions) == 5
    with pytest.raises(InvalidPartitionsError, match="never removed|must be larger"):
        fab.create_partitions("orders", 2)
    with pytest.raises(TopicExistsError):
        fab.create_topic("orders")
    fab.delete_topic("orders")
    assert fab.list_topics() == []
    with pytest.raises(UnknownTopicError, match="orders"):
        fab.describe_topic("orders")


@pytest.mark.parametrize("name", ["", ".", "..", "../evil", "a/b", "x" * 250, "sp ace", "__internal"])
def test_invalid_topic_names_are_rejected_and_create_nothing(fab, fabric_dir, name):
    before = sorted(os.listdir(fabric_dir))
    with pytest.raises(InvalidTopicError):
        fab.create_topic(name)
    assert sorted(os.listdir(fabric_dir)) == before
    assert fab.list_topics() == []


def test_bad_config_values_name_the_key(fab):
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        fab.create_topic("t", config={"segment.bytes": "lots"})
    with pytest.raises(InvalidConfigError, match="unknown topic config 'segment.byte'"):
        fab.create_topic("t", config={"segment.byte": 1})
    with pytest.raises(InvalidConfigError, match="acks"):
        fab.producer(acks="2")
    with pytest.raises(InvalidConfigError, match="auto_offset_reset"):
        fab.consumer(auto_offset_reset="sometimes")
    assert fab.list_topics() == []


def test_unknown_topic_and_partition(fab):
    with pytest.raises(UnknownTopicError):
        fab.producer().send("missing", b"x")
    with pytest.raises(UnknownTopicError):
        fab.consumer("missing")
    fab.create_topic("t", partitions=2)
    with pytest.raises(UnknownPartitionError):
        fab.producer().send("t", b"x", partition=2)


def test_produce_consume_round_trip_with_keys_headers_and_timestamps(fab):
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
    for key, partition in zip(got.column("key").to_pylist(), got.column("partition").to_pylist()):
        assert partition == partition_for_key(key, 5)


def test_record_too_large_is_rejected_before_anything_is_written(fab):
    fab.create_topic("small", config={"max.message.bytes": 100})
    with fab.producer() as producer:
        with pytest.raises(RecordTooLargeError, match="max.message.bytes=100"):
            producer.send("small", b"x" * 101)
        with pytest.raises(RecordTooLargeError, match="row 1"):
            producer.send_batch("small", pa.table({"value": [b"ok", b"x" * 200]}))
    assert fab.describe_topic("small").partitions[0].end_offset == 0


def test_typed_topic_stores_columns_and_validates(fab):
    schema = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("tags", pa.list_(pa.string()))])
    fab.create_topic("payments", schema=schema)
    with fab.producer() as producer:
        producer.send("payments", {"user": "ann", "amount": 5, "tags": ["a"]}).result()
        producer.send_batch("payments", pa.table({"user": ["bob", "cy"], "amount": [7, 9], "tags": [[], None]},
                                                 schema=schema))
        with pytest.raises(SchemaMismatchError, match="'amount'"):
            producer.send_batch("payments", pa.table({"user": ["x"], "amount": ["not a number"], "tags": [[]]}))
        with pytest.raises(SchemaMismatchError, match="'user'.*missing"):
            producer.send_batch("payments", pa.table({"amount": [1], "tags": [[]]}))
        with pytest.raises(SchemaMismatchError, match="extra"):
            producer.send_batch("payments", pa.table({"user": ["x"], "amount": [1], "tags": [[]],
                                                      "extra": [1]}))
    consumer = fab.consumer("payments", auto_offset_reset="earliest")
    table = consumer.poll_batch(5)
    assert table.column_names[:4] == ["key", "user", "amount", "tags"]
    assert table.column("amount").type == pa.int64()
    assert table.select(["user", "amount"]).to_pylist() == [
        {"user": "ann", "amount": 5}, {"user": "bob", "amount": 7}, {"user": "cy", "amount": 9}]
    consumer.seek("payments", 0, 1)
    assert consumer.poll_batch(5, columns=["amount"]).to_pydict() == {"amount": [7, 9]}
    assert fab.describe_topic("payments").value_schema == schema


def test_typed_topic_schema_cannot_clash_with_record_columns(fab):
    with pytest.raises(SchemaMismatchError, match="offset"):
        fab.create_topic("bad", schema=pa.schema([("offset", pa.int64())]))
    assert fab.list_topics() == []


def test_seek_position_and_offsets_for_times(fab):
    fab.create_topic("t", config={"retention.ms": -1, "segment.ms": 2**62})  # timestamps from 1970
    with fab.producer() as producer:
        for i in range(10):
            producer.send("t", b"%d" % i, timestamp=1000 * (i + 1))
    consumer = fab.consumer(auto_offset_reset="earliest")
    consumer.assign([("t", 0)])
    assert consumer.position("t", 0) == 0
    consumer.seek("t", 0, 7)
    assert [r.value for r in drain(consumer, 3)] == [b"7", b"8", b"9"]
    assert consumer.position("t", 0) == 10
    consumer.seek_to_beginning()
    assert consumer.position("t", 0) == 0
    consumer.seek_to_end()
    assert consumer.position("t", 0) == 10
    assert consumer.offsets_for_times({("t", 0): 4500}) == {("t", 0): 4}
    assert consumer.offsets_for_times({("t", 0): 99_999}) == {("t", 0): None}
    assert consumer.beginning_offsets([("t", 0)]) == {("t", 0): 0}
    assert consumer.end_offsets([("t", 0)]) == {("t", 0): 10}


def test_latest_reset_skips_old_records(fab):
    fab.create_topic("t")
    with fab.producer() as producer:
        producer.send("t", b"old").result()
    consumer = fab.consumer("t")  # auto_offset_reset defaults to latest, as Kafka's
    assert consumer.poll(0.1) == []
    with fab.producer() as producer:
        producer.send("t", b"new").result()
    assert [r.value for r in drain(consumer, 1)] == [b"new"]


def test_group_commits_and_resumes(fab):
    fab.create_topic("t", partitions=2)
    with fab.producer() as producer:
        producer.send_batch("t", pa.table({"value": [b"%d" % i for i in range(100)]}))
    first = fab.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                         max_poll_records=30)
    seen = first.poll(5)
    assert len(seen) == 30
    first.commit()
    first.close()
    lag = {(g.topic, g.partition): g.lag for g in fab.describe_group("g")}
    assert sum(lag.values()) == 70
    second = fab.consumer("t", group_id="g", auto_offset_reset="earliest")
    rest = drain(second, 70)
    assert {r.value for r in seen} | {r.value for r in rest} == {b"%d" % i for i in range(100)}
    second.close()  # auto-commit on close
    assert sum(g.lag for g in fab.describe_group("g")) == 0
    assert fab.list_groups() == ["g"]


def test_reset_offsets_dry_run_and_execute(fab):
    fab.create_topic("t", config={"retention.ms": -1, "segment.ms": 2**62})  # timestamps from 1970
    with fab.producer() as producer:
        for i in range(10):
            producer.send("t", b"x", timestamp=1_000_000 + i * 1000)
    fab.cluster.coordinator.commit_offsets("g", {("t", 0): 10})
    plan = fab.reset_offsets("g", "t", to_offset=3)
    assert plan == {("t", 0): 3}
    assert fab.describe_group("g")[0].committed == 10
    fab.reset_offsets("g", "t", to_earliest=True, execute=True)
    assert fab.describe_group("g")[0].committed == 0
    fab.reset_offsets("g", "t", to_datetime="1970-01-01T00:16:45+00:00", execute=True)  # 1_005_000 ms
    assert fab.describe_group("g")[0].committed == 5
    with pytest.raises(InvalidConfigError, match="exactly one"):
        fab.reset_offsets("g", "t", to_earliest=True, to_latest=True)


def test_compression_round_trips(fab):
    fab.create_topic("z")
    for codec in ("lz4", "zstd"):
        with fab.producer(compression_type=codec) as producer:
            producer.send_batch("z", pa.table({"value": [codec.encode() * 100] * 1000}))
    table = fab.consumer("z", auto_offset_reset="earliest").poll_batch(5)
    assert table.num_rows == 2000
    assert set(table.column("value").to_pylist()) == {b"lz4" * 100, b"zstd" * 100}


def test_log_append_time_overrides_producer_timestamps(fab):
    fab.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})
    before = time.time_ns() // 1_000_000
    with fab.producer() as producer:
        producer.send("t", b"x", timestamp=5).result()
    [record] = drain(fab.consumer("t", auto_offset_reset="earliest"), 1)
    assert record.timestamp_type == 1 and record.timestamp >= before


def test_partitions_added_are_consumed(fab):
    fab.create_topic("grow", partitions=1)
    consumer = fab.consumer("grow", auto_offset_reset="earliest")
    assert consumer.poll(0.1) == []
    fab.create_partitions("grow", 2)
    with fab.producer() as producer:
        producer.send("grow", b"new", partition=1).result()
    assert [(r.partition, r.value) for r in drain(consumer, 1)] == [(1, b"new")]
