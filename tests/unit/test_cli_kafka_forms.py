"""Kafka's tool forms read as the `fabric` command's own: action flags as verbs (`topics --create` -> `topics
create`), and a command's subject as `--topic T` / `--group G` as well as a positional."""
from __future__ import annotations

import pytest

from fabric.cli.action_flags import as_verbs
from fabric.cli.common import CommandError, resolve_subjects
from fabric.cli.main import build_parser, main


@pytest.mark.parametrize(("line", "read_as"), [
    ("topics --create --topic t --partitions 3", "topics create --topic t --partitions 3"),
    ("--url file:///d topics --partitions 3 --create --topic t",
     "--url file:///d topics create --partitions 3 --topic t"),
    ("--log-level DEBUG --bootstrap-server h:1 topics --list", "--log-level DEBUG --bootstrap-server h:1 topics list"),
    ("groups --describe --group g --members", "groups describe --group g --members"),
    ("groups --reset-offsets --group g --all-topics --to-earliest --execute",
     "groups reset-offsets --group g --all-topics --to-earliest --execute"),
    ("groups --delete-offsets --group g --topic t", "groups delete-offsets --group g --topic t"),
    ("topics --alter --topic t --delete-config retention.ms", "topics alter --topic t --delete-config retention.ms"),
    # kept as they are: a verb already named, no action flag, another command, an action flag as a value
    ("topics describe --topic t", "topics describe --topic t"),
    ("topics --help", "topics --help"),
    ("configs --topic t --describe", "configs --topic t --describe"),
    ("--url --create topics list", "--url --create topics list"),
])
def test_action_flags_become_the_verb(line: str, read_as: str) -> None:
    assert as_verbs(line.split()) == read_as.split()


def test_two_action_flags_are_refused_naming_both() -> None:
    with pytest.raises(CommandError, match="--create and --delete given; `fabric topics` takes one of --create"):
        as_verbs("topics --create --delete --topic t".split())


def parsed(line: str):
    args = build_parser().parse_args(as_verbs(line.split()))
    resolve_subjects(args)
    return args


@pytest.mark.parametrize(("line", "dest", "value"), [
    ("topics create t", "name", "t"),
    ("topics create --topic t", "name", "t"),
    ("topics create t --topic t", "name", "t"),
    ("topics --describe", "name", None),
    ("produce --topic t", "topic", "t"),
    ("consume t --group g", "topic", "t"),
    ("groups --describe --group g", "group", "g"),
    ("groups delete a --group b --group a", "groups", ["a", "b"]),
    ("groups reset-offsets --group g --topic t --to-latest", "group", "g"),
])
def test_a_subject_is_taken_in_either_form(line: str, dest: str, value: object) -> None:
    assert getattr(parsed(line), dest) == value


@pytest.mark.parametrize(("line", "message"), [
    ("topics create a --topic b", "two topics given ('a' and --topic 'b'); name one"),
    ("topics --create", "name the topic: fabric topics create NAME (or --topic NAME)"),
    ("produce", "name the topic: fabric produce TOPIC (or --topic TOPIC)"),
    ("groups --reset-offsets --topic t --to-latest", "name the group: fabric groups reset-offsets GROUP (or --group "
     "GROUP)"),
    ("groups delete-offsets --topic t", "name the group: fabric groups delete-offsets GROUP (or --group GROUP)"),
    ("groups describe a --group b", "two groups given ('a' and --group 'b'); name one"),
])
def test_a_subject_missing_or_given_twice_is_refused(line: str, message: str) -> None:
    with pytest.raises(CommandError) as raised:
        parsed(line)
    assert str(raised.value) == message


@pytest.mark.parametrize(("line", "url"), [
    # kafka-transactions takes --bootstrap-server before its verb; so does every command group here
    ("transactions --bootstrap-server h:1 list", "fabric://h:1"),
    ("groups --url file:///d describe g", "file:///d"),
    ("topics --bootstrap-server h:1 --list", "fabric://h:1"),
    ("--url file:///d topics list", "file:///d"),
])
def test_a_command_group_takes_the_fabric_before_its_verb(line: str, url: str) -> None:
    assert parsed(line).url == url


@pytest.mark.parametrize(("line", "attr", "value"), [
    ("partitions elect-leaders --election-type PREFERRED --all-topic-partitions", "election_type", "preferred"),
    ("partitions elect-leaders --election-type unclean", "election_type", "unclean"),
    ("transactions find-hanging --broker-id 2", "node_id", 2),
    ("topics --list --exclude-internal", "exclude_internal", True),
    ("topics --describe --topics-with-overrides", "topics_with_overrides", True),
])
def test_kafka_tools_flags_are_taken(line: str, attr: str, value: object) -> None:
    assert getattr(parsed(line), attr) == value


@pytest.mark.parametrize(("line", "message"), [
    ("delete-records --offset-json-file f", "`fabric delete-records` is no command; kafka-delete-records is "
     "`fabric topics delete-records` here"),
    ("kafka-topics.sh --list", "`fabric kafka-topics.sh` is no command; kafka-topics is `fabric topics` here"),
    ("--url file:///d leader-election --all-topic-partitions", "kafka-leader-election is `fabric partitions "
     "elect-leaders` here"),
    ("kafka-acls --list", "kafka-acls has no counterpart: the ACLs are the acl.file"),
    ("produce --broker-list h:1 --topic t", "unrecognized arguments: --broker-list; --broker-list: give "
     "--bootstrap-server HOST:PORT"),
    ("topics describe --bogus", "unrecognized arguments: --bogus (`fabric topics describe --help` lists what it "
     "takes)"),
])
def test_a_kafka_tool_or_flag_fabric_lacks_is_refused_naming_the_fix(line: str, message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(line.split())
    assert exited.value.code == 1
    assert message in capsys.readouterr().err


def test_describe_keeps_the_topics_with_overrides(tmp_path, capsys) -> None:
    url = f"file://{tmp_path / 'fab'}"
    for line in (f"--url {url} topics create plain", f"--url {url} topics create kept --config retention.ms=1000"):
        assert main(line.split()) == 0
    capsys.readouterr()
    assert main(f"--url {url} topics --describe --topics-with-overrides".split()) == 0
    out = capsys.readouterr().out
    assert "Topic: kept" in out and "plain" not in out
