"""`fabric topics create|list|describe|delete|alter|recover|retain|compact|delete-records`: kafka-topics and
kafka-configs for topics, retention and compaction on demand, and kafka-delete-records."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any, Callable

import pyarrow as pa

from fabric.cli.common import (
    CommandError,
    add_command,
    add_subcommands,
    add_subject,
    format_table,
    open_fabric,
    parse_config,
)
from fabric.client.admin import TopicDescription
from fabric.client.kafka_admin import one_copy_factors
from fabric.common.config import TOPIC_SETTINGS
from fabric.common.types import PartitionState

_TZ_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns),\s*tz=([^\]]+)\]")
SCHEMA_HELP = ("make a typed topic whose values have these Arrow fields: comma-separated name:type pairs "
               "with pyarrow type names, e.g. 'user:string,amount:int64,ts:timestamp[us, tz=UTC]'")


def _split_fields(text: str) -> list[str]:
    """Split on commas outside brackets (so 'timestamp[us, tz=UTC]' stays whole)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _arrow_type(name: str, field: str) -> pa.DataType:
    tz = _TZ_TIMESTAMP.fullmatch(name)
    if tz:
        return pa.timestamp(tz.group(1), tz=tz.group(2).strip())
    try:
        return pa.type_for_alias(name)
    except ValueError:
        raise CommandError(
            f"unknown type {name!r} for field {field!r}; use a pyarrow type name such as string, int32, int64, "
            "float64, bool, binary, date32, timestamp[us] or timestamp[us, tz=UTC]") from None


def parse_schema(text: str) -> pa.Schema:
    """'user:string,amount:int64' → an Arrow schema of nullable fields."""
    fields = []
    for part in _split_fields(text):
        name, sep, type_name = part.partition(":")
        if not sep or not name.strip() or not type_name.strip():
            raise CommandError(
                f"bad --schema field {part!r}: expected name:type, e.g. --schema 'user:string,amount:int64'")
        fields.append(pa.field(name.strip(), _arrow_type(type_name.strip(), name.strip())))
    return pa.schema(fields)


def create(args: argparse.Namespace) -> None:
    """Create a topic (typed if --schema is given); with --if-not-exists an existing one is left as it is."""
    schema = parse_schema(args.schema) if args.schema is not None else None
    with open_fabric(args) as fab:
        existed = args.if_not_exists and args.name in fab.list_topics()
        factor = args.replication_factor
        if factor is not None and factor in one_copy_factors(fab):
            factor = None  # (--replication-factor 1 on a fabric without data nodes: its one copy, as Kafka's)
        info = fab.create_topic(args.name, args.partitions, parse_config(args.config), schema, factor,
                                exist_ok=args.if_not_exists)
    if existed:
        print(f"Topic {args.name} already exists ({info.partitions} partition(s)); left as it is.")
    else:
        print(f"Created topic {args.name}.")


def list_topics(args: argparse.Namespace) -> None:
    """Print every topic name, one per line."""
    with open_fabric(args) as fab:
        for name in fab.list_topics():
            print(name)


def describe(args: argparse.Namespace) -> None:
    """Print per-partition offsets, segments and bytes (and a replicated topic's leader, replicas, ISR and leader
    epoch), then config overrides and the schema; of one topic, or of every topic without a name. The filters
    keep the partitions short of replicas in sync, or without a leader (as kafka-topics --describe has them)."""
    with open_fabric(args) as fab:
        described = [fab.describe_topic(args.name)] if args.name else list(fab.describe_topic().values())
    if args.topics_with_overrides:
        described = [desc for desc in described if desc.overrides]
    wanted = _partition_filter(args)
    if args.format == "json":
        print(json.dumps([_topic_json(desc, wanted) for desc in described]))
        return
    for desc in described:
        partitions = [p for p in desc.partitions if wanted(p)]
        if partitions or wanted is _every:
            _print_topic(desc, partitions)


def _every(p: PartitionState) -> bool:
    return True


def _partition_filter(args: argparse.Namespace) -> Callable[[PartitionState], bool]:
    if args.under_replicated_partitions:
        return lambda p: bool(p.replicas) and len(p.isr) < len(p.replicas)
    if args.unavailable_partitions:
        return lambda p: bool(p.replicas) and p.leader is None
    return _every


def _topic_json(desc: TopicDescription, wanted: Callable[[PartitionState], bool]) -> dict[str, Any]:
    return {"name": desc.name, "partitions": [{**dataclasses.asdict(p), "replicas": list(p.replicas),
                                               "isr": list(p.isr)} for p in desc.partitions if wanted(p)],
            "config": desc.overrides,
            "schema": None if desc.value_schema is None else [{"name": f.name, "type": str(f.type)}
                                                              for f in desc.value_schema]}


def _print_topic(desc: TopicDescription, partitions: list[PartitionState]) -> None:
    print(f"Topic: {desc.name}\tPartitionCount: {len(desc.partitions)}\t"
          f"Typed: {'yes' if desc.value_schema is not None else 'no'}")
    if any(p.replicas for p in desc.partitions):
        print(format_table(("PARTITION", "LEADER", "REPLICAS", "ISR", "LEADER-EPOCH", "LOG-START-OFFSET",
                            "LOG-END-OFFSET", "SEGMENTS", "BYTES"),
                           [(p.partition, "none (offline)" if p.leader is None else p.leader, _ids(p.replicas),
                             _ids(p.isr), p.leader_epoch, *_offsets(p)) for p in partitions]))
    else:
        print(format_table(("PARTITION", "LOG-START-OFFSET", "LOG-END-OFFSET", "SEGMENTS", "BYTES"),
                           [(p.partition, p.start_offset, p.end_offset, p.segments, p.size_bytes)
                            for p in partitions]))
    if desc.overrides:
        print("Configs (non-default):")
        for key, value in sorted(desc.overrides.items()):
            print(f"  {key}={value}")
    else:
        print("Configs: all defaults")
    if desc.value_schema is not None:
        print("Schema:")
        for field in desc.value_schema:
            print(f"  {field.name}: {field.type}")


def _ids(nodes: tuple[int, ...]) -> str:
    return ",".join(map(str, nodes))


def _offsets(p: PartitionState) -> tuple[object, ...]:
    """Offsets, segments and bytes; unknown ("-") while the partition is offline."""
    return (None,) * 4 if p.leader is None else (p.start_offset, p.end_offset, p.segments, p.size_bytes)


def delete(args: argparse.Namespace) -> None:
    """Delete a topic."""
    with open_fabric(args) as fab:
        fab.delete_topic(args.name)
    print(f"Deleted topic {args.name}.")


def alter(args: argparse.Namespace) -> None:
    """Add partitions to a topic (--partitions, as kafka-topics --alter) and/or set or remove its config
    overrides."""
    changes: dict[str, str | None] = dict(parse_config(args.config))
    changes.update({key: None for key in args.delete_config or ()})
    if not changes and args.partitions is None:
        raise CommandError("nothing to alter: give --partitions N (the new, larger total), --config key=value "
                           "and/or --delete-config key")
    with open_fabric(args) as fab:
        if args.partitions is not None:
            before = fab.describe_topic(args.name).partitions
            fab.create_partitions(args.name, args.partitions)
            print(f"Topic {args.name} has {args.partitions} partitions now (was {len(before)}).")
        if changes:
            fab.alter_topic_config(args.name, changes)
            print(f"Altered config of topic {args.name}.")


def recover(args: argparse.Namespace) -> int:
    """Register topic directories whose metadata was lost, from their data; print what was done with each."""
    with open_fabric(args) as fab:
        results = fab.recover_topics(*args.names)
    if not results:
        print("No topic directories found.")
        return 0
    print(format_table(("TOPIC", "OUTCOME", "PARTITIONS", "DETAIL"),
                       [(r.topic, r.outcome, r.partitions or None, r.detail) for r in results]))
    return 1 if args.names and any(r.outcome == "skipped" for r in results) else 0


def retain(args: argparse.Namespace) -> None:
    """Apply a topic's retention now; print how many segments went and where each partition starts now."""
    name = args.name
    with open_fabric(args) as fab:
        deleted = fab.enforce_retention(name)
        desc = fab.describe_topic(name)
    print(f"Retention of topic {name} deleted {deleted} segment(s).")
    print(format_table(("PARTITION", "LOG-START-OFFSET", "LOG-END-OFFSET", "SEGMENTS", "BYTES"),
                       [(p.partition, p.start_offset, p.end_offset, p.segments, p.size_bytes)
                        for p in desc.partitions]))


def compact(args: argparse.Namespace) -> None:
    """Compact a topic now; print what the cleaner did to each partition."""
    name = args.name
    with open_fabric(args) as fab:
        reports = fab.compact_topic(name)
    cleaned = [r for r in reports if r.cleaned]
    print(f"Compacted {len(cleaned)} of the {len(reports)} partition(s) of topic {name}"
          + (f": {sum(r.bytes_before for r in cleaned)} -> {sum(r.bytes_after for r in cleaned)} bytes, "
             f"{sum(r.records_removed for r in cleaned)} records removed." if cleaned else "."))
    for report in reports:
        print(f"  {report.describe()}")


def delete_records(args: argparse.Namespace) -> None:
    """Delete the records below an offset of one partition (NAME --partition P --before-offset N), or of the
    partitions a kafka-delete-records --offset-json-file lists; print each partition's new low watermark (of
    those done before one failed, if one does)."""
    deletions, done = _deletions(args), []
    try:
        with open_fabric(args) as fab:
            for topic, partition, before in deletions:
                done.append(f"partition: {topic}-{partition}\tlow_watermark: "
                            f"{fab.delete_records(topic, partition, before)}")
    finally:
        if done:
            print("Records delete operation completed:", *done, sep="\n")


def _deletions(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(topic, partition, before offset) of each partition to delete records of, from the options or the file."""
    if args.offset_json_file is not None:
        if args.name or args.partition is not None or args.before_offset is not None:
            raise CommandError("give either --offset-json-file or NAME --partition P --before-offset N, not both")
        return _offset_json(args.offset_json_file)
    if args.name is None or args.partition is None or args.before_offset is None:
        raise CommandError("name the records to delete: fabric topics delete-records NAME (or --topic NAME) "
                           "--partition P --before-offset N (N=-1: every record), or --offset-json-file FILE")
    return [(args.name, args.partition, args.before_offset)]


def _offset_json(path: str) -> list[tuple[str, int, int]]:
    """The partitions of kafka-delete-records' offset JSON file:
    {"partitions": [{"topic": "t", "partition": 0, "offset": 3}, ...], "version": 1}."""
    example = '{"partitions": [{"topic": "events", "partition": 0, "offset": 100}], "version": 1}'
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read --offset-json-file {path!r} ({exc}); give a JSON file such as "
                           f"{example}") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CommandError(f"--offset-json-file {path!r} lists no partitions; it should look like {example}")
    out = []
    for entry in entries:
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and all(type(entry.get(k)) is int for k in ("partition", "offset"))):
            raise CommandError(f"--offset-json-file {path!r}: entry {json.dumps(entry)} needs a string topic and "
                               f"int partition and offset, as in {example}")
        out.append((entry["topic"], entry["partition"], entry["offset"]))
    return out


def _topic_subject(parser: argparse.ArgumentParser, help: str = "the topic", required: bool = True) -> None:
    add_subject(parser, "name", "--topic", "topic", "NAME", help, required=required)


def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", action="append", metavar="KEY=VALUE",
                        help="a topic config override (repeatable); keys: " + ", ".join(sorted(TOPIC_SETTINGS)))


def _exclude_internal(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exclude-internal", action="store_true",
                        help="as kafka-topics: the fabric's internal topics, which are left out anyway")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric topics ...`."""
    topics = add_command(subparsers, "topics", None, "create, list, describe, delete and alter topics; apply "
                         "retention or compaction now; delete records")
    verbs = add_subcommands(topics, "topic commands")

    p = add_command(verbs, "create", create, "create a topic")
    _topic_subject(p, "the topic's name: letters, digits, '.', '_', '-'")
    p.add_argument("--partitions", type=int, default=1, metavar="N", help="number of partitions (default 1)")
    _config_option(p)
    p.add_argument("--schema", metavar="FIELDS", help=SCHEMA_HELP)
    p.add_argument("--replication-factor", type=int, metavar="N", help="place the partitions on data nodes with N "
                   "replicas each (a cluster with data nodes; default, and 1 where the fabric has no data nodes: each "
                   "partition in the fabric's one directory)")
    p.add_argument("--if-not-exists", action="store_true", help="if the topic exists, leave it as it is (even where "
                   "its partitions, configs or schema differ) instead of failing")

    p = add_command(verbs, "list", list_topics, "list topic names")
    _exclude_internal(p)

    p = add_command(verbs, "describe", describe,
                    "show per-partition offsets, segments and bytes (leaders, replicas, ISR of a replicated topic), "
                    "config overrides and the schema")
    _topic_subject(p, "the topic (default: every topic)", required=False)
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only replicated partitions with fewer in-sync replicas than replicas")
    only.add_argument("--unavailable-partitions", action="store_true",
                      help="only replicated partitions without a leader (offline)")
    p.add_argument("--topics-with-overrides", action="store_true", help="only topics with config overrides")
    _exclude_internal(p)

    p = add_command(verbs, "delete", delete, "delete a topic, its data and its groups' offsets in it")
    _topic_subject(p)

    p = add_command(verbs, "recover", recover, "register topic directories whose metadata was lost, from their data",
                    description="Register topic directories the metadata does not know (e.g. after "
                                "__fabric/metadata.db was lost) from their data: the partition count from the "
                                "partition directories, the schema of a typed topic from its segments. Configs, "
                                "committed group offsets and sink transactions are not in the data: recovered "
                                "topics get the default configs; set them again with `fabric topics alter`.")
    p.add_argument("names", nargs="*", metavar="TOPIC", help="topics to recover (default: every directory the "
                   "metadata does not know)")

    p = add_command(verbs, "alter", alter, "add partitions, or set or remove topic config overrides")
    _topic_subject(p)
    p.add_argument("--partitions", type=int, metavar="N", help="grow the topic to N partitions (more than it has; "
                   "records already written stay in their partitions, so keys may map to other partitions from now)")
    _config_option(p)
    p.add_argument("--delete-config", action="append", metavar="KEY",
                   help="remove an override, back to the default (repeatable)")

    p = add_command(verbs, "retain", retain, "apply a topic's retention now (retention.ms, retention.bytes)",
                    description="Delete the segments of every partition of the topic that retention.ms or "
                                "retention.bytes no longer keep, now, instead of at the next background pass "
                                "(log.retention.check.interval.ms). Topics with cleanup.policy=compact alone "
                                "keep their segments.")
    _topic_subject(p)

    p = add_command(verbs, "compact", compact, "compact a topic now (cleanup.policy=compact)",
                    description="Roll the active segment of every partition of a compacted topic and compact "
                                "everything the cleaner may, now, whatever min.cleanable.dirty.ratio says; print what "
                                "was done to each partition. A topic with cleanup.policy=delete is refused: make "
                                "it compacted with `fabric topics alter NAME --config cleanup.policy=compact`.")
    _topic_subject(p)

    p = add_command(verbs, "delete-records", delete_records,
                    "delete a partition's records below an offset (kafka-delete-records)",
                    description="Move the log start offset of a partition up to --before-offset (-1: its high "
                                "watermark, deleting every record): readers can no longer read below it, and the "
                                "whole segments below it are deleted. Prints each partition's new low watermark. "
                                "Several partitions at once: --offset-json-file, in kafka-delete-records' format. "
                                "As in Kafka, a topic whose cleanup.policy lacks `delete` refuses it.")
    _topic_subject(p, required=False)
    p.add_argument("--partition", type=int, metavar="P", help="the partition")
    p.add_argument("--before-offset", type=int, metavar="N",
                   help="delete the records below offset N (-1: below the high watermark)")
    p.add_argument("--offset-json-file", metavar="FILE", help='partitions and offsets as JSON: {"partitions": '
                   '[{"topic": "T", "partition": 0, "offset": N}], "version": 1}')
