"""`fabric groups list|describe|reset-offsets`: kafka-consumer-groups."""
from __future__ import annotations

import argparse
import sys

from fabric.cli.common import CommandError, add_command, add_subcommands, format_table, open_fabric


def list_groups(args: argparse.Namespace) -> None:
    """Print every group with committed offsets."""
    with open_fabric(args) as fab:
        for group in fab.list_groups():
            print(group)


def describe(args: argparse.Namespace) -> None:
    """Print the group's state line, then per partition its offsets, lag and owning member, like
    kafka-consumer-groups --describe; with --members one row per member and its assignment instead."""
    with open_fabric(args) as fab:
        group = fab.describe_consumer_group(args.group)
    if group.state == "Dead" and not group.offsets:
        raise CommandError(f"consumer group {args.group!r} does not exist: it has no live members and no "
                           "committed offsets; `fabric groups list` shows the groups")
    print(f"Group: {group.group}\tState: {group.state}\tGeneration: {group.generation}\t"
          f"Protocol: {group.protocol or '-'}\tMembers: {len(group.members)}")
    if args.members:
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


def _assignment_text(assignment: tuple[tuple[str, int], ...]) -> str | None:
    """`topic(0,1),other(2)` as Kafka prints an assignment; None (shown as '-') when empty."""
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(assignment):
        topics.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in topics.items()) or None


def reset_offsets(args: argparse.Namespace) -> None:
    """Print (and with --execute, commit) new offsets for a group in one topic."""
    with open_fabric(args) as fab:
        plan = fab.reset_offsets(args.group, args.topic, to_earliest=args.to_earliest, to_latest=args.to_latest,
                                 to_offset=args.to_offset, to_datetime=args.to_datetime, execute=args.execute)
    print(format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                       [(args.group, t, p, offset) for (t, p), offset in sorted(plan.items())]))
    if not args.execute:
        print("This was a dry run: no offsets changed. Add --execute to apply it.", file=sys.stderr)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric groups ...`."""
    groups = add_command(subparsers, "groups", None, "list and describe consumer groups, reset their offsets")
    verbs = add_subcommands(groups, "group commands")

    add_command(verbs, "list", list_groups, "list consumer groups that have committed offsets")

    p = add_command(verbs, "describe", describe,
                    "the group's state, generation and assignor; per partition: committed offset, log end "
                    "offset, lag and the member that owns it")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--members", action="store_true",
                   help="list the live members (id, group.instance.id, client.id) and their assignments instead")

    p = add_command(verbs, "reset-offsets", reset_offsets, "move a group's committed offsets in one topic",
                    description="Move a group's committed offsets in one topic. Without --execute this is a "
                                "dry run that prints the new offsets and changes nothing (as Kafka's tool).")
    p.add_argument("group", metavar="GROUP")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="the topic whose offsets to reset")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="to each partition's log start offset")
    target.add_argument("--to-latest", action="store_true", help="to each partition's log end offset")
    target.add_argument("--to-offset", type=int, metavar="N",
                        help="to offset N (clamped to each partition's [log start, log end])")
    target.add_argument("--to-datetime", metavar="ISO",
                        help="to the first record at or after this time, e.g. 2026-01-31T12:00:00Z "
                             "(no zone: local time)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="apply the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print the new offsets (the default)")
