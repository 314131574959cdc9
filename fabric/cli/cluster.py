"""`fabric cluster up|status|down`: a local replicated cluster in one command (a coordinator, N data nodes and,
with --zookeeper, a ZooKeeper server, on loopback ports in the background), and its state file,
DIR/cluster.json, from which status and down work. With --tokens-file the cluster authenticates its callers; its
own processes present the token of --token-file (else $FABRIC_TOKEN), handed to them in their environment, so no
token shows on any command line."""
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
    """Start (with --zookeeper, a ZooKeeper server and) a coordinator and `--nodes` data nodes under --data;
    write the state file and print the fabric:// URL."""
    from fabric.server.launcher import CoordinatorProcess, NodeProcess
    from fabric.server.zookeeper import ZooKeeperServer
    if args.nodes < 1:
        raise CommandError(f"--nodes must be at least 1, got {args.nodes}")
    auth, token = _auth(args)
    data = os.path.abspath(args.data)
    if os.path.exists(_state_path(data)):
        state = _read_state(data)
        if any(_alive(p["pid"]) for p in state["processes"]):
            raise CommandError(f"a cluster from {data} is running ({state['url']}); stop it with "
                               f"`fabric cluster down --data {args.data}` first")
    started: list[dict[str, Any]] = []
    try:
        store: tuple[str, ...] = ()
        if args.zookeeper:
            zookeeper = ZooKeeperServer(root=os.path.join(data, "zookeeper")).start()
            assert zookeeper.process is not None
            started.append({"role": "zookeeper", "id": None, "pid": zookeeper.process.pid,
                            "address": zookeeper.hosts, "log": os.path.join(zookeeper.root, "zookeeper.log")})
            store = ("--store", zookeeper.url("/fabric"))
        session = ("--node-session-timeout-ms", str(args.session_timeout_ms))
        # group offsets on the nodes, as Kafka's offsets.topic.replication.factor=3 (capped at the nodes there are)
        offsets = ("--offsets-topic-replication-factor", str(min(3, args.nodes)))
        coordinator = CoordinatorProcess(os.path.join(data, "coordinator"), token=token,
                                         extra=(*store, *session, *offsets, *auth)).start()
        started.append(_entry("coordinator", None, coordinator))
        for i in range(1, args.nodes + 1):
            node = NodeProcess(i, os.path.join(data, f"node{i}"), coordinator.url(), token=token,
                               extra=("--session-timeout-ms", str(args.session_timeout_ms),
                                      "--heartbeat-interval-ms", str(max(args.session_timeout_ms // 3, 1)),
                                      *auth)).start()
            started.append(_entry("node", i, node))
    except BaseException:  # a failure, or Ctrl-C, part-way: stop what started (no state file names it yet)
        _stop_all(started)
        raise
    state = {"url": coordinator.url(), "processes": started}
    with open(_state_path(data) + ".tmp", "w") as handle:
        json.dump(state, handle, indent=2)
    os.replace(_state_path(data) + ".tmp", _state_path(data))
    print(state["url"])
    return 0


def _auth(args: argparse.Namespace) -> tuple[tuple[str, ...], str | None]:
    """The servers' --tokens-file/--acl-file options (absolute paths), and the token the cluster's own processes
    present (--token-file, else $FABRIC_TOKEN): one is needed where the cluster authenticates."""
    from fabric.server.connection import ENV_TOKEN, server_token
    options: tuple[str, ...] = ()
    for option, path in (("--tokens-file", args.tokens_file), ("--acl-file", args.acl_file)):
        if path:
            options += (option, os.path.abspath(path))
    token = server_token(args.token_file)
    if args.tokens_file and token is None:
        raise CommandError(f"a cluster with --tokens-file needs the token its coordinator and nodes present to each "
                           f"other (a principal with cluster_action on cluster:fabric): --token-file FILE or "
                           f"${ENV_TOKEN}")
    return options, token


def _entry(role: str, number: int | None, server: Any) -> dict[str, Any]:
    return {"role": role, "id": number, "pid": server.process.pid, "address": server.address, "log": server.log_path}


def _stop_all(processes: list[dict[str, Any]]) -> None:
    """SIGTERM the nodes, then the coordinator, then ZooKeeper; SIGKILL what has not exited in time."""
    for role in ("node", "coordinator", "zookeeper"):
        pids = [p["pid"] for p in processes if p["role"] == role and _alive(p["pid"])]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)  # poll interval of a deadline-bounded wait
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def status(args: argparse.Namespace) -> int:
    """One row per process of the cluster: role, id, address, pid, running or not."""
    state = _read_state(args.data)
    rows = [(p["role"], p["id"], p["address"], p["pid"], "running" if _alive(p["pid"]) else "stopped")
            for p in state["processes"]]
    print(f"URL: {state['url']}")
    print(format_table(("ROLE", "ID", "ADDRESS", "PID", "STATE"), rows))
    return 0 if all(row[4] == "running" for row in rows) else 1


def down(args: argparse.Namespace) -> int:
    """Stop the cluster's processes (nodes first) and remove the state file."""
    state = _read_state(args.data)
    _stop_all(state["processes"])
    os.unlink(_state_path(args.data))
    print(f"Stopped the cluster {state['url']}.")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric cluster ...`."""
    group = add_command(subparsers, "cluster", None, "run a local replicated cluster in the background")
    verbs = add_subcommands(group, "cluster commands")
    start = add_command(verbs, "up", up, "start a coordinator and N data nodes on loopback ports; print the URL",
                        epilog="example:\n  fabric cluster up --nodes 3 --data /tmp/fabric-cluster\n"
                               "  fabric topics create t --partitions 6 --replication-factor 3 --url fabric://...")
    start.add_argument("--nodes", type=int, default=3, metavar="N", help="how many data nodes (default 3)")
    start.add_argument("--zookeeper", action="store_true", help="keep the metadata in a ZooKeeper server of the "
                       "cluster's own (started from pyspark's jars; needs java) instead of SQLite")
    start.add_argument("--session-timeout-ms", type=int, default=9000, metavar="MS",
                       help="node.session.timeout.ms of the coordinator and nodes (default 9000)")
    start.add_argument("--tokens-file", metavar="FILE", help="`token principal` lines: the cluster authenticates "
                       "every call (auth.tokens.file of each process)")
    start.add_argument("--acl-file", metavar="FILE", help="`principal operation resource` lines: the cluster "
                       "authorizes every call (acl.file of each process)")
    start.add_argument("--token-file", metavar="FILE", help="a file holding the token the coordinator and nodes "
                       "present to each other (default $FABRIC_TOKEN); it reaches them in their environment, never "
                       "on a command line")
    show = add_command(verbs, "status", status, "show each process of the cluster and whether it runs")
    stop = add_command(verbs, "down", down, "stop the cluster's processes and forget its state")
    for parser in (start, show, stop):
        parser.add_argument("--data", default=DEFAULT_DIR, metavar="DIR",
                            help=f"the cluster's directory: data, logs and {STATE_FILE} (default {DEFAULT_DIR})")
