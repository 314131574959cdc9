"""The Python client API: connecting, topic admin, typed topics, offset resets and the errors users see, on an
embedded fabric and over a coordinator service (the `fab` fixture). The producer and the consumer have modules of
their own."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

import fabric
from fabric.common.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    SchemaMismatchError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)


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


def test_a_none_value_on_a_typed_topic_is_stored_as_a_tombstone_not_as_zeroed_fields(fab):
    """A typed record sent with value None keeps its value null (compaction deletes its key): it once lost the
    struct's null on the way to storage and came back as {'user': '', 'amount': 0}."""
    fab.create_topic("profiles", schema=pa.schema([("user", pa.string()), ("amount", pa.int64())]))
    with fab.producer() as producer:
        for value in ({"user": "ann", "amount": 5}, None, {"user": None, "amount": None}):
            producer.send("profiles", value, key=b"ann")
    consumer = fab.consumer(auto_offset_reset="earliest")
    consumer.assign([("profiles", 0)])
    assert [r.value for r in consumer.poll(5)] == [{"user": "ann", "amount": 5}, None,
                                                   {"user": None, "amount": None}]
    consumer.seek("profiles", 0, 0)
    assert consumer.poll_batch(5, columns=["user", "amount"]).to_pylist() == [
        {"user": "ann", "amount": 5}, {"user": None, "amount": None}, {"user": None, "amount": None}]
    consumer.close()


def test_typed_topic_schema_cannot_clash_with_record_columns(fab):
    with pytest.raises(SchemaMismatchError, match="offset"):
        fab.create_topic("bad", schema=pa.schema([("offset", pa.int64())]))
    assert fab.list_topics() == []


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


@pytest.mark.parametrize(("partitions", "why"), [
    (0, "must be an integer from 1"), (-1, "must be an integer from 1"), (True, "must be an integer from 1"),
    (2**63, "must be an integer from 1"), ("3", "must be an integer from 1"), (10_001, "the limit is 10000 per topic")])
def test_create_topic_refuses_bad_partition_counts_and_creates_nothing(fab, fabric_dir, partitions, why):
    before = sorted(os.listdir(fabric_dir))
    with pytest.raises(InvalidPartitionsError, match=why):
        fab.create_topic("t", partitions=partitions)
    assert fab.list_topics() == [] and sorted(os.listdir(fabric_dir)) == before


def test_create_topic_refuses_a_config_that_is_not_a_dict(fab):
    with pytest.raises(InvalidConfigError, match="must be a dict of Kafka config names"):
        fab.create_topic("t", config="retention.ms=1")
    assert fab.list_topics() == []


def test_alter_refuses_deleting_an_unknown_config_and_changes_nothing(fab):
    fab.create_topic("t", config={"retention.ms": 1000})
    with pytest.raises(InvalidConfigError, match="unknown topic config 'no.such.key'; known keys"):
        fab.alter_topic_config("t", {"segment.bytes": 4096, "no.such.key": None})
    with pytest.raises(InvalidConfigError, match="must be a dict"):
        fab.alter_topic_config("t", "retention.ms")
    assert fab.describe_topic("t").overrides == {"retention.ms": "1000"}
    fab.alter_topic_config("t", {"retention.ms": None, "segment.bytes": None})  # known, even if not set
    assert fab.describe_topic("t").overrides == {}


def test_typed_topic_with_an_unknown_time_zone_is_refused_at_create(fab):
    for dtype in (pa.timestamp("us", tz="Mars/Base"), pa.list_(pa.timestamp("us", tz="Mars/Base"))):
        with pytest.raises(SchemaMismatchError, match="unknown time zone 'Mars/Base'"):
            fab.create_topic("mars", schema=pa.schema([("ts", dtype)]))
    assert fab.list_topics() == []
    schema = pa.schema([("paris", pa.timestamp("us", tz="Europe/Paris")), ("plus1", pa.timestamp("ms", tz="+01:00"))])
    fab.create_topic("earth", schema=schema)
    with fab.producer() as producer:
        producer.send("earth", {"paris": 0, "plus1": 0}).result()
    [record] = fab.consumer("earth", auto_offset_reset="earliest").poll(5)
    assert record.value["paris"].utcoffset().total_seconds() == 3600


@pytest.mark.parametrize("total", ["5", True, 2**63, 0])
def test_create_partitions_refuses_bad_totals(fab, total):
    fab.create_topic("t", partitions=2)
    with pytest.raises(InvalidPartitionsError, match="partition count must be an integer"):
        fab.create_partitions("t", total)
    assert len(fab.describe_topic("t").partitions) == 2


@pytest.mark.parametrize("target, message", [
    (dict(to_offset="abc"), "to_offset must be an integer"),
    (dict(to_offset=-5), "to_offset must be an integer from 0"),
    (dict(to_datetime=5), "to_datetime must be a datetime or ISO 8601"),
    (dict(to_datetime="0001-01-01T00:00:00"), "out of range"),
])
def test_reset_offsets_refuses_bad_targets_and_commits_nothing(fab, target, message):
    fab.create_topic("t")
    fab.cluster.coordinator.commit_offsets("g", {("t", 0): 0})
    with pytest.raises(InvalidArgumentError, match=message):
        fab.reset_offsets("g", "t", execute=True, **target)
    assert fab.describe_group("g")[0].committed == 0
