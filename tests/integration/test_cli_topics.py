"""`fabric topics` as Kafka's tools are typed (kafka-topics --alter --partitions, --if-not-exists, --describe of
every topic, kafka-delete-records), run as real subprocesses against an embedded fabric and a coordinator
service; a replicated topic's delete-records is refused with the reason."""
from __future__ import annotations

import json

import pytest

import fabric


@pytest.fixture(params=["embedded", "service"])
def url(request, fabric_url) -> str:
    """An embedded fabric, or a coordinator service process (over fabric://)."""
    return fabric_url if request.param == "embedded" else request.getfixturevalue("coordinators")().url()


@pytest.fixture
def ok(fabric_cli):
    """ok(url, *args) → stdout of a command that must succeed (no traceback)."""
    def run(url: str, *args: str) -> str:
        proc = fabric_cli("--url", url, *args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        return proc.stdout
    return run


@pytest.fixture
def fails(fabric_cli):
    """fails(url, *args) → stderr of a command that must fail cleanly (exit 1, `error: ...`, no traceback)."""
    def run(url: str, *args: str) -> str:
        proc = fabric_cli("--url", url, *args)
        assert proc.returncode == 1 and "error: " in proc.stderr and "Traceback" not in proc.stderr, (
            proc.returncode, proc.stdout, proc.stderr)
        return proc.stderr
    return run


def _rows(text: str) -> list[dict[str, str]]:
    lines = [line.split() for line in text.strip().splitlines()]
    return [dict(zip(lines[0], row, strict=False)) for row in lines[1:]]


def _starts(url: str, topic: str) -> list[int]:
    with fabric.connect(url) as fab:
        return [p.start_offset for p in fab.describe_topic(topic).partitions]


def test_create_if_not_exists(url, ok, fails, fabric_cli):
    assert ok(url, "topics", "create", "t", "--partitions", "2") == "Created topic t.\n"
    err = fails(url, "topics", "create", "t", "--partitions", "2")
    assert "topic 't' already exists" in err and "--if-not-exists" in err
    out = ok(url, "topics", "create", "t", "--partitions", "2", "--if-not-exists")
    assert out == "Topic t already exists (2 partition(s)); left as it is.\n"
    proc = fabric_cli("--url", url, "topics", "create", "t", "--partitions", "5", "--if-not-exists")
    assert proc.returncode == 0 and "already exists (2 partition(s)); left as it is." in proc.stdout
    assert "differs from what was asked (2 partitions, not 5)" in proc.stderr, proc.stderr
    assert ok(url, "topics", "create", "u", "--if-not-exists") == "Created topic u.\n"
    assert ok(url, "topics", "list").split() == ["t", "u"]


def test_alter_partitions(url, ok, fails):
    ok(url, "topics", "create", "t", "--partitions", "2")
    assert ok(url, "topics", "alter", "t", "--partitions", "4") == "Topic t has 4 partitions now (was 2).\n"
    assert ok(url, "topics", "describe", "t").startswith("Topic: t\tPartitionCount: 4\t")
    assert "the new total must be larger, got 3" in fails(url, "topics", "alter", "t", "--partitions", "3")
    out = ok(url, "topics", "alter", "t", "--partitions", "5", "--config", "retention.ms=1000")
    assert out.splitlines() == ["Topic t has 5 partitions now (was 4).", "Altered config of topic t."]
    assert "give --partitions N" in fails(url, "topics", "alter", "t")
    assert "topic 'nope' does not exist" in fails(url, "topics", "alter", "nope", "--partitions", "2")


def test_describe_without_a_name_describes_every_topic(url, ok):
    ok(url, "topics", "create", "a", "--partitions", "2")
    ok(url, "topics", "create", "b")
    out = ok(url, "topics", "describe")
    assert [line.split("\t")[0] for line in out.splitlines() if line.startswith("Topic: ")] == ["Topic: a",
                                                                                                "Topic: b"]
    described = json.loads(ok(url, "topics", "describe", "--format", "json"))
    assert [(d["name"], len(d["partitions"])) for d in described] == [("a", 2), ("b", 1)]


def test_delete_records(url, ok, fails, fabric_cli, tmp_path):
    ok(url, "topics", "create", "t", "--partitions", "2")
    with fabric.connect(url) as fab, fab.producer() as producer:
        for p in (0, 1):
            for i in range(10):
                producer.send("t", b"v%d" % i, partition=p)
    out = ok(url, "topics", "delete-records", "t", "--partition", "0", "--before-offset", "4")
    assert out == "Records delete operation completed:\npartition: t-0\tlow_watermark: 4\n"
    rows = _rows(ok(url, "topics", "describe", "t").split("\n", 1)[1].split("Configs")[0])
    assert [(r["PARTITION"], r["LOG-START-OFFSET"], r["LOG-END-OFFSET"]) for r in rows] == [("0", "4", "10"),
                                                                                          ("1", "0", "10")]
    with fabric.connect(url) as fab:
        consumer = fab.consumer(auto_offset_reset="earliest")
        consumer.assign([("t", 0)])
        assert consumer.beginning_offsets([("t", 0)]) == {("t", 0): 4}

    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": -1},
                                                  {"topic": "t", "partition": 1, "offset": 7}], "version": 1}))
    out = ok(url, "topics", "delete-records", "--offset-json-file", str(offsets))
    assert out.splitlines()[1:] == ["partition: t-0\tlow_watermark: 10", "partition: t-1\tlow_watermark: 7"]
    assert _starts(url, "t") == [10, 7]

    err = fails(url, "topics", "delete-records", "t", "--partition", "1", "--before-offset", "11")
    assert "before offset 11" in err and "give an offset from 0 to 10, or -1 for the high watermark" in err
    assert "--partition P --before-offset N" in fails(url, "topics", "delete-records", "t", "--partition", "1")
    assert "not both" in fails(url, "topics", "delete-records", "t", "--offset-json-file", str(offsets))
    proc = fabric_cli("--url", url, "topics", "delete-records", "t", "--partition", "2", "--before-offset", "0")
    assert proc.returncode == 1 and "there is no partition 2" in proc.stderr and proc.stdout == ""
    offsets.write_text('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}')
    err = fails(url, "topics", "delete-records", "--offset-json-file", str(offsets))
    assert "needs a string topic and int partition and offset" in err
    assert "cannot read --offset-json-file" in fails(url, "topics", "delete-records", "--offset-json-file",
                                                     str(tmp_path / "missing.json"))
    assert _starts(url, "t") == [10, 7]  # the refused requests changed nothing


def test_delete_records_of_a_replicated_topic_runs_at_its_leader(node_cluster, ok, fails):
    cluster = node_cluster(nodes=1)
    ok(cluster.url, "topics", "create", "rep", "--replication-factor", "1")
    with fabric.connect(cluster.url) as fab, fab.producer() as producer:
        for i in range(10):
            producer.send("rep", b"v%d" % i)
    out = ok(cluster.url, "topics", "delete-records", "rep", "--partition", "0", "--before-offset", "4")
    assert out == "Records delete operation completed:\npartition: rep-0\tlow_watermark: 4\n"
    assert _starts(cluster.url, "rep") == [4]
    err = fails(cluster.url, "topics", "delete-records", "rep", "--partition", "0", "--before-offset", "11")
    assert "before offset 11" in err and "high watermark 10" in err, err  # refused by the leader node
    assert "there is no partition 1" in fails(cluster.url, "topics", "delete-records", "rep", "--partition", "1",
                                              "--before-offset", "0")
