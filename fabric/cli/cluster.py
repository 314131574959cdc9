"""`fabric cluster up|status|down`: a local replicated cluster in one command (a coordinator and N data nodes on
loopback ports, in the background), and its state file, DIR/cluster.json, from which status and down work."""
from __future__ import annotations

import argparse
import json
import os
import signal
import time
from typing import Any

from fabric.cli.common import CommandError, add_command, add_subcommands, format_table

STATE_FILE = "cluster.json"
DEFAULT_DIR = "./fabric-cluster"
STOP_TIMEOUT_S = 15.0


def _state_path(data: str) -> str:
    return os.path.join(os.path.abspath(data), STATE_FILE)


def _read_state(data: str) -> dict[str, Any]:
    path = _state_path(data)
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise CommandError(f"no cluster state in {path}; start one with `fabric cluster up --data {data}`") from None
    except (OSError, ValueError) as exc:
        raise CommandError(f"cannot read the cluster state {path} ({exc}); stop its processes by hand and delete "
                           "it") from None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def up(args: argparse.Namespace) -> int:
    """Start a coordinator and `--nodes` data nodes under --data; print the fabric:// URL."""
    from fabric.server.launcher import CoordinatorProcess, NodeProcess
    if args.nodes < 1:
        raise CommandError(f"--nodes must be at least 1, got {args.nodes}")
    data = os.path.abspath(args.data)
    if os.path.exists(_state_path(data)):
        state = _read_state(data)
        if any(_alive(p["pid"]) for p in [state["coordinator"], *state["nodes"]]):
            raise CommandError(f"a cluster from {data} is running ({state['url']}); stop it with "
                               f"`fabric cluster down --data {args.data}` first")
    session = ("--node-session-timeout-ms", str(args.session_timeout_ms))
    coordinator = CoordinatorProcess(os.path.join(data, "coordinator"), extra=session).start()
    nodes = []
    try:
        for i in range(1, args.nodes + 1):
            nodes.append(NodeProcess(i, os.path.join(data, f"node{i}"), coordinator.url(),
                                     extra=("--session-timeout-ms", str(args.session_timeout_ms))).start())
    except RuntimeError:
        for started in [*nodes, coordinator]:
            started.stop()
        raise
    state = {"url": coordinator.url(),
             "coordinator": {"pid": coordinator.process.pid, "address": coordinator.address,
                             "log": coordinator.log_path},
             "nodes": [{"id": n.node_id, "pid": n.process.pid, "address": n.address, "data": n.data_dir,
                        "log": n.log_path} for n in nodes]}
    with open(_state_path(data) + ".tmp", "w") as handle:
        json.dump(state, handle, indent=2)
    os.replace(_state_path(data) + ".tmp", _state_path(data))
    print(state["url"])
    return 0


def status(args: argparse.Namespace) -> int:
    """One row per process of the cluster: role, id, address, pid, running or not."""
    state = _read_state(args.data)
    rows = [("coordinator", None, state["coordinator"]["address"], state["coordinator"]["pid"])]
    rows += [("node", n["id"], n["address"], n["pid"]) for n in state["nodes"]]
    print(f"URL: {state['url']}")
    print(format_table(("ROLE", "ID", "ADDRESS", "PID", "STATE"),
                       [(*row, "running" if _alive(row[3]) else "stopped") for row in rows]))
    return 0 if all(_alive(row[3]) for row in rows) else 1


def down(args: argparse.Namespace) -> int:
    """SIGTERM the nodes, then the coordinator; SIGKILL what has not exited in time; remove the state file."""
    state = _read_state(args.data)
    for group in (state["nodes"], [state["coordinator"]]):
        pids = [p["pid"] for p in group if _alive(p["pid"])]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)  # poll interval of a deadline-bounded wait
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    os.unlink(_state_path(args.data))
    print(f"Stopped the cluster {state['url']}.")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric cluster ...`."""
    group = add_command(subparsers, "cluster", None, "run a local replicated cluster in the background")
    verbs = add_subcommands(group, "cluster commands")
    start = add_command(verbs, "up", up, "start a coordinator and N data nodes on loopback ports; print the URL",
                        epilog="example:\n  fabric cluster up --nodes 3 --data /tmp/fabric-cluster\n"
                               "  fabric topics create t --partitions 6 --replication-factor 1 --url fabric://...")
    start.add_argument("--nodes", type=int, default=3, metavar="N", help="how many data nodes (default 3)")
    start.add_argument("--session-timeout-ms", type=int, default=9000, metavar="MS",
                       help="node.session.timeout.ms of the coordinator and nodes (default 9000)")
    show = add_command(verbs, "status", status, "show each process of the cluster and whether it runs")
    stop = add_command(verbs, "down", down, "stop the cluster's processes and forget its state")
    for parser in (start, show, stop):
        parser.add_argument("--data", default=DEFAULT_DIR, metavar="DIR",
                            help=f"the cluster's directory: data, logs and {STATE_FILE} (default {DEFAULT_DIR})")
