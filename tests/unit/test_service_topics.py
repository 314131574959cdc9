"""The broker's topic administration refuses what would lose or strand data, whoever asks (embedded here; the
same Broker serves the coordinator service): data whose metadata was lost is never deleted by a new create and
is registered again by `topics recover`; a crashed delete's leftover is recognised by its marker; creates are all
or nothing; partition counts are capped; stores refuse configs and schemas that would make a topic unusable;
committed offsets must be ints within the logs. (The same over a real service: tests/integration.)"""
from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pytest

import fabric
from fabric.cli.main import main as cli
from fabric.client.embedded import EmbeddedCluster
from fabric.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    SchemaMismatchError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from fabric.common.records import plain_rows
from fabric.coordinator.sqlite_store import SqliteCoordinator

DELETING = ".deleting"  # the marker a delete writes in the topic directory before the metadata goes (README)


def mark_deleting(directory: str) -> None:
    open(os.path.join(directory, DELETING), "w").close()

SCHEMA = pa.schema([("user", pa.string()), ("amount", pa.int64())])


def values(fab, topic: str, partition: int) -> list:
    """Every record value of one partition."""
    end = fab.cluster.partition_state(topic, partition).end_offset
    out: list = []
    offset = 0
    while offset < end:
        for fetched in fab.cluster.fetch(topic, partition, offset, 1 << 20):
            out += fetched.batch.column("value").to_pylist()
            offset = fetched.offset + fetched.batch.num_rows
    return out


def lose_metadata(directory: str) -> None:
    """What an operator deleting __fabric/metadata.db (or a lost disk) leaves: the data without its metadata."""
    for name in os.listdir(os.path.join(directory, "__fabric")):
        if name.startswith("metadata.db"):
            os.unlink(os.path.join(directory, "__fabric", name))


def test_create_over_orphaned_data_is_refused_and_recover_registers_it(fabric_dir, capsys) -> None:
    url = f"file://{fabric_dir}"
    with fabric.connect(url) as fab:
        fab.create_topic("orders", partitions=3, config={"retention.ms": "-1"}, schema=SCHEMA)
        fab.create_topic("plain")
        with fab.producer() as producer:
            for i in range(6):
                producer.send("orders", {"user": f"u{i}", "amount": i}, partition=i % 3)
                producer.send("plain", b"p%d" % i)
        before = [values(fab, "orders", p) for p in range(3)]
    lose_metadata(fabric_dir)
    with fabric.connect(url) as fab:
        with pytest.raises(UnknownTopicError, match="fabric topics recover orders"):
            fab.cluster.fetch("orders", 0, 0, 1 << 20)
        with fab.producer() as producer, pytest.raises(UnknownTopicError, match="fabric topics recover plain"):
            producer.send("plain", b"refused")  # the clients' calls name the way back too
        with pytest.raises(UnknownTopicError, match=f"directory {fabric_dir}/orders holds .* recover orders"):
            fab.describe_topic("orders")
        consumer = fab.consumer()
        with pytest.raises(UnknownTopicError, match="fabric topics recover orders"):
            consumer.assign([("orders", 0)])
        consumer.close()
        with pytest.raises(TopicExistsError, match="holds the data of a topic 'orders' the metadata does not know.*"
                                                   "fabric topics recover orders"):
            fab.create_topic("orders", partitions=1)
        assert fab.list_topics() == []
        assert sorted(os.listdir(os.path.join(fabric_dir, "orders"))) == ["0", "1", "2"]  # nothing deleted
    assert cli(["--url", url, "topics", "recover", "orders"]) == 0
    printed = capsys.readouterr().out
    assert "orders" in printed and "recovered" in printed and "configs were lost" in printed
    with fabric.connect(url) as fab:
        described = fab.describe_topic("orders")
        assert len(described.partitions) == 3 and described.value_schema.equals(SCHEMA)
        assert described.overrides == {}  # lost with the metadata, as the report says
        assert [values(fab, "orders", p) for p in range(3)] == before
        report = {r.topic: r for r in fab.recover_topics()}  # every topic directory
        assert report["orders"].outcome == "known"
        assert (report["plain"].outcome, report["plain"].partitions, report["plain"].typed) == ("recovered", 1, False)
        assert values(fab, "plain", 0) == [b"p%d" % i for i in range(6)]
        with fab.producer() as producer:
            producer.send("orders", {"user": "after", "amount": 7}, partition=0)
        assert values(fab, "orders", 0)[-1] == {"user": "after", "amount": 7}


def test_a_damaged_metadata_database_is_named_with_the_way_back(fabric_dir, capsys) -> None:
    """metadata.db overwritten (bit rot, a stray copy): opening the fabric names the file and the fix, moving it
    aside and `fabric topics recover`, which brings the topic and its records back."""
    url = f"file://{fabric_dir}"
    with fabric.connect(url) as fab:
        fab.create_topic("kept")
        with fab.producer() as producer:
            producer.send("kept", b"still here").get(30)
    database = os.path.join(fabric_dir, "__fabric", "metadata.db")
    with open(database, "r+b") as f:
        f.write(b"not a database " * 8)
    with pytest.raises(StorageError, match=f"the metadata database {database} is damaged .*; move it aside, then "
                                           "`fabric topics recover` registers the topics again"):
        fabric.connect(url)
    lose_metadata(fabric_dir)  # (moved aside)
    assert cli(["--url", url, "topics", "recover"]) == 0
    assert "kept" in capsys.readouterr().out
    with fabric.connect(url) as fab:
        assert values(fab, "kept", 0) == [b"still here"]


def test_recover_skips_what_it_cannot_register_and_says_why(fab, fabric_dir) -> None:
    fab.create_topic("gappy", partitions=3)
    fab.create_topic("deleting")
    fab.close()
    lose_metadata(fabric_dir)
    shutil.rmtree(os.path.join(fabric_dir, "gappy", "1"))
    mark_deleting(os.path.join(fabric_dir, "deleting"))
    os.makedirs(os.path.join(fabric_dir, "not a topic!"))
    with fabric.connect(f"file://{fabric_dir}") as again:
        report = {r.topic: r for r in again.recover_topics()}
        assert {t: r.outcome for t, r in report.items()} == {"deleting": "skipped", "gappy": "skipped",
                                                             "not a topic!": "skipped"}
        assert "lacks partition directory 1" in report["gappy"].detail
        assert "delete that did not finish" in report["deleting"].detail
        assert again.list_topics() == []
        assert os.path.isdir(os.path.join(fabric_dir, "gappy", "2"))


def test_a_crashed_deletes_leftover_is_recognised_and_removed_by_create(fab, fabric_dir, caplog) -> None:
    fab.create_topic("t", partitions=2)
    with fab.producer() as producer:
        producer.send("t", b"old", partition=0)
    directory = os.path.join(fabric_dir, "t")
    mark_deleting(directory)  # a delete that died after its metadata went: the marker, then the metadata
    fab.cluster.coordinator.delete_topic("t")
    fab.create_topic("t", partitions=1)
    assert values(fab, "t", 0) == []
    assert "left behind by a delete that did not finish" in caplog.text
    fab.delete_topic("t")
    assert not os.path.exists(directory)


def test_delete_marks_the_directory_before_the_metadata_goes(fab, fabric_dir) -> None:
    fab.create_topic("t")
    directory = os.path.join(fabric_dir, "t")
    with pytest.raises(UnknownTopicError):
        fab.delete_topic("other")
    fab.cluster.coordinator.delete_topic("t")  # metadata gone by another way: delete refuses, keeps the data
    with pytest.raises(UnknownTopicError, match="fabric topics recover t"):
        fab.delete_topic("t")
    assert os.path.isdir(directory) and not os.path.exists(os.path.join(directory, DELETING))


def test_a_create_that_fails_halfway_leaves_nothing_registered(tmp_path) -> None:
    cluster = EmbeddedCluster(str(tmp_path / "data"), SqliteCoordinator(str(tmp_path / "meta" / "m.db")))
    try:
        os.symlink(str(tmp_path / "nowhere"), str(tmp_path / "data" / "t"))  # the partitions cannot be made
        with pytest.raises(OSError):
            cluster.create_topic("t", 2, {}, None)
        assert cluster.coordinator.list_topics() == []
    finally:
        cluster.close()


def test_partition_counts_are_capped(fab, fabric_dir, tmp_path, monkeypatch, capsys) -> None:
    for count in (1_000_000_000_000, 2**70):
        with pytest.raises(InvalidPartitionsError, match="partition"):
            fab.create_topic("huge", partitions=count)
    assert fab.list_topics() == [] and not os.path.exists(os.path.join(fabric_dir, "huge"))
    assert cli(["--url", fabric_dir, "topics", "create", "huge", "--partitions", "1000000000000"]) == 1
    assert "limit is 10000 per topic" in capsys.readouterr().err
    fab.create_topic("t")
    with pytest.raises(InvalidPartitionsError, match="limit is 10000"):
        fab.create_partitions("t", 10_001)
    monkeypatch.setenv("FABRIC_MAX_PARTITIONS", "4")
    small = EmbeddedCluster(str(tmp_path / "small"))
    try:
        with pytest.raises(InvalidPartitionsError, match="limit is 4 per topic"):
            small.create_topic("t", 5, {}, None)
        small.create_topic("t", 4, {}, None)
    finally:
        small.close()
    assert EmbeddedCluster(str(tmp_path / "own"), max_partitions=2).max_partitions == 2
    monkeypatch.setenv("FABRIC_MAX_PARTITIONS", "many")
    with pytest.raises(InvalidConfigError, match="FABRIC_MAX_PARTITIONS must be a partition count"):
        EmbeddedCluster(str(tmp_path / "bad"))


@pytest.mark.parametrize("call, error, match", [
    (lambda c: c.create_topic("t", 1, {"segment.bytes": "1"}, None), InvalidConfigError, "segment.bytes"),
    (lambda c: c.create_topic("t", 1, {"no.such.key": "1"}, None), InvalidConfigError, "unknown topic config"),
    (lambda c: c.create_topic("t", 1, {}, pa.schema([("key", pa.string())])), SchemaMismatchError, "'key' clashes"),
    (lambda c: c.create_topic("__t", 1, {}, None), Exception, "reserved"),
    (lambda c: c.create_topic("t", 0, {}, None), InvalidPartitionsError, "partition count"),
    (lambda c: c.alter_topic_config("orders", {"no.such.key": "1"}), InvalidConfigError, "unknown topic config"),
    (lambda c: c.alter_topic_config("orders", {"segment.bytes": "1"}), InvalidConfigError, "segment.bytes"),
    (lambda c: c.alter_topic_config("orders", {"no.such.key": None}), InvalidConfigError, "unknown topic config"),
    (lambda c: c.set_partitions("orders", 2**40), InvalidPartitionsError, "partition count"),
    (lambda c: c.commit_offsets("g", {("orders", 0): "x"}), InvalidRequestError, "must be an int"),
    (lambda c: c.commit_offsets("g", {("orders", 0): 2**70}), OffsetOutOfRangeError, "from 0 to"),
    (lambda c: c.commit_transaction("q:" + "9" * 30), InvalidRequestError, "sequence from 0 to"),
])
def test_the_sqlite_store_refuses_metadata_that_would_make_a_topic_unusable(tmp_path, call, error, match) -> None:
    store = SqliteCoordinator(str(tmp_path / "m.db"))
    try:
        store.create_topic("orders", 1, {"retention.ms": "1000"}, None)
        with pytest.raises(error, match=match):
            call(store)
        assert store.list_topics() == ["orders"] and store.topic("orders").config == {"retention.ms": "1000"}
        assert store.topic("orders").partitions == 1 and store.list_groups() == []
    finally:
        store.close()


def test_offset_commits_must_be_ints_within_the_log(fab) -> None:
    fab.create_topic("t", partitions=2)
    with fab.producer() as producer:
        for _ in range(5):
            producer.send("t", b"v", partition=0)
    consumer = fab.consumer("t", group_id="g", enable_auto_commit=False)
    consumer.commit({("t", 0): 3})
    for offsets, error, match in [({("t", 1): "x"}, InvalidRequestError, "must be an int"),
                                  ({("t", 0): True}, InvalidRequestError, "must be an int"),
                                  ({("t", 0): 6}, OffsetOutOfRangeError, r"holds offsets \[0, 5\]"),
                                  ({("t", 1): 1}, OffsetOutOfRangeError, r"holds offsets \[0, 0\]"),
                                  ({("t", 0): -1}, OffsetOutOfRangeError, "from 0 to"),
                                  ({("t", 7): 0}, Exception, "no partition 7"),
                                  ({("nope", 0): 0}, UnknownTopicError, "nope")]:
        member = consumer.group_metadata()  # raw calls as the member: the client's own checks are not in the way
        with pytest.raises(error, match=match):
            fab.cluster.commit_offsets("g", offsets, generation=member.generation, member_id=member.member_id)
    assert consumer.committed([("t", 0), ("t", 1)]) == {("t", 0): 3, ("t", 1): None}
    consumer.commit({("t", 0): 5, ("t", 1): 0})  # the group is not poisoned
    assert fab.describe_group("g")[0].lag == 0
    consumer.close()


@pytest.mark.parametrize("deleted", ["before its log is opened", "once its log is open"])
@pytest.mark.parametrize("call", ["partition_state", "fetch", "offset_for_time", "offset_after_records", "append"])
def test_a_partition_read_or_written_as_its_topic_is_deleted_answers_that_the_topic_is_gone(fab, fabric_dir,
                                                                                            monkeypatch, call,
                                                                                            deleted) -> None:
    """A call that found the topic registered, then its files gone (deleted between the two: a CI run hit it in
    a stream's planning), is UnknownTopicError, which readers take for a deletion, not a FileNotFoundError; and
    it makes no directory again, which would block the topic's next create."""
    fab.create_topic("doomed")
    with fab.producer() as producer:
        producer.send("doomed", b"v", partition=0)
    owner, name = (fab.cluster.coordinator, "topic") if deleted.startswith("before") else (fab.cluster.logs, "log")
    found = getattr(owner, name)

    def found_then_deleted(*args, **kwargs):
        out = found(*args, **kwargs)
        monkeypatch.setattr(owner, name, found)
        fab.delete_topic("doomed")
        return out
    monkeypatch.setattr(owner, name, found_then_deleted)
    args = {"partition_state": (), "fetch": (0, 1 << 20), "offset_for_time": (0,), "offset_after_records": (0, 1),
            "append": (plain_rows([b"w"], [None], [None], [None], 0),)}[call]
    with pytest.raises(UnknownTopicError, match="doomed"):
        getattr(fab.cluster, call)("doomed", 0, *args)
    assert fab.list_topics() == [] and not os.path.exists(os.path.join(fabric_dir, "doomed"))
    fab.create_topic("doomed")
