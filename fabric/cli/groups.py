"""`fabric groups list|describe|delete|reset-offsets|delete-offsets`: kafka-consumer-groups."""
from __future__ import annotations

import argparse
import csv
import sys

from fabric.cli.common import CommandError, add_command, add_subcommands, add_subject, format_table, open_fabric
from fabric.client.admin import Fabric
from fabric.common.errors import FabricError
from fabric.common.types import TopicPartition


def list_groups(args: argparse.Namespace) -> None:
    """Print every group with committed offsets."""
    with open_fabric(args) as fab:
        for group in fab.list_groups():
            print(group)


def describe(args: argparse.Namespace) -> None:
    """Print the group's state line, then per partition its offsets, lag and owning member, like
    kafka-consumer-groups --describe (--offsets); with --members one row per member and its assignment instead,
    with --state one line of the group's state. With --all-groups, every group, one block after another."""
    if (args.group is None) == (not args.all_groups):
        raise CommandError("name one GROUP or give --all-groups")
    with open_fabric(args) as fab:
        for number, group in enumerate(fab.list_groups() if args.all_groups else [args.group]):
            if number:
                print()
            _describe_group(fab, group, args.members, args.state)


def _describe_group(fab: Fabric, name: str, members: bool, state: bool) -> None:
    group = fab.describe_consumer_group(name)
    if group.state == "Dead" and not group.offsets:
        raise CommandError(f"consumer group {name!r} does not exist: it has no live members and no "
                           "committed offsets; `fabric groups list` shows the groups")
    if state:  # kafka-consumer-groups --describe --state: one line
        print(format_table(("GROUP", "COORDINATOR", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                           [(group.group, fab.url, group.protocol or None, group.state, len(group.members))]))
        return
    print(f"Group: {group.group}\tState: {group.state}\tGeneration: {group.generation}\t"
          f"Protocol: {group.protocol or '-'}\tMembers: {len(group.members)}")
    if members:
        print(format_table(("GROUP", "CONSUMER-ID", "INSTANCE-ID", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"),
                           [(group.group, m.member_id, m.group_instance_id or None, m.client_id or None,
                             len(m.assignment), _assignment_text(m.assignment)) for m in group.members]))
    else:
        print(format_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                            "INSTANCE-ID", "CLIENT-ID"),
                           [(group.group, r.topic, r.partition, r.committed, r.end_offset, r.lag, r.member_id,
                             r.group_instance_id, r.client_id or None) for r in group.offsets]))
    if not group.members:
        print(f"Consumer group {group.group!r} has no active members.", file=sys.stderr)


def delete(args: argparse.Namespace) -> None:
    """Delete each group (its offsets and state), as kafka-consumer-groups --delete: a group with live members
    or that does not exist is reported and the others are still deleted."""
    if bool(args.groups) == args.all_groups:
        raise CommandError("name the groups to delete: fabric groups delete GROUP [GROUP ...] (or --group GROUP), "
                           "or --all-groups; one of them")
    failed = []
    with open_fabric(args) as fab:
        for group in fab.list_groups() if args.all_groups else dict.fromkeys(args.groups):
            try:
                fab.delete_group(group)
            except FabricError as exc:
                failed.append(f"group {group!r}: {exc}")
            else:
                print(f"Deleted consumer group {group!r}.")
    if failed:
        raise CommandError("could not delete " + "; ".join(failed))


def _assignment_text(assignment: tuple[tuple[str, int], ...]) -> str | None:
    """`topic(0,1),other(2)` as Kafka prints an assignment; None (shown as '-') when empty."""
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(assignment):
        topics.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in topics.items()) or None


def _scope(text: str) -> str | list[TopicPartition]:
    """--topic TOPIC (every partition) or TOPIC:P,P (those partitions), as Kafka's tool takes it."""
    topic, colon, partitions = text.partition(":")
    if not colon:
        return topic
    try:
        return [(topic, int(p)) for p in partitions.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P,P (e.g. orders:0,2), got {text!r}") from None


def _named(scopes: list[str | list[TopicPartition]]) -> list[str | TopicPartition]:
    """The topics and partitions of repeated --topic options, as the admin calls take them."""
    return [item for scope in scopes for item in ([scope] if isinstance(scope, str) else scope)]


def _read_plan(path: str) -> dict[TopicPartition, int]:
    """--from-file: Kafka's CSV of topic,partition,offset lines (what --export prints)."""
    plan: dict[TopicPartition, int] = {}
    try:
        with open(path, newline="") as f:
            for number, row in enumerate(csv.reader(f), 1):
                if not row or not "".join(row).strip():
                    continue
                try:
                    topic, partition, offset = (cell.strip() for cell in row)
                    plan[(topic, int(partition))] = int(offset)
                except ValueError:
                    raise CommandError(f"{path} line {number}: expected topic,partition,offset (e.g. orders,0,42), "
                                       f"got {','.join(row)!r}") from None
    except OSError as exc:
        raise CommandError(f"cannot read --from-file {path}: {exc.strerror}") from None
    if not plan:
        raise CommandError(f"{path} has no topic,partition,offset lines; `--export` prints a plan in that form")
    return plan


def reset_offsets(args: argparse.Namespace) -> None:
    """Print (and with --execute, commit) new offsets for a group, as a table or with --export as CSV."""
    if args.from_file is None and not (args.topic or args.all_topics):
        raise CommandError("choose what to reset: --topic TOPIC[:P,P] (repeatable) or --all-topics (every "
                           "partition the group has committed offsets for)")
    if args.from_file is not None and (args.topic or args.all_topics):
        raise CommandError("--from-file names the partitions to reset; drop --topic / --all-topics")
    topics = None if args.all_topics or args.topic is None else _named(args.topic)
    with open_fabric(args) as fab:
        plan = fab.reset_offsets(args.group, topics, to_earliest=args.to_earliest, to_latest=args.to_latest,
                                 to_offset=args.to_offset, to_datetime=args.to_datetime, to_current=args.to_current,
                                 shift_by=args.shift_by, by_duration=args.by_duration,
                                 to_offsets=None if args.from_file is None else _read_plan(args.from_file),
                                 execute=args.execute)
    for (topic, partition), requested in sorted(plan.clamped.items()):
        print(f"New offset {requested} of {topic}-{partition} is outside its log; it is set to "
              f"{plan[(topic, partition)]} (offsets are clamped to [log start, log end])", file=sys.stderr)
    if args.export:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerows((t, p, offset) for (t, p), offset in sorted(plan.items()))
    else:
        print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                           [(args.group, t, p, offset) for (t, p), offset in sorted(plan.items())]))
    if not args.execute:
        print("This was a dry run: no offsets changed. Add --execute to apply it.", file=sys.stderr)


def delete_offsets(args: argparse.Namespace) -> None:
    """Delete a group's committed offsets of some topics, as kafka-consumer-groups --delete-offsets: one row per
    partition whose offset went."""
    with open_fabric(args) as fab:
        gone = fab.delete_offsets(args.group, _named(args.topic))
    print(format_table(("TOPIC", "PARTITION", "STATUS"), [(t, p, "Successful") for t, p in gone]))
    if not gone:
        print(f"Group {args.group!r} had no committed offsets there: nothing was deleted.", file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric groups ...`."""
    groups = add_command(subparsers, "groups", None, "list and describe consumer groups, reset or delete their "
                         "offsets")
    verbs = add_subcommands(groups, "group commands")

    add_command(verbs, "list", list_groups, "list consumer groups that have committed offsets")

    p = add_command(verbs, "describe", describe,
                    "the group's state, generation and assignor; per partition: committed offset, log end "
                    "offset, lag and the member that owns it")
    add_subject(p, "group", "--group", "group", "GROUP", "the group", required=False)
    p.add_argument("--all-groups", action="store_true", help="describe every group, one after another")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--members", action="store_true",
                       help="list the live members (id, group.instance.id, client.id) and their assignments instead")
    shown.add_argument("--state", action="store_true",
                       help="one line instead: the coordinator, assignment strategy, state and member count")
    shown.add_argument("--offsets", action="store_true", help="per partition offsets, lag and owner (the default)")

    p = add_command(verbs, "delete", delete, "delete consumer groups (their committed offsets and state)",
                    description="Delete consumer groups, their committed offsets and state (kafka-consumer-groups "
                                "--delete). A group with live members is refused (GroupNotEmptyError): stop its "
                                "consumers first.")
    add_subject(p, "groups", "--group", "group", "GROUP", "the groups", required=False, many=True)
    p.add_argument("--all-groups", action="store_true", help="every group (those with live members are refused, "
                   "the others deleted)")

    p = add_command(verbs, "reset-offsets", reset_offsets, "move a group's committed offsets",
                    description="Move a group's committed offsets in some topics (--topic, repeatable), in every "
                                "topic it has offsets for (--all-topics), or as a CSV file says (--from-file). "
                                "Without --execute this is a dry run that prints the new offsets and changes "
                                "nothing (as Kafka's tool). New offsets outside a partition's [log start, log end] "
                                "are clamped to it, with a note on stderr.")
    add_subject(p, "group", "--group", "group", "GROUP", "the group")
    p.add_argument("--topic", action="append", type=_scope, metavar="TOPIC[:P,P]",
                   help="a topic to reset (every partition, or those listed); repeatable")
    p.add_argument("--all-topics", action="store_true", help="every partition the group has committed offsets for")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's log end offset")
    target.add_argument("--to-current", action="store_true",
                        help="to the committed offset (a partition without one: its log end offset)")
    target.add_argument("--to-offset", type=int, metavar="N", help="to offset N")
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative)")
    target.add_argument("--to-datetime", metavar="ISO",
                        help="to the first record at or after this time, e.g. 2026-01-31T12:00:00Z "
                             "(no zone: local time)")
    target.add_argument("--by-duration", metavar="PnDTnHnMnS",
                        help="to the first record at or after now minus this ISO 8601 duration, e.g. PT30M, P1DT2H")
    target.add_argument("--from-file", metavar="CSV",
                        help="to the offsets of a CSV file of topic,partition,offset lines (as --export prints)")
    p.add_argument("--export", action="store_true", help="print the plan as CSV (topic,partition,offset)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="apply the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")

    p = add_command(verbs, "delete-offsets", delete_offsets, "delete a group's committed offsets of some topics",
                    description="Delete a group's committed offsets of some topics (kafka-consumer-groups "
                                "--delete-offsets, KIP-496), e.g. of a topic its consumers no longer read. Refused "
                                "while a live member of the group subscribes to one of the topics "
                                "(GroupSubscribedToTopicError): nothing is deleted then. Needs admin on the group "
                                "and read on the topics.")
    add_subject(p, "group", "--group", "group", "GROUP", "the group")
    p.add_argument("--topic", action="append", type=_scope, required=True, metavar="TOPIC[:P,P]",
                   help="a topic whose offsets to delete (every partition, or those listed); repeatable")
