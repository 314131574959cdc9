"""`fabric coordinator start|status`: run a coordinator instance, or show the instances of a fabric:// URL."""
from __future__ import annotations

import argparse

from fabric.cli.common import CommandError, add_command, add_subcommands, client_url, defer_arguments, format_table
from fabric.client.url import open_cluster, resolve


def start_arguments(parser: argparse.ArgumentParser) -> None:
    """`fabric coordinator start`'s options (the server's modules, loaded only for it)."""
    from fabric.server.instance import SERVER_LOG_LEVEL, add_start_arguments
    add_start_arguments(parser)
    parser.set_defaults(log_level_default=SERVER_LOG_LEVEL)


def start(args: argparse.Namespace) -> None:
    from fabric.server.instance import settings_from
    from fabric.server.service import serve
    serve(settings_from(args))


def status(args: argparse.Namespace) -> int:
    """One row per instance of the URL: address, state (active/standby/unreachable), epoch, how many
    __consumer_offsets partitions it serves the groups of (where instances share them out), store."""
    from fabric.client.remote import RemoteCluster
    cluster = open_cluster(client_url(args))
    if not isinstance(cluster, RemoteCluster):
        cluster.close()
        raise CommandError(f"{resolve(args.url)!r} is an embedded fabric; `coordinator status` needs "
                           "--url fabric://host:port[,host:port]")
    with_errors = False
    rows: list[tuple[str, str, int | None, str | None, int | None, str]] = []
    try:
        for address, state in cluster.statuses().items():
            if isinstance(state, Exception):
                with_errors = True
                rows.append((address, "unreachable", None, None, None, str(state).splitlines()[0][:120]))
            else:
                rows.append((address, "active" if state.active else "standby", state.epoch,
                             state.active_instance, len(state.group_partitions), state.store))
    finally:
        cluster.close()
    print(format_table(("INSTANCE", "STATE", "EPOCH", "ACTIVE", "GROUP-PARTITIONS", "STORE-OR-ERROR"), rows))
    return 1 if with_errors and not any(r[1] == "active" for r in rows) else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric coordinator ...`."""
    group = add_command(subparsers, "coordinator", None, "run and inspect coordinator service instances")
    verbs = add_subcommands(group, "coordinator commands")
    p = add_command(verbs, "start", start, "serve a fabric over Arrow Flight until SIGTERM",
                    description="Serve the data directory and metadata store over Arrow Flight until SIGTERM. "
                                "With a zk:// store several instances elect one active instance.",
                    epilog="example:\n  fabric coordinator start --listen 127.0.0.1:9093 --data /var/fabric "
                           "--config conf/fabric.properties")
    defer_arguments(p, start_arguments)
    add_command(verbs, "status", status, "show each instance of --url fabric://... and which one is active")
