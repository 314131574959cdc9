"""`make demo-cluster`: the demo (jobs/demo.py) on a local replicated cluster, a coordinator and 3 data nodes,
with a data node SIGKILLed while the Spark queries run.

Starts the cluster with `fabric cluster up --nodes 3` in a scratch directory and runs jobs/demo.py against its
fabric:// URL: `clicks` and `big-clicks` are replicated 3 ways (min.insync.replicas 2), the producer and both
queries talk to the partition leaders, and the Spark sink writes `big-clicks` as transactions on them. Once the
transform query has committed its first micro-batch, the node leading `big-clicks` partition 0 is SIGKILLed:
the controller moves its partitions to the survivors and the queries go on. The demo's closing counts then show
that nothing was lost and nothing written twice. The cluster is stopped with `fabric cluster down`, also when
the demo fails or is interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import demo
import fabric

NODES = 3


def fabric_cli(*args: str, check: bool = True) -> str:
    """Run `fabric ARGS...` (this Python's) and return what it printed; if it failed, exit with its error
    (`check`) or print it."""
    done = subprocess.run([sys.executable, "-m", "fabric.cli", *args], capture_output=True, text=True)
    if done.returncode:
        message = f"`fabric {' '.join(args)}` failed: {done.stderr.strip()}"
        if check:
            raise SystemExit(message)
        print(message, file=sys.stderr)
    return done.stdout


class NodeKiller(threading.Thread):
    """SIGKILLs the leader of big-clicks partition 0 once the transform query's first micro-batch is visible
    there; `killed` is its node id, if it did."""

    def __init__(self, url: str, cluster: str) -> None:
        super().__init__(daemon=True)
        self.url, self.cluster = url, cluster
        self.killed: int | None = None
        self.done = threading.Event()

    def run(self) -> None:
        with fabric.connect(self.url) as fab:
            while not self.done.is_set():
                described = fab.describe_topic("big-clicks").partitions[0] \
                    if "big-clicks" in fab.list_topics() else None
                if described is not None and described.end_offset > 0:
                    leader = described.leader
                    pid = self._pid(leader)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                        self.killed = leader
                        print(f"\n>> SIGKILLed data node {leader} (pid {pid}), the leader of big-clicks partition 0, "
                              "while the queries run\n", flush=True)
                    return
                time.sleep(0.2)

    def _pid(self, node: int | None) -> int | None:
        with open(os.path.join(self.cluster, "cluster.json")) as f:
            processes = json.load(f)["processes"]
        return next((p["pid"] for p in processes if p["role"] == "node" and p["id"] == node), None)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="the cluster's and the demo's directory (default: a temp dir, "
                                                "removed after)")
    p.add_argument("--events", type=int, default=100_000, help="events to produce")
    args = p.parse_args(argv)
    data = os.path.abspath(args.data or tempfile.mkdtemp(prefix="fabric-demo-cluster-"))
    cluster = os.path.join(data, "cluster")
    try:
        url = fabric_cli("cluster", "up", "--nodes", str(NODES), "--data", cluster).strip()
        try:
            print(fabric_cli("cluster", "status", "--data", cluster), flush=True)
            killer = NodeKiller(url, cluster)
            killer.start()
            try:
                demo.main(["--url", url, "--replication-factor", str(NODES), "--work", os.path.join(data, "work"),
                           "--events", str(args.events), "--max-offsets-per-trigger", str(max(args.events // 8, 1))])
            finally:
                killer.done.set()
            print("\n" + fabric_cli("topics", "describe", "clicks", "--url", url))
            print(fabric_cli("topics", "describe", "big-clicks", "--url", url))
            if killer.killed is None:
                raise SystemExit("the demo ended before a node could be killed; run it with more --events")
        finally:
            print(fabric_cli("cluster", "down", "--data", cluster, check=False).strip())  # never hides an error
        print(f"\nProved: data node {killer.killed}, the leader of big-clicks partition 0, was SIGKILLed while "
              "the Spark queries ran; its partitions moved to the other replicas and nothing was lost or written "
              "twice: every count agrees, each record exactly once")
    finally:
        if args.data is None:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
