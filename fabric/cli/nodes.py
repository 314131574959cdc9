"""`fabric node start` and `fabric nodes list`: run a data node, or list a cluster's data nodes."""
from __future__ import annotations

import argparse
import json

from fabric.cli.common import add_command, add_subcommands, defer_arguments, format_table, open_fabric


def start_arguments(parser: argparse.ArgumentParser) -> None:
    """`fabric node start`'s options (the node's modules, loaded only for it)."""
    from fabric.server.instance import SERVER_LOG_LEVEL
    from fabric.server.node.settings import add_node_arguments
    add_node_arguments(parser)
    parser.set_defaults(log_level_default=SERVER_LOG_LEVEL)


def start(args: argparse.Namespace) -> None:
    from fabric.server.node.node import serve
    from fabric.server.node.settings import node_settings_from
    serve(node_settings_from(args))


def list_nodes(args: argparse.Namespace) -> None:
    """One row (or JSON object) per data node: id, address, rack, node epoch, alive."""
    with open_fabric(args) as fab:
        nodes = fab.list_nodes()
    if args.format == "json":
        print(json.dumps([{"id": n.id, "address": n.address, "rack": n.rack, "node_epoch": n.node_epoch,
                           "alive": n.alive} for n in nodes]))
        return
    print(format_table(("ID", "ADDRESS", "RACK", "NODE-EPOCH", "ALIVE"),
                       [(n.id, n.address, n.rack, n.node_epoch, "yes" if n.alive else "no") for n in nodes]))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric node ...` and `fabric nodes ...`."""
    group = add_command(subparsers, "node", None, "run a data node of a replicated cluster")
    verbs = add_subcommands(group, "node commands")
    p = add_command(verbs, "start", start, "serve partitions as a data node until SIGTERM",
                    description="Register with the coordinator (the controller), keep a heartbeat lease, and serve "
                                "produce and fetch for the partitions this node leads, from its own data directory, "
                                "until SIGTERM. A restart with the same --id and --data rejoins.",
                    epilog="example:\n  fabric node start --id 1 --listen 127.0.0.1:9095 --data /var/fabric-node1 "
                           "--coordinator fabric://127.0.0.1:9093")
    defer_arguments(p, start_arguments)

    group = add_command(subparsers, "nodes", None, "list the data nodes of a cluster")
    verbs = add_subcommands(group, "nodes commands")
    p = add_command(verbs, "list", list_nodes, "show each data node: id, address, rack, node epoch, alive")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
