"""`fabric partitions elect-leaders` and `fabric partitions reassign`: Kafka's kafka-leader-election and
kafka-reassign-partitions, for a cluster with data nodes."""
from __future__ import annotations

import argparse
import json

from fabric.cli.common import add_command, add_subcommands, format_table, open_fabric
from fabric.client.admin import Fabric
from fabric.common.errors import InvalidArgumentError
from fabric.common.types import TopicPartition


def _chosen(args: argparse.Namespace, fab: Fabric) -> list[TopicPartition] | None:
    """The partitions named by --topic/--partition; None (every replicated one) with neither."""
    if args.all_topic_partitions and args.topic is not None:
        raise InvalidArgumentError("--all-topic-partitions or --topic: give one")
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
        unclean = args.unclean or args.election_type == "unclean"
        changed = fab.elect_leaders("unclean" if unclean else "preferred", _chosen(args, fab))
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


def _replica_list(text: str) -> list[int]:
    try:
        replicas = [int(part) for part in text.split(",")]
    except ValueError:
        raise InvalidArgumentError(f"--replicas {text!r} must be node ids separated by commas, e.g. 3,1,2") from None
    return replicas


def reassign(args: argparse.Namespace) -> None:
    """Show the move (a dry run, as Kafka's tool without --execute), start it, or say whether it is done."""
    wanted = _replica_list(args.replicas)
    with open_fabric(args) as fab:
        current = fab.partition_assignment(args.topic, args.partition)
        if current is None:
            raise InvalidArgumentError(f"{args.topic}-{args.partition} is not a replicated partition; only those "
                                       "placed on data nodes (--replication-factor) can be reassigned")
        where = f"{args.topic}-{args.partition}"
        if args.verify:
            done = current.assignment.replicas == tuple(wanted) and not current.assignment.target
            print(f"Reassignment of {where} to {wanted} is {'complete' if done else 'still in progress'} "
                  f"(replicas {list(current.assignment.replicas)}, ISR {list(current.state.isr)}).")
            return
        print(f"Current replicas of {where}: {list(current.assignment.replicas)}")
        print(f"Proposed replicas of {where}: {wanted}")
        if not args.execute:
            print("This was a dry run: add --execute to move the replicas.")
            return
        started = fab.reassign_partition(args.topic, args.partition, wanted)
    if started.assignment.target:
        print(f"Started: the new replicas copy the log and join the ISR, then the old ones leave. Check with "
              f"`fabric partitions reassign --topic {args.topic} --partition {args.partition} --replicas "
              f"{args.replicas} --verify`.")
    else:
        print(f"Done: {where} is on {list(started.assignment.replicas)}.")


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
                           "  fabric partitions elect-leaders --unclean --topic clicks --partition 0\n"
                           "  fabric partitions elect-leaders --election-type PREFERRED --all-topic-partitions")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--preferred", action="store_true", help="a preferred-leader election (the default)")
    kind.add_argument("--unclean", action="store_true", help="an unclean election of offline partitions")
    kind.add_argument("--election-type", type=str.lower, choices=("preferred", "unclean"),
                      help="as kafka-leader-election: --preferred or --unclean")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="as kafka-leader-election: every replicated partition (the default without --topic)")
    p.add_argument("--topic", metavar="T", help="only this topic's partitions (default: every replicated one)")
    p.add_argument("--partition", metavar="P", type=int, help="only this partition of --topic")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")

    p = add_command(verbs, "reassign", reassign, "move a partition's replicas to other nodes",
                    description="Without --execute, show the current and proposed replicas (a dry run). With "
                                "--execute, the new replicas are added as followers, copy the log and join the "
                                "ISR; then the replicas become the given list (the first is the preferred "
                                "leader) and the old ones delete their copy. --verify says whether it is done.",
                    epilog="example:\n  fabric partitions reassign --topic clicks --partition 0 --replicas 4,1,2 "
                           "--execute")
    p.add_argument("--topic", metavar="T", required=True, help="the topic")
    p.add_argument("--partition", metavar="P", type=int, required=True, help="the partition")
    p.add_argument("--replicas", metavar="IDS", required=True, help="the new replicas, node ids like 3,1,2")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="start the move (default: a dry run)")
    mode.add_argument("--verify", action="store_true", help="say whether the move is done")
