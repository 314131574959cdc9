"""Kafka's console tools and kcat habits at the `fabric` command, run as real subprocesses: consume's --partition,
--offset, --exit-at-end and --property (DefaultMessageFormatter), JSON that marks base64, produce's --partition,
headers (KIP-798) and progress, groups delete / describe --all-groups / reset-offsets strategies, and shell
completion through argcomplete's own protocol."""
from __future__ import annotations

import json
import subprocess

import pytest

import fabric


class Cli:
    """`fabric --url URL ...` through the fabric_cli fixture: `ok` must exit 0 (its stdout), `error` must exit 1
    with `error: ...` and no traceback (its stderr)."""

    def __init__(self, run, url: str) -> None:
        self.run_cli, self.url = run, url

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return self.run_cli("--url", self.url, *args, stdin=stdin)

    def ok(self, *args: str, stdin: str = "") -> str:
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (args, done.stderr)
        return done.stdout

    def error(self, *args: str, stdin: str = "") -> str:
        done = self.run(*args, stdin=stdin)
        assert done.returncode == 1 and "error: " in done.stderr and "Traceback" not in done.stderr, (
            args, done.returncode, done.stderr)
        return done.stderr

    def rows(self, *args: str) -> list[dict[str, str]]:
        """A command's column table as one dict per row (the header line names the columns)."""
        head, *body = [line.split() for line in self.ok(*args).splitlines() if line and ": " not in line]
        return [dict(zip(head, row, strict=False)) for row in body]


@pytest.fixture
def cli(fabric_cli, fabric_url) -> Cli:
    return Cli(fabric_cli, fabric_url)


def ends(url: str, topic: str) -> list[int]:
    with fabric.connect(url) as fab:
        return [p.end_offset for p in fab.describe_topic(topic).partitions]


# -- consume ---------------------------------------------------------------------------------------------------
def test_consume_prints_the_fields_kafkas_formatter_prints(cli):
    cli.ok("topics", "create", "t", "--partitions", "2")
    cli.ok("produce", "t", "--partition", "1", "--property", "parse.headers=true", "parse.key=true",
           stdin="h1:v1,h2\tk1\tone\n\tk2\ttwo\n")
    cli.ok("produce", "t", "--partition", "0", stdin="zero\n")
    assert ends(cli.url, "t") == [1, 2]

    every = cli.ok("consume", "t", "--from-beginning", "--exit-at-end", "--property", "print.timestamp=true",
                   "print.partition=true", "print.offset=true", "--property", "print.headers=true", "print.key=true")
    fields = sorted((line.split("\t") for line in every.splitlines()), key=lambda f: f[1:3])
    assert [f[1:] for f in fields] == [["Partition:0", "Offset:0", "NO_HEADERS", "null", "zero"],
                                       ["Partition:1", "Offset:0", "h1:v1,h2:null", "k1", "one"],
                                       ["Partition:1", "Offset:1", "NO_HEADERS", "k2", "two"]]
    records = {r["value"]: r for r in map(json.loads, cli.ok("consume", "t", "--from-beginning", "--exit-at-end",
                                                                "--format", "json").splitlines())}
    assert [f[0] for f in fields] == [f"CreateTime:{records[v]['timestamp']}" for v in ("zero", "one", "two")]

    separated = cli.ok("consume", "t", "--partition", "1", "--offset", "earliest", "--exit-at-end", "--property",
                       "print.offset=true", "print.key=true", "print.value=false", "key.separator=|",
                       "headers.separator=;", "null.literal=NULL")
    assert separated.splitlines() == ["Offset:0|k1", "Offset:1|k2"]
    alias = cli.ok("consume", "t", "--partition", "1", "--offset", "0", "--exit-at-end", "--print-key",
                   "--key-separator", "=>")
    assert alias.splitlines() == ["k1=>one", "k2=>two"]

    unknown = cli.error("consume", "t", "--property", "print.colour=true")
    assert "unknown --property print.colour; known: print.timestamp, print.partition, print.offset" in unknown
    assert "print.headers=true" not in unknown and "headers.key.separator" in unknown
    assert "must be true or false, got 'yes'" in cli.error("consume", "t", "--property", "print.key=yes")
    assert "expects key=value (e.g. print.offset=true)" in cli.error("consume", "t", "--property", "print.key")
    assert "--format json prints them all" in cli.error("consume", "t", "--format", "json", "--property",
                                                        "print.key=true")


def test_consume_one_partition_from_an_offset_and_exit_at_its_end(cli):
    cli.ok("topics", "create", "t", "--partitions", "2")
    cli.ok("produce", "t", "--partition", "0", stdin="".join(f"a{i}\n" for i in range(5)))
    cli.ok("produce", "t", "--partition", "1", stdin="b0\nb1\nb2\n")
    assert ends(cli.url, "t") == [5, 3]

    assert cli.ok("consume", "t", "--partition", "0", "--offset", "2", "--exit-at-end").split() == ["a2", "a3", "a4"]
    assert cli.ok("consume", "t", "--partition", "1", "--offset", "earliest", "--exit-at-end").split() == [
        "b0", "b1", "b2"]
    assert cli.ok("consume", "t", "--partition", "1", "--from-beginning", "--max-messages", "1").split() == ["b0"]
    latest = cli.run("consume", "t", "--partition", "1", "--offset", "latest", "--exit-at-end")
    assert latest.returncode == 0 and latest.stdout == "" and "Processed a total of 0 messages" in latest.stderr
    past = cli.run("consume", "t", "--partition", "0", "--offset", "99", "--exit-at-end")
    assert past.returncode == 0 and past.stdout == ""
    assert "Offset 99 is outside t-0's log [0, 5]; reading from 5" in past.stderr

    # every partition of the topic, as a group member: exits at the end by itself and commits what it printed
    everything = cli.run("consume", "t", "--group", "g", "--from-beginning", "--exit-at-end")
    assert everything.returncode == 0, everything.stderr
    assert sorted(everything.stdout.split()) == [f"a{i}" for i in range(5)] + ["b0", "b1", "b2"]
    assert "Processed a total of 8 messages" in everything.stderr
    assert {(r["PARTITION"], r["CURRENT-OFFSET"], r["LAG"]) for r in cli.rows("groups", "describe", "g")} == {
        ("0", "5", "0"), ("1", "3", "0")}
    assert cli.ok("consume", "t", "--group", "g", "--exit-at-end") == ""  # nothing left past its commits

    assert "--offset needs --partition P" in cli.error("consume", "t", "--offset", "1")
    assert "--partition and --group cannot be used together" in cli.error("consume", "t", "--partition", "0",
                                                                          "--group", "g")
    assert "--offset and --from-beginning cannot be used together" in cli.error(
        "consume", "t", "--partition", "0", "--offset", "1", "--from-beginning")
    assert "expected an offset (0 or more), earliest or latest, got 'soon'" in cli.error(
        "consume", "t", "--partition", "0", "--offset", "soon")
    assert "has no partition 2" in cli.error("consume", "t", "--partition", "2", "--exit-at-end")


def test_json_marks_what_is_base64(cli):
    with fabric.connect(cli.url) as fab:
        fab.create_topic("raw")
        with fab.producer() as producer:
            producer.send("raw", b"\xff\xfe", key=b"\x80", headers=[("bin", b"\xc3"), ("txt", b"ok"), ("none", None)])
            producer.send("raw", "text", key="k")
    lines = cli.ok("consume", "raw", "--from-beginning", "--exit-at-end", "--format", "json").splitlines()
    binary, text = (json.loads(line) for line in lines)
    assert (binary["key_b64"], binary["value_b64"]) == ("gA==", "//4=")
    assert "key" not in binary and "value" not in binary
    assert binary["headers"] == [{"key": "bin", "value_b64": "ww=="}, {"key": "txt", "value": "ok"},
                                 {"key": "none", "value": None}]
    assert (text["key"], text["value"], text["headers"]) == ("k", "text", [])
    assert "key_b64" not in text and "value_b64" not in text


# -- produce ---------------------------------------------------------------------------------------------------
def test_produce_headers_as_kip_798_and_refuses_what_it_cannot_read(cli):
    cli.ok("topics", "create", "h", "--partitions", "3")
    cli.ok("produce", "h", "--partition", "2", "--key-separator", "=", "--property", "parse.headers=true",
           "headers.delimiter=|", "headers.separator=;", "headers.key.separator=~", stdin="a~1;b~2|k=v\n|k2=v2\n")
    assert ends(cli.url, "h") == [0, 0, 2]
    records = [json.loads(line) for line in cli.ok("consume", "h", "--from-beginning", "--exit-at-end",
                                                    "--format", "json").splitlines()]
    assert [(r["partition"], r["key"], r["value"], r["headers"]) for r in records] == [
        (2, "k", "v", [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}]), (2, "k2", "v2", [])]

    err = cli.error("produce", "h", "--property", "parse.headers=true", stdin="x:1\tfine\nno delimiter\n")
    assert "line 2: no headers delimiter '\\t' found" in err and "the lines before it were sent" in err
    assert sum(ends(cli.url, "h")) == 3
    assert "unknown --property print.key; known: parse.key, key.separator, parse.headers" in cli.error(
        "produce", "h", "--property", "print.key=true")
    assert "disagree" in cli.error("produce", "h", "--key-separator", ":", "--property", "key.separator=;")
    assert "--partition 3: topic 'h' has partitions 0..2" in cli.error("produce", "h", "--partition", "3",
                                                                        stdin="x\n")
    assert sum(ends(cli.url, "h")) == 3


def test_produce_a_million_lines_reports_progress(cli):
    cli.ok("topics", "create", "big", "--partitions", "2")
    done = cli.run("produce", "big", stdin="".join(f"{i}\n" for i in range(1_000_000)))
    assert done.returncode == 0, done.stderr
    progress = done.stderr.splitlines()
    assert [line.split(" records")[0] for line in progress] == [f"Sent {n}" for n in range(100_000, 1_000_001,
                                                                                              100_000)] + [
        "Sent a total of 1000000"]
    assert all("records/s)" in line for line in progress)
    assert sum(ends(cli.url, "big")) == 1_000_000
    quiet = cli.run("produce", "big", stdin="one\ntwo\n")
    assert quiet.returncode == 0 and quiet.stderr == ""
