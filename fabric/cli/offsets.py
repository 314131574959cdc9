"""`fabric get-offsets`: kafka-get-offsets (Kafka's GetOffsetShell), each partition's offset at a time as a
`topic:partition:offset` line: the latest (-1), the earliest (-2), the first record of the largest timestamp
(-3), or the first at or after a timestamp."""
from __future__ import annotations

import argparse

from fabric import OffsetSpec
from fabric.cli.common import CommandError, add_command, open_fabric

TIMES = {"-1": OffsetSpec.latest, "latest": OffsetSpec.latest, "-2": OffsetSpec.earliest,
         "earliest": OffsetSpec.earliest, "-3": OffsetSpec.max_timestamp, "max-timestamp": OffsetSpec.max_timestamp}


def _spec(text: str) -> OffsetSpec:
    """--time: -1 or latest, -2 or earliest, -3 or max-timestamp, or a timestamp in ms since the epoch."""
    if text in TIMES:
        return TIMES[text]()
    if not text.isdigit():
        raise CommandError(f"--time takes -1 (latest), -2 (earliest), -3 (max-timestamp) or a timestamp in ms since "
                           f"the epoch, got {text!r}")
    return OffsetSpec.for_timestamp(int(text))


def _partitions(text: str) -> list[int]:
    """--partitions 0,2: partition numbers."""
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected partition numbers such as 0,2, got {text!r}") from None


def get_offsets(args: argparse.Namespace) -> None:
    """Print `topic:partition:offset` for each partition of --topic (else every topic), --partitions only if
    given; the offset is empty where none is at or after --time."""
    spec = _spec(args.time)
    with open_fabric(args) as fab:
        wanted = {}
        for topic in [args.topic] if args.topic else fab.list_topics():
            count = fab.cluster.coordinator.topic(topic).partitions
            missing = sorted(set(args.partitions or ()) - set(range(count)))
            if missing:
                raise CommandError(f"topic {topic!r} has partitions 0..{count - 1}; there is no partition "
                                   f"{missing[0]}")
            wanted.update({(topic, p): spec for p in args.partitions or range(count)})
        for (topic, partition), found in sorted(fab.list_offsets(wanted).items()):
            offset = found.result().offset
            print(f"{topic}:{partition}:{'' if offset < 0 else offset}")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric get-offsets`."""
    p = add_command(subparsers, "get-offsets", get_offsets, "print partitions' offsets: latest, earliest or at a "
                    "time (kafka-get-offsets)",
                    description="Print each partition's offset as topic:partition:offset, as kafka-get-offsets "
                                "does: the latest (--time -1, the default: the log end), the earliest (-2: the log "
                                "start), the first record of the largest timestamp (-3), or the first record at or "
                                "after a timestamp in ms (empty where there is none). Of --topic, else of every "
                                "topic.")
    p.add_argument("--topic", metavar="T", help="this topic only (default: every topic)")
    p.add_argument("--partitions", type=_partitions, metavar="P,P", help="these partitions only (with --topic)")
    p.add_argument("--time", default="-1", metavar="TIME",
                   help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in ms since "
                        "the epoch")
