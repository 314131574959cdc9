"""Kafka's console tools and kcat habits at the `fabric` command, run as real subprocesses: consume's --partition,
--offset, --exit-at-end and --property (DefaultMessageFormatter), JSON that marks base64, produce's --partition,
headers (KIP-798) and progress, groups delete / describe --all-groups / reset-offsets strategies, and shell
completion through argcomplete's own protocol."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fabric
from fabric.common.errors import GroupIdNotFoundError, GroupNotEmptyError
from fabric.common.waiting import wait_for


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
        return [dict(zip(head, row, strict=False)) for row in body if row != head]


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
    for bad in ("soon", str(2**63)):  # one past a 64-bit offset was taken and shown as the next offset
        assert f"expected an offset from 0 to {2**63 - 1}, earliest or latest, got '{bad}'" in cli.error(
            "consume", "t", "--partition", "0", "--offset", bad)
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


# -- groups ----------------------------------------------------------------------------------------------------
def committed_offsets(cli: Cli, group: str) -> dict[tuple[str, int], str]:
    return {(r["TOPIC"], int(r["PARTITION"])): r["CURRENT-OFFSET"] for r in cli.rows("groups", "describe", group)}


def test_groups_delete_refuses_a_group_with_live_members_and_describe_all_groups(cli):
    cli.ok("topics", "create", "t")
    cli.ok("produce", "t", stdin="a\nb\n")
    for group in ("one", "two"):
        cli.ok("consume", "t", "--group", group, "--from-beginning", "--exit-at-end")
    every = cli.ok("groups", "describe", "--all-groups")
    assert [line.split("\t")[0] for line in every.splitlines() if line.startswith("Group: ")] == [
        "Group: one", "Group: two"]
    assert [r["GROUP"] for r in cli.rows("groups", "describe", "--all-groups")] == ["one", "two"]
    assert "name one GROUP or give --all-groups" in cli.error("groups", "describe")

    with fabric.connect(cli.url) as fab, fab.consumer("t", group_id="one", session_timeout_ms=30000) as member:
        wait_for(lambda: member.poll(0.05) is not None and member.assignment() == [("t", 0)],
                                       timeout=60, what="the member to be assigned t-0")
        with pytest.raises(GroupNotEmptyError, match="live member"):
            fab.delete_group("one")
        assert [(r["GROUP"], r["STATE"], r["#MEMBERS"]) for r in cli.rows("groups", "describe", "one", "--state")] \
            == [("one", "Stable", "1")]  # kafka-consumer-groups --describe --state
        err = cli.error("groups", "delete", "one", "two")
        assert "could not delete group 'one': the group has 1 live member(s)" in err
        assert cli.ok("groups", "list").split() == ["one"]  # two was deleted all the same
        # as Kafka's tool, offsets are reset only while the group is inactive: nothing is committed
        err = cli.error("groups", "reset-offsets", "one", "--topic", "t", "--to-earliest", "--execute")
        assert "live member(s), so only its members may commit" in err
        assert committed_offsets(cli, "one") == {("t", 0): "2"}
    assert cli.ok("groups", "delete", "one") == "Deleted consumer group 'one'.\n"
    assert cli.ok("groups", "list") == ""
    assert "consumer group 'gone' does not exist" in cli.error("groups", "delete", "gone")
    with fabric.connect(cli.url) as fab, pytest.raises(GroupIdNotFoundError):
        fab.delete_group("one")


def test_groups_delete_offsets_of_topics_no_live_member_reads(cli):
    """kafka-consumer-groups --delete-offsets: a row per partition whose offset went; a live member's topic is
    refused, nothing deleted."""
    cli.ok("topics", "create", "a", "--partitions", "2")
    cli.ok("topics", "create", "b")
    cli.ok("produce", "b", stdin="x\ny\n")
    cli.ok("groups", "reset-offsets", "g", "--topic", "a", "--topic", "b", "--to-latest", "--execute")
    with fabric.connect(cli.url) as fab, fab.consumer("b", group_id="g", session_timeout_ms=30000) as member:
        wait_for(lambda: member.poll(0.05) is not None and member.assignment() == [("b", 0)],
                 timeout=60, what="the member to be assigned b-0")
        assert "group 'g' has live members subscribed to 'b'" in cli.error("groups", "delete-offsets", "g",
                                                                          "--topic", "a", "--topic", "b")
        assert [(r["TOPIC"], r["PARTITION"], r["STATUS"]) for r in cli.rows(
            "groups", "delete-offsets", "g", "--topic", "a:1")] == [("a", "1", "Successful")]
    assert committed_offsets(cli, "g") == {("a", 0): "0", ("a", 1): "-", ("b", 0): "2"}
    again = cli.run("groups", "delete-offsets", "g", "--topic", "a:1")
    assert again.returncode == 0 and "had no committed offsets there: nothing was deleted" in again.stderr
    assert "the following arguments are required: --topic" in cli.error("groups", "delete-offsets", "g")


def test_get_offsets_prints_kafka_get_offsets_lines(cli):
    """kafka-get-offsets: topic:partition:offset, latest by default, earliest with -2, the first record of the
    largest timestamp with -3, the first record at or after a timestamp (empty past the last)."""
    cli.ok("topics", "create", "a", "--partitions", "2")
    cli.ok("topics", "create", "b")
    cli.ok("produce", "a", "--partition", "1", stdin="x\ny\nz\n")
    cli.ok("topics", "delete-records", "a", "--partition", "1", "--before-offset", "1")
    assert cli.ok("get-offsets") == "a:0:0\na:1:3\nb:0:0\n"
    assert cli.ok("get-offsets", "--topic", "a", "--time", "-2") == "a:0:0\na:1:1\n"
    assert cli.ok("get-offsets", "--topic", "a", "--partitions", "1", "--time", "0") == "a:1:1\n"
    assert cli.ok("get-offsets", "--topic", "a", "--time", str(2**50)) == "a:0:\na:1:\n"  # year 37,000
    assert "there is no partition 5" in cli.error("get-offsets", "--topic", "a", "--partitions", "0,5")
    assert "--time takes -1 (latest), -2 (earliest), -3 (max-timestamp) or a timestamp" in cli.error(
        "get-offsets", "--time", "-4")
    cli.ok("produce", "a", "--partition", "1", stdin="w\n")  # (stamped after x, y and z were)
    assert cli.ok("get-offsets", "--topic", "a", "--time", "-3") == "a:0:\na:1:3\n"
    assert cli.ok("get-offsets", "--topic", "a", "--time", "max-timestamp") == "a:0:\na:1:3\n"


def test_dump_log_prints_frames_records_damage_and_index_mismatches(cli, fabric_dir):
    """kafka-dump-log: each frame with its fields and a checked CRC, its records with --print-data-log, the damage
    a flipped byte leaves (the frames before it still printed), and an offset index entry naming no frame."""
    cli.ok("topics", "create", "d")
    cli.ok("produce", "d", stdin="a\nb\nc\n")
    cli.ok("produce", "d", stdin="d\n")
    stem = os.path.join(fabric_dir, "d", "0", "0" * 20)
    dumped = cli.ok("dump-log", "--files", f"{stem}.arrows", "--print-data-log").splitlines()
    frames = [dict(zip(line.split()[::2], line.split()[1::2], strict=True)) for line in dumped
              if line.startswith("baseOffset: ")]
    records = [json.loads(line[2:]) for line in dumped if line.startswith("| ")]
    assert [(r["offset"], r["value"]) for r in records] == [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
    assert sum(int(f["count:"]) for f in frames) == 4 and {f["isvalid:"] for f in frames} == {"true"}
    last = frames[-1]
    with open(f"{stem}.arrows", "r+b") as data:  # a flipped byte in the last frame's batch
        data.seek(int(last["position:"]) + 100)
        byte = data.read(1)
        data.seek(-1, os.SEEK_CUR)
        data.write(bytes([byte[0] ^ 0xFF]))
    damaged = cli.ok("dump-log", "--files", f"{stem}.arrows")
    assert (f"Damaged: offsets from {last['baseOffset:']} on at byte {last['position:']} of {stem}.arrows (its CRC "
            "check failed)") in damaged
    assert damaged.count("baseOffset: ") == len(frames) - 1
    first = frames[0]["position:"]
    assert f"offset: 0 position: {first}\n" in cli.ok("dump-log", "--files", f"{stem}.index")
    with open(f"{stem}.index", "r+b") as index:  # the first entry pointing a byte past its frame
        index.seek(4)
        index.write((int(first) + 1).to_bytes(4, "little"))
    assert f"offset: 0 position: {int(first) + 1} MISMATCH: no frame header there" in cli.ok(
        "dump-log", "--files", f"{stem}.index")
    assert "timestamp: " in cli.ok("dump-log", "--files", f"{stem}.timeindex")
    assert "is not a segment (.arrows) or index" in cli.error("dump-log", "--files", f"{stem}.txnindex")


def test_dump_log_deep_iteration_and_index_checks_as_kafka_dump_log_takes_them(cli, fabric_dir):
    """--deep-iteration: a line of metadata per record (offset, timestamp, key and value sizes, sequence, header
    keys); --verify-index-only and --index-sanity-check: only an index's failing entries, then whether it passed."""
    cli.ok("topics", "create", "deep")
    cli.ok("produce", "deep", "--property", "parse.key=true", stdin="k1\tone\nk22\tthree\n")
    stem = os.path.join(fabric_dir, "deep", "0", "0" * 20)
    deep = [line for line in cli.ok("dump-log", "--files", f"{stem}.arrows", "--deep-iteration").splitlines()
            if line.startswith("| ")]
    assert [line.split(" CreateTime: ")[0] for line in deep] == ["| offset: 0", "| offset: 1"]
    assert [line.split(" keySize: ")[1] for line in deep] == [
        "2 valueSize: 3 sequence: 0 headerKeys: []", "3 valueSize: 5 sequence: 1 headerKeys: []"]  # idempotent
    for flag in ("--verify-index-only", "--index-sanity-check"):
        assert cli.ok("dump-log", "--files", f"{stem}.index", flag) == \
            f"Dumping {stem}.index\n{stem}.index passed sanity check (1 entries).\n"
    with open(f"{stem}.index", "r+b") as index:
        index.seek(4)
        position = int.from_bytes(index.read(4), "little")
        index.seek(4)
        index.write((position + 1).to_bytes(4, "little"))
    assert cli.ok("dump-log", "--files", f"{stem}.index", "--verify-index-only").splitlines()[1:] == [
        f"offset: 0 position: {position + 1} MISMATCH: no frame header there",
        f"{stem}.index failed sanity check: 1 of 1 entries"]
    assert "passed sanity check (" in cli.ok("dump-log", "--files", f"{stem}.timeindex", "--index-sanity-check")


def test_configs_describes_and_alters_topic_configs_with_kafka_configs_flags(cli):
    """kafka-configs: --alter --add-config (a bracketed value keeps its commas) and --delete-config, --describe of
    the overrides and --all of every config with its source; other entity types are refused with the fix."""
    cli.ok("topics", "create", "c")
    assert cli.ok("configs", "--entity-type", "topics", "--entity-name", "c", "--alter", "--add-config",
                  "retention.ms=60000,cleanup.policy=[compact,delete]") == "Completed updating config for topic c.\n"
    described = cli.ok("configs", "--topic", "c", "--describe").splitlines()
    assert [line.split()[0] for line in described] == ["Dynamic", "cleanup.policy=compact,delete",
                                                       "retention.ms=60000"]
    every = cli.ok("configs", "--topic", "c", "--describe", "--all")
    assert "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}" in every
    assert "synonyms={DEFAULT_CONFIG:segment.bytes=" in every
    cli.ok("configs", "--topic", "c", "--alter", "--delete-config", "cleanup.policy")
    assert [line.split()[0] for line in cli.ok("configs", "--topic", "c", "--describe").splitlines()[1:]] == [
        "retention.ms=60000"]
    assert "unknown topic config 'no.such'" in cli.error("configs", "--topic", "c", "--alter", "--add-config",
                                                         "no.such=1")
    assert "only topics have configs" in cli.error("configs", "--entity-type", "brokers", "--entity-name", "1",
                                                   "--describe")
    assert "give --describe or --alter" in cli.error("configs", "--topic", "c")


def test_reset_offsets_strategies_scopes_export_and_clamping(cli, tmp_path):
    cli.ok("topics", "create", "a", "--partitions", "2")
    cli.ok("topics", "create", "b")
    cli.ok("produce", "a", "--partition", "0", stdin="".join(f"{i}\n" for i in range(10)))
    cli.ok("produce", "a", "--partition", "1", stdin="".join(f"{i}\n" for i in range(4)))
    cli.ok("produce", "b", stdin="".join(f"{i}\n" for i in range(6)))
    cli.ok("groups", "reset-offsets", "g", "--topic", "a:0", "--topic", "b", "--to-offset", "3", "--execute")
    assert committed_offsets(cli, "g") == {("a", 0): "3", ("a", 1): "-", ("b", 0): "3"}

    shifted = cli.run("groups", "reset-offsets", "g", "--all-topics", "--shift-by", "-5")  # a dry run
    assert shifted.returncode == 0 and "dry run" in shifted.stderr
    assert "New offset -2 of a-0 is outside its log; it is set to 0" in shifted.stderr
    assert [(r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in cli.rows(
        "groups", "reset-offsets", "g", "--all-topics", "--shift-by", "-5")] == [("a", "0", "0"), ("b", "0", "0")]
    assert committed_offsets(cli, "g")[("a", 0)] == "3"
    assert "cannot shift a-1: group 'g' has no committed offset" in cli.error(
        "groups", "reset-offsets", "g", "--topic", "a", "--shift-by", "1")

    plan = cli.run("groups", "reset-offsets", "g", "--topic", "a", "--topic", "b:0", "--to-current", "--export")
    assert plan.returncode == 0 and plan.stdout == "a,0,3\na,1,4\nb,0,3\n"  # a-1 has no offset: its log end
    ahead = cli.run("groups", "reset-offsets", "g", "--topic", "a:0,1", "--shift-by", "2", "--export",
                    "--execute")  # a-1 uncommitted is refused: nothing changes
    assert ahead.returncode == 1 and committed_offsets(cli, "g")[("a", 0)] == "3"

    csv_plan = tmp_path / "plan.csv"
    csv_plan.write_text("a,0,7\n\na,1,99\nb,0,1\n")
    applied = cli.run("groups", "reset-offsets", "g", "--from-file", str(csv_plan), "--execute")
    assert applied.returncode == 0 and "dry run" not in applied.stderr
    assert "New offset 99 of a-1 is outside its log; it is set to 4" in applied.stderr
    assert committed_offsets(cli, "g") == {("a", 0): "7", ("a", 1): "4", ("b", 0): "1"}
    csv_plan.write_text(cli.ok("groups", "reset-offsets", "g", "--all-topics", "--to-earliest", "--export"))
    cli.ok("groups", "reset-offsets", "g", "--from-file", str(csv_plan), "--execute")  # --export reads back
    assert committed_offsets(cli, "g") == {("a", 0): "0", ("a", 1): "0", ("b", 0): "0"}

    cli.ok("groups", "reset-offsets", "g", "--all-topics", "--by-duration", "P1DT2H30M", "--execute")
    assert committed_offsets(cli, "g") == {("a", 0): "0", ("a", 1): "0", ("b", 0): "0"}  # all are newer
    cli.ok("groups", "reset-offsets", "g", "--topic", "b", "--by-duration", "PT0S", "--execute")
    assert committed_offsets(cli, "g")[("b", 0)] == "6"  # none is newer than now: the log end
    assert [r["NEW-OFFSET"] for r in cli.rows("groups", "reset-offsets", "g", "--topic", "b", "--by-duration",
                                              "P99999999999D")] == ["0"]  # before any date: the log start

    for args, expected in [
        (("--all-topics", "--by-duration", "1h"), "--by-duration '1h' is not an ISO 8601 duration"),
        (("--to-earliest",), "choose what to reset: --topic TOPIC[:P,P] (repeatable) or --all-topics"),
        (("--from-file", str(csv_plan), "--topic", "a", ), "--from-file names the partitions"),
        (("--from-file", str(tmp_path / "missing.csv")), "cannot read --from-file"),
        (("--topic", "a:x", "--to-earliest"), "expected TOPIC or TOPIC:P,P (e.g. orders:0,2), got 'a:x'"),
        (("--topic", "a:2", "--to-earliest"), "topic 'a' has partitions 0..1; there is no partition 2"),
    ]:
        assert expected in cli.error("groups", "reset-offsets", "g", *args)
    csv_plan.write_text("a,0\n")
    assert "line 1: expected topic,partition,offset" in cli.error("groups", "reset-offsets", "g", "--from-file",
                                                                 str(csv_plan))
    assert committed_offsets(cli, "g") == {("a", 0): "0", ("a", 1): "0", ("b", 0): "6"}


# -- shell completion ------------------------------------------------------------------------------------------
def complete(line: str, tmp_path: Path) -> list[str]:
    """What the installed `fabric` console script offers for `line` (the cursor at its end), asked through
    argcomplete's protocol as its bash hook asks: _ARGCOMPLETE=1, COMP_LINE, COMP_POINT, the answer written to
    _ARGCOMPLETE_STDOUT_FILENAME separated by _ARGCOMPLETE_IFS."""
    script = Path(sys.executable).parent / "fabric"
    answer = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_STDOUT_FILENAME": str(answer), "_ARGCOMPLETE_IFS": "\n"}
    done = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return answer.read_text().split()


def test_shell_completion_through_argcomplete(tmp_path, fabric_cli):
    assert complete("fabric top", tmp_path) == ["topics"]
    assert complete("fabric groups re", tmp_path) == ["reset-offsets"]
    assert {"--to-current", "--to-datetime", "--to-earliest", "--to-latest", "--to-offset"} == set(
        complete("fabric groups reset-offsets g --to-", tmp_path))
    assert "--exit-at-end" in complete("fabric consume t --ex", tmp_path)
    # the servers' options, which a command's own parse adds (fabric.cli.common.defer_arguments), complete too
    assert "--listen" in complete("fabric coordinator start --li", tmp_path)
    assert "--coordinator" in complete("fabric node start --coo", tmp_path)
    hook = subprocess.run([str(Path(sys.executable).parent / "register-python-argcomplete"), "fabric"],
                          capture_output=True, text=True, timeout=60)
    assert hook.returncode == 0 and "complete " in hook.stdout and "fabric" in hook.stdout
    assert fabric_cli("topics", "--help").returncode == 0  # outside completion the command runs as ever


# -- through a coordinator service -----------------------------------------------------------------------------
def test_the_main_paths_against_a_coordinator_service(fabric_cli, coordinators):
    cli = Cli(fabric_cli, coordinators().url())
    cli.ok("topics", "create", "s", "--partitions", "2")
    cli.ok("produce", "s", "--partition", "1", "--property", "parse.headers=true", "parse.key=true",
           stdin="h:1\tk\tv0\n\tk\tv1\n\tk\tv2\n")
    assert cli.ok("consume", "s", "--partition", "1", "--offset", "1", "--exit-at-end", "--property",
                  "print.partition=true", "print.offset=true", "print.headers=true").splitlines() == [
        "Partition:1\tOffset:1\tNO_HEADERS\tv1", "Partition:1\tOffset:2\tNO_HEADERS\tv2"]
    first = json.loads(cli.ok("consume", "s", "--partition", "1", "--offset", "0", "--max-messages", "1",
                              "--format", "json"))
    assert first["headers"] == [{"key": "h", "value": "1"}] and first["key"] == "k"

    assert cli.ok("consume", "s", "--group", "svc", "--from-beginning", "--exit-at-end").split() == ["v0", "v1", "v2"]
    assert cli.ok("groups", "reset-offsets", "svc", "--all-topics", "--shift-by", "-2", "--export",
                  "--execute") == "s,1,1\n"
    assert [(r["GROUP"], r["PARTITION"], r["CURRENT-OFFSET"]) for r in cli.rows("groups", "describe",
                                                                                "--all-groups")] == [
        ("svc", "0", "-"), ("svc", "1", "1")]
    assert cli.ok("consume", "s", "--group", "svc", "--exit-at-end").split() == ["v1", "v2"]
    assert cli.ok("groups", "delete", "svc") == "Deleted consumer group 'svc'.\n"
    assert cli.ok("groups", "list") == ""
