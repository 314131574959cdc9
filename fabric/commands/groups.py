"""`fabric groups list|describe|reset-offsets`: kafka-consumer-groups."""
from __future__ import annotations

import argparse
import sys

from fabric.commands import CommandError, add_command, add_subcommands, format_table, open_fabric


def list_groups(args: argparse.Namespace) -> None:
    """Print every group with committed offsets."""
    with open_fabric(args) as fab:
        for group in fab.list_groups():
            print(group)


def describe(args: argparse.Namespace) -> None:
    """Print the group's offsets and lag per partition, like kafka-consumer-groups --describe."""
    with open_fabric(args) as fab:
        rows = fab.describe_group(args.group)
    if not rows:
        raise CommandError(f"consumer group {args.group!r} has no committed offsets; "
                           "`fabric groups list` shows the groups that do")
    print(format_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"),
                       [(args.group, r.topic, r.partition, r.committed, r.end_offset, r.lag) for r in rows]))


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
                    "per partition: the group's committed offset, the log end offset and the lag")
    p.add_argument("group", metavar="GROUP")

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
