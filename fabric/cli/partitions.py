"""`fabric partitions elect-leaders`: Kafka's kafka-leader-election, for a cluster with data nodes."""
from __future__ import annotations

import argparse
import json

from fabric.cli.common import add_command, add_subcommands, format_table, open_fabric
from fabric.client.admin import Fabric
from fabric.common.errors import InvalidArgumentError
from fabric.common.types import TopicPartition


def _chosen(args: argparse.Namespace, fab: Fabric) -> list[TopicPartition] | None:
    """The partitions named by --topic/--partition; None (every replicated one) with neither."""
    if args.topic is None:
        if args.partition is not None:
            raise InvalidArgumentError("--partition needs --topic: name the topic the partition is of")
        return None
    if args.partition is not None:
        return [(args.topic, args.partition)]
    return [(args.topic, p) for p in range(len(fab.describe_topic(args.topic).partitions))]


def elect_leaders(args: argparse.Namespace) -> None:
    """Run the election and show each partition whose leader changed."""
    with open_fabric(args) as fab:
        changed = fab.elect_leaders("unclean" if args.unclean else "preferred", _chosen(args, fab))
    rows = sorted(changed.items())
    if args.format == "json":
        print(json.dumps([{"topic": t, "partition": p, "leader": s.leader, "leader_epoch": s.leader_epoch,
                           "isr": list(s.isr)} for (t, p), s in rows]))
        return
    if not rows:
        print("No leader changed: every chosen partition is led by its preferred replica already, or cannot be "
              "(the replica is down or out of sync).")
        return
    print(format_table(("TOPIC", "PARTITION", "LEADER", "LEADER-EPOCH", "ISR"),
                       [(t, p, s.leader, s.leader_epoch, ",".join(map(str, s.isr))) for (t, p), s in rows]))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric partitions ...`."""
    group = add_command(subparsers, "partitions", None, "leader elections of a cluster's replicated partitions")
    verbs = add_subcommands(group, "partitions commands")
    p = add_command(verbs, "elect-leaders", elect_leaders,
                    "move leadership back to preferred replicas, or elect out-of-sync ones for offline partitions",
                    description="--preferred (the default) makes each partition's first replica its leader again "
                                "where it is alive and in sync, as after a node came back. --unclean elects an "
                                "out-of-sync replica for offline partitions of topics with "
                                "unclean.leader.election.enable=true: they are available again, but records the "
                                "old in-sync replicas acknowledged may be lost.",
                    epilog="examples:\n  fabric partitions elect-leaders --preferred\n"
                           "  fabric partitions elect-leaders --unclean --topic clicks --partition 0")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--preferred", action="store_true", help="a preferred-leader election (the default)")
    kind.add_argument("--unclean", action="store_true", help="an unclean election of offline partitions")
    p.add_argument("--topic", metavar="T", help="only this topic's partitions (default: every replicated one)")
    p.add_argument("--partition", metavar="P", type=int, help="only this partition of --topic")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
