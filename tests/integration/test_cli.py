"""The `fabric` CLI, run as real subprocesses against an embedded fabric in a temp directory."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

import fabric
from fabric.common.waiting import wait_for

TIMEOUT_S = 60


def run(url: str, *args: str, stdin: bytes | str = b"") -> subprocess.CompletedProcess:
    """`python -m fabric.cli --url URL ARGS...` with `stdin`; returns the finished process (bytes out)."""
    return run_cli(["--url", url, *args], stdin)


def run_cli(args: list[str], stdin: bytes | str = b"", **popen) -> subprocess.CompletedProcess:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run([sys.executable, "-m", "fabric.cli", *args], input=data, capture_output=True,
                          timeout=TIMEOUT_S, **popen)


def ok(url: str, *args: str, stdin: bytes | str = b"") -> str:
    """Run a command that must succeed; returns its stdout as text."""
    proc = run(url, *args, stdin=stdin)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr
    return proc.stdout.decode()


def fails(url: str, *args: str, stdin: bytes | str = b"") -> str:
    """Run a command that must fail cleanly (exit 1, `error: ...`, no traceback); returns stderr."""
    proc = run(url, *args, stdin=stdin)
    err = proc.stderr.decode()
    assert proc.returncode == 1, (proc.returncode, err)
    assert "error: " in err and "Traceback" not in err, err
    return err


def table(text: str) -> list[dict[str, str]]:
    """Parse a column table printed by the CLI into one dict per row."""
    lines = [line.split() for line in text.strip().splitlines()]
    return [dict(zip(lines[0], row, strict=False)) for row in lines[1:]]


def describe_group(url: str, group: str, *extra: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """`groups describe`: its `Key: value` header line as a dict, and its table's rows."""
    header, _, rest = ok(url, "groups", "describe", group, *extra).partition("\n")
    return dict(field.split(": ", 1) for field in header.split("\t")), table(rest)


def group_rows(url: str, group: str) -> dict[tuple[str, int], dict[str, str]]:
    return {(r["TOPIC"], int(r["PARTITION"])): r for r in describe_group(url, group)[1]}


def described_ends(described: str) -> list[int]:
    """Log end offsets per partition from `topics describe` output (the table between header and configs)."""
    out = described.splitlines()
    rows = table("\n".join(out[1:out.index(next(line for line in out if line.startswith("Configs")))]))
    return [int(r["LOG-END-OFFSET"]) for r in rows]


def end_offsets(url: str, topic: str) -> list[int]:
    return described_ends(ok(url, "topics", "describe", topic))


def consume_json(url: str, topic: str, *extra: str) -> list[dict]:
    out = ok(url, "consume", topic, "--from-beginning", "--format", "json", "--timeout-ms", "300", *extra)
    return [json.loads(line) for line in out.splitlines()]


def test_help_lists_every_command_via_console_script():
    script = Path(sys.executable).parent / "fabric"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "fabric.cli"]
    top = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert top.returncode == 0
    for command in ("topics", "produce", "consume", "groups", "--url", "FABRIC_URL"):
        assert command in top.stdout
    sub = subprocess.run([*cmd, "groups", "reset-offsets", "--help"], capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    assert sub.returncode == 0 and "--to-datetime" in sub.stdout and "dry run" in sub.stdout


def test_topic_admin_round_trip(fabric_url):
    assert "Created topic orders" in ok(fabric_url, "topics", "create", "orders", "--partitions", "3",
                                        "--config", "retention.ms=86400000", "--config", "segment.bytes=1048576")
    from_env = run_cli(["topics", "list"], env={**os.environ, "FABRIC_URL": fabric_url})
    assert from_env.returncode == 0 and from_env.stdout.split() == [b"orders"]
    url_after_command = run_cli(["topics", "list", "--url", fabric_url])
    assert url_after_command.returncode == 0 and url_after_command.stdout.split() == [b"orders"]
    described = ok(fabric_url, "topics", "describe", "orders")
    assert "PartitionCount: 3" in described and "retention.ms=86400000" in described
    assert "segment.bytes=1048576" in described and "Schema" not in described
    assert described_ends(described) == [0, 0, 0]

    ok(fabric_url, "topics", "alter", "orders", "--config", "retention.ms=1000", "--delete-config", "segment.bytes")
    described = ok(fabric_url, "topics", "describe", "orders")
    assert "retention.ms=1000" in described and "segment.bytes" not in described

    assert "Deleted topic orders" in ok(fabric_url, "topics", "delete", "orders")
    assert ok(fabric_url, "topics", "list").split() == []


def test_default_url_is_fabric_data_in_the_working_directory(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FABRIC_URL"}
    made = run_cli(["topics", "create", "here"], cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "fabric-data" / "here").is_dir()


def test_produce_then_consume_text_and_json_with_keys(fabric_url):
    ok(fabric_url, "topics", "create", "t", "--partitions", "2")
    lines = [f"k{i}:value {i}:with colon" for i in range(6)]
    ok(fabric_url, "produce", "t", "--key-separator", ":", stdin="\n".join(lines) + "\n")
    ends = end_offsets(fabric_url, "t")
    assert sum(ends) == 6

    text = ok(fabric_url, "consume", "t", "--from-beginning", "--max-messages", "6")
    assert sorted(text.splitlines()) == [f"value {i}:with colon" for i in range(6)]
    keyed = ok(fabric_url, "consume", "t", "--from-beginning", "--max-messages", "6", "--print-key",
               "--key-separator", "=>")
    assert sorted(keyed.splitlines()) == [f"k{i}=>value {i}:with colon" for i in range(6)]

    records = consume_json(fabric_url, "t")
    assert sorted((r["key"], r["value"]) for r in records) == [(f"k{i}", f"value {i}:with colon") for i in range(6)]
    for r in records:
        assert r["topic"] == "t" and r["partition"] in (0, 1) and r["headers"] == []
        assert abs(r["timestamp"] / 1000 - time.time()) < 600
    assert sorted((r["partition"], r["offset"]) for r in records) == sorted(
        (p, o) for p, n in enumerate(ends) for o in range(n))


def test_raw_bytes_show_as_base64_and_a_bad_key_line_is_reported(fabric_url):
    ok(fabric_url, "topics", "create", "raw")
    ok(fabric_url, "produce", "raw", stdin=b"\xff\xfe\n\na\tb\r\n")
    records = consume_json(fabric_url, "raw")  # not UTF-8: base64 under value_b64, never as "value"
    assert [(r["key"], r.get("value"), r.get("value_b64")) for r in records] == [
        (None, None, "//4="), (None, "", None), (None, "a\tb", None)]
    assert "value" not in records[0]

    err = fails(fabric_url, "produce", "raw", "--key-separator", ":", stdin="a:1\nno separator\nb:2\n")
    assert "line 2" in err and "key separator" in err
    assert end_offsets(fabric_url, "raw") == [4]  # the line before the bad one was sent


def test_big_stdin_is_sent_in_batches(fabric_url):
    ok(fabric_url, "topics", "create", "big", "--partitions", "2")
    ok(fabric_url, "produce", "big", stdin="".join(f"{i}\n" for i in range(25_000)))
    assert sum(end_offsets(fabric_url, "big")) == 25_000


def test_group_commit_lag_and_reset_offsets(fabric_url):
    ok(fabric_url, "topics", "create", "g", "--partitions", "1")
    ok(fabric_url, "produce", "g", stdin="".join(f"a{i}\n" for i in range(5)))
    assert len(ok(fabric_url, "consume", "g", "--group", "app", "--from-beginning", "--max-messages", "5")
               .splitlines()) == 5
    assert ok(fabric_url, "groups", "list").split() == ["app"]
    row = group_rows(fabric_url, "app")[("g", 0)]
    assert (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) == ("5", "5", "0")

    ok(fabric_url, "produce", "g", stdin="b0\nb1\nb2\n")
    assert group_rows(fabric_url, "app")[("g", 0)]["LAG"] == "3"
    resumed = ok(fabric_url, "consume", "g", "--group", "app", "--max-messages", "2")
    assert resumed.splitlines() == ["b0", "b1"]
    assert group_rows(fabric_url, "app")[("g", 0)]["CURRENT-OFFSET"] == "7"

    dry = run(fabric_url, "groups", "reset-offsets", "app", "--topic", "g", "--to-earliest")
    assert dry.returncode == 0 and b"dry run" in dry.stderr
    assert table(dry.stdout.decode())[0]["NEW-OFFSET"] == "0"
    assert group_rows(fabric_url, "app")[("g", 0)]["CURRENT-OFFSET"] == "7"

    ok(fabric_url, "groups", "reset-offsets", "app", "--topic", "g", "--to-earliest", "--execute")
    assert group_rows(fabric_url, "app")[("g", 0)]["CURRENT-OFFSET"] == "0"
    ok(fabric_url, "groups", "reset-offsets", "app", "--topic", "g", "--to-offset", "4", "--execute")
    assert group_rows(fabric_url, "app")[("g", 0)]["CURRENT-OFFSET"] == "4"

    first_b = next(r for r in consume_json(fabric_url, "g") if r["value"] == "b0")
    since = datetime.fromtimestamp(first_b["timestamp"] / 1000, tz=timezone.utc).isoformat()
    ok(fabric_url, "groups", "reset-offsets", "app", "--topic", "g", "--to-datetime", since, "--execute")
    row = group_rows(fabric_url, "app")[("g", 0)]
    assert (row["CURRENT-OFFSET"], row["LAG"]) == (str(first_b["offset"]), "3")


def test_typed_topic_round_trip(fabric_url):
    ok(fabric_url, "topics", "create", "pay", "--partitions", "2",
       "--schema", "user:string, amount:int64, at:timestamp[us, tz=UTC]")
    described = ok(fabric_url, "topics", "describe", "pay")
    assert "Typed: yes" in described and "amount: int64" in described and "at: timestamp[us, tz=UTC]" in described
    values = [{"user": f"u{i}", "amount": i * 10, "at": None} for i in range(4)]
    ok(fabric_url, "produce", "pay", "--key-separator", "|",
       stdin="".join(f"u{i}|{json.dumps(v)}\n" for i, v in enumerate(values)) + "\n")

    text = ok(fabric_url, "consume", "pay", "--from-beginning", "--max-messages", "4")
    assert sorted((json.loads(line) for line in text.splitlines()), key=lambda v: v["user"]) == values
    records = consume_json(fabric_url, "pay")
    assert sorted((r["key"], r["value"]["amount"]) for r in records) == [(f"u{i}", i * 10) for i in range(4)]

    err = fails(fabric_url, "produce", "pay", stdin='{"user": "x", "amount": 1}\n{"user": 7}\n')
    assert "line 2" in err and "'user'" in err and "string" in err
    assert "line 1" in fails(fabric_url, "produce", "pay", stdin="not json\n")
    assert sum(end_offsets(fabric_url, "pay")) == 5  # the good line before the bad one was sent


ERROR_CASES = [
    (("topics", "describe", "missing"), "", "does not exist"),
    (("consume", "missing", "--max-messages", "1"), "", "does not exist"),
    (("produce", "missing"), "x\n", "does not exist"),
    (("topics", "create", "../evil"), "", "illegal characters"),
    (("topics", "create", "bad", "--config", "retention.ms=soon"), "", "retention.ms"),
    (("topics", "create", "bad", "--config", "retention.ms"), "", "key=value"),
    (("topics", "create", "bad", "--schema", "user:text"), "", "unknown type 'text'"),
    (("topics", "create", "bad", "--schema", "user"), "", "name:type"),
    (("topics", "create", "bad", "--partitions", "many"), "", "invalid int value"),
    (("groups", "describe", "nobody"), "", "no committed offsets"),
    (("groups", "reset-offsets", "g", "--topic", "t"), "", "one of the arguments"),
]


def all_fail(url: str | None, cases: list[tuple[tuple[str, ...], str, str]]) -> None:
    """Run (args, stdin, expected) commands concurrently (they are independent); each must exit 1 printing
    `error: ...` with `expected` in it and no traceback. `url` None: the args give --url themselves."""
    procs = [(subprocess.Popen([sys.executable, "-m", "fabric.cli", *(("--url", url) if url else ()), *args],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE), stdin, expected)
             for args, stdin, expected in cases]
    for proc, stdin, expected in procs:
        _, err = proc.communicate(stdin.encode(), timeout=TIMEOUT_S)
        text = err.decode()
        assert proc.returncode == 1 and expected in text and "error: " in text, (proc.args, text)
        assert "Traceback" not in text


def test_errors_exit_1_with_a_clear_message(fabric_url):
    all_fail(fabric_url, ERROR_CASES)
    assert ok(fabric_url, "topics", "list") == ""


def test_create_refuses_bad_partition_counts(fabric_url):
    all_fail(fabric_url, [(("topics", "create", "t", "--partitions", count), "", why) for count, why in (
        ("9223372036854775808", "partition count must be an integer from 1"),
        ("0", "partition count must be an integer from 1"), ("-3", "partition count must be an integer from 1"),
        ("10001", "the limit is 10000 per topic"))])
    assert ok(fabric_url, "topics", "list") == ""


def test_alter_refuses_deleting_an_unknown_config(fabric_url):
    ok(fabric_url, "topics", "create", "t", "--config", "retention.ms=1000")
    err = fails(fabric_url, "topics", "alter", "t", "--config", "segment.bytes=4096", "--delete-config", "no.such.key")
    assert "unknown topic config 'no.such.key'; known keys: cleanup.policy" in err
    described = ok(fabric_url, "topics", "describe", "t")
    assert "retention.ms=1000" in described and "segment.bytes" not in described


def test_typed_topic_with_an_unknown_time_zone_is_refused(fabric_url):
    err = fails(fabric_url, "topics", "create", "mars", "--schema", "ts:timestamp[us, tz=Mars/Base]")
    assert "unknown time zone 'Mars/Base'" in err and "+01:00" in err
    ok(fabric_url, "topics", "create", "earth", "--schema", "ts:timestamp[us, tz=+01:00],n:int64")
    assert ok(fabric_url, "topics", "list").split() == ["earth"]


def test_consume_json_prints_nan_and_infinity_as_strings(fabric_url):
    with fabric.connect(fabric_url) as fab:  # a list field: more than --schema spells
        fab.create_topic("f", schema=pa.schema([("x", pa.float64()), ("xs", pa.list_(pa.float64()))]))
    ok(fabric_url, "produce", "f", stdin='{"x": NaN, "xs": [Infinity, -Infinity, 1.5]}\n{"x": 2.5}\n')

    def strict(line: str) -> dict:
        return json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} is not JSON: {line}"))
    records = [strict(line) for line in ok(fabric_url, "consume", "f", "--from-beginning", "--format", "json",
                                          "--timeout-ms", "300").splitlines()]
    assert [r["value"] for r in records] == [{"x": "NaN", "xs": ["Infinity", "-Infinity", 1.5]},
                                             {"x": 2.5, "xs": None}]
    text = ok(fabric_url, "consume", "f", "--from-beginning", "--timeout-ms", "300")
    assert [strict(line)["x"] for line in text.splitlines()] == ["NaN", 2.5]


def test_bad_options_and_urls_fail_cleanly(fabric_url, tmp_path):
    ok(fabric_url, "topics", "create", "t")
    all_fail(fabric_url, [
        (("produce", "t", "--key-separator", ""), "a:b\n", "--key-separator cannot be empty"),
        (("consume", "t", "--timeout-ms", "-1"), "", "--timeout-ms must be 0 or more"),
        (("groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "0001-01-01T00:00:00"), "",
         "out of range"),
    ])
    (tmp_path / "a-file").write_text("")
    all_fail(None, [(("--url", url, "topics", "list"), "", expected) for url, expected in [
        (f"file://{tmp_path}/a-file", "cannot open an embedded fabric"),
        (str(tmp_path / "a-file"), "cannot open an embedded fabric"),
        ("file://", "must be a directory path"),
        (f"{fabric_url}?retention=1", "must be a directory path"),
        ("fabric://[::1", "cannot be parsed"),
    ]])
    assert end_offsets(fabric_url, "t") == [0]


def _lines_of(stream) -> queue.Queue:
    """Lines of a pipe, read by a thread so the test can wait with a deadline."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in iter(stream.readline, b"")], daemon=True).start()
    return lines


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_consume_tails_until_signalled_then_commits_and_exits_0(fabric_url, sig):
    ok(fabric_url, "topics", "create", "live")
    proc = subprocess.Popen([sys.executable, "-m", "fabric.cli", "--url", fabric_url, "consume", "live",
                             "--group", "tail", "--from-beginning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = _lines_of(proc.stdout)
        ok(fabric_url, "produce", "live", stdin="x\ny\nz\n")
        deadline = time.monotonic() + TIMEOUT_S
        got = [lines.get(timeout=max(deadline - time.monotonic(), 0)) for _ in range(3)]
        assert got == [b"x\n", b"y\n", b"z\n"]
        proc.send_signal(sig)
        assert proc.wait(timeout=TIMEOUT_S) == 0
        err = proc.stderr.read().decode()
        assert "Processed a total of 3 messages" in err and "Traceback" not in err
    finally:
        proc.kill()
        proc.wait()
    row = group_rows(fabric_url, "tail")[("live", 0)]
    assert (row["CURRENT-OFFSET"], row["LAG"]) == ("3", "0")


def test_describe_shows_state_generation_and_the_owner_of_each_partition(fabric_url):
    fast = dict(session_timeout_ms=20000, heartbeat_interval_ms=200, auto_offset_reset="earliest",
                enable_auto_commit=False)
    with fabric.connect(fabric_url) as fab:
        fab.create_topic("work", partitions=3)
        with fab.producer() as producer:
            for p in range(3):
                producer.send("work", b"x", partition=p)
        a = fab.consumer("work", group_id="crew", client_id="reader-a", group_instance_id="box-a", **fast)
        b = fab.consumer("work", group_id="crew", client_id="reader-b", **fast)
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while not (a.assignment() and b.assignment() and len(a.assignment() + b.assignment()) == 3
                       and fab.cluster.coordinator.describe_group("crew").state == "Stable"):
                assert time.monotonic() < deadline, "the two members never split the 3 partitions"
                a.poll(0.05), b.poll(0.05)
            a.commit({tp: 1 for tp in a.assignment()})  # b commits nothing: its rows show no offset, but its id
            live = fab.cluster.coordinator.describe_group("crew")
            owner = {tp: m for m in live.members for tp in m.assignment}
            header, rows = describe_group(fabric_url, "crew")
            assert header == {"Group": "crew", "State": "Stable", "Generation": str(live.generation),
                              "Protocol": "range", "Members": "2"}
            assert len(rows) == 3
            for row in rows:
                tp = (row["TOPIC"], int(row["PARTITION"]))
                mine = tp in a.assignment()
                assert (row["CONSUMER-ID"], row["CLIENT-ID"]) == (owner[tp].member_id, owner[tp].client_id)
                assert row["INSTANCE-ID"] == ("box-a" if mine else "-")
                assert (row["CURRENT-OFFSET"], row["LOG-END-OFFSET"], row["LAG"]) == (
                    ("1", "1", "0") if mine else ("-", "1", "-"))
            header, members = describe_group(fabric_url, "crew", "--members")
            assert header["State"] == "Stable"
            assert {(m["CONSUMER-ID"], m["CLIENT-ID"], m["INSTANCE-ID"], m["#PARTITIONS"], m["ASSIGNMENT"])
                    for m in members} == {
                (m.member_id, m.client_id, m.group_instance_id or "-", str(len(m.assignment)),
                 "work(" + ",".join(str(p) for _, p in sorted(m.assignment)) + ")") for m in live.members}
        finally:
            a.close()
            b.close()
        static = next(m.member_id for m in live.members if m.group_instance_id == "box-a")
        header, rows = describe_group(fabric_url, "crew")  # the static member keeps its slot (KIP-345)
        assert header["Members"] == "1" and {r["CONSUMER-ID"] for r in rows} == {static, "-"}
        fab.cluster.coordinator.leave_group("crew", static)  # as Kafka's removeMembersFromConsumerGroup
    proc = run(fabric_url, "groups", "describe", "crew")  # every member gone: offsets stay, owners do not
    rows = table(proc.stdout.decode().partition("\n")[2])
    assert proc.returncode == 0 and b"has no active members" in proc.stderr
    assert {r["CONSUMER-ID"] for r in rows} == {"-"} and len(rows) == 3


@pytest.fixture(params=["embedded", "service"])
def either_url(request, fabric_url) -> str:
    """An embedded fabric, or a coordinator service process (over fabric://)."""
    return fabric_url if request.param == "embedded" else request.getfixturevalue("coordinators")().url()


def test_topics_compact_and_retain_on_demand(either_url, drain):
    url = either_url
    with fabric.connect(url) as fab:
        fab.create_topic("table", 2, config={"cleanup.policy": "compact"})
        fab.create_topic("old", config={"retention.ms": "60000"})
        with fab.producer(batch_size=1, linger_ms=0) as producer:  # a batch per record: each may go
            for i in range(40):
                producer.send("table", b"v%d" % i, key=b"k%d" % (i % 4))
            for _ in range(5):
                producer.send("old", b"x", timestamp=1_000_000)  # CreateTime in 1970: past retention.ms
    out = ok(url, "topics", "compact", "table").splitlines()
    assert out[0].startswith("Compacted 2 of the 2 partition(s) of topic table: ") and "36 records removed" in out[0]
    assert [line.split(":")[0].strip() for line in out[1:]] == ["table-0", "table-1"]
    assert all("compacted offsets below" in line for line in out[1:]), out
    with fabric.connect(url) as fab:
        records = drain(fab.consumer("table", auto_offset_reset="earliest"), 4)
    assert sorted((r.key, r.value) for r in records) == [(b"k%d" % k, b"v%d" % (36 + k)) for k in range(4)]

    out = ok(url, "topics", "retain", "--topic", "old")
    assert out.startswith("Retention of topic old deleted 1 segment(s).\n")
    assert [(r["PARTITION"], r["LOG-START-OFFSET"], r["LOG-END-OFFSET"]) for r in table(out.split("\n", 1)[1])] == [
        ("0", "5", "5")]
    assert ok(url, "topics", "retain", "old").startswith("Retention of topic old deleted 0 segment(s).")

    assert "topic 'nope' does not exist" in fails(url, "topics", "compact", "nope")
    assert "topic 'nope' does not exist" in fails(url, "topics", "retain", "--topic", "nope")
    err = fails(url, "topics", "compact", "old")
    assert "topic 'old' is not compacted (cleanup.policy=delete)" in err
    assert "fabric topics alter old --config cleanup.policy=compact" in err
    assert "name the topic: fabric topics compact NAME (or --topic NAME)" in fails(url, "topics", "compact")
    assert "two topics given" in fails(url, "topics", "retain", "old", "--topic", "table")


def test_retain_compact_and_delete_records_run_at_the_leader_and_the_coordinator_skips_replicated_topics(
        node_cluster):
    cluster = node_cluster(nodes=1, coordinator_extra=("--log-retention-check-interval-ms", "50"))
    url = cluster.url
    # `arep` is listed before `local`, so a pass that reached `local` went by `arep` first
    ok(url, "topics", "create", "arep", "--replication-factor", "1", "--config", "cleanup.policy=compact")
    ok(url, "topics", "create", "local", "--config", "cleanup.policy=compact", "--config", "max.compaction.lag.ms=1")
    assert "Retention of topic arep deleted 0 segment(s)." in ok(url, "topics", "retain", "arep")  # at its leader
    err = fails(url, "topics", "delete-records", "arep", "--partition", "0", "--before-offset", "1")
    assert "its cleanup.policy=compact keeps every key's latest value" in err, err  # refused by the leader node
    with fabric.connect(url) as fab:
        with fab.producer(batch_size=1, linger_ms=0) as producer:
            for i in range(3):
                producer.send("arep", b"v%d" % i, key=b"k")
                producer.send("local", b"v%d" % i, key=b"k")

        def local_compacted() -> bool:
            fetched = fab.cluster.fetch("local", 0, 0, 1 << 20)
            return [f.batch.column("value").to_pylist() for f in fetched if f.batch.num_rows] == [[b"v2"]]

        wait_for(local_compacted, what="the coordinator's maintenance to compact `local`")
        assert sum(f.batch.num_rows for f in fab.cluster.fetch("arep", 0, 0, 1 << 20)) == 3  # untouched on its node
        shown = ok(url, "topics", "compact", "arep")  # at the partition's leader node
        assert "arep-0: compacted offsets below 3" in shown and "2 records removed" in shown, shown
        assert [f.batch.column("value").to_pylist() for f in fab.cluster.fetch("arep", 0, 0, 1 << 20)
                if f.batch.num_rows] == [[b"v2"]]
    with open(cluster.coordinator.log_path) as f:
        log = f.read()
    assert "log maintenance of arep-0 failed" not in log and "NotLeaderError" not in log, log
    assert not os.path.exists(os.path.join(cluster.coordinator.data_dir, "arep"))  # never opened in its directory
