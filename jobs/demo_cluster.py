"""`make demo-cluster`: the demo (jobs/demo.py) on a local replicated cluster, a coordinator and 3 data nodes.

Starts the cluster with `fabric cluster up --nodes 3` in a scratch directory, runs jobs/demo.py against its
fabric:// URL with `clicks` replicated 3 ways (min.insync.replicas 2; produced to and read from the partition
leaders on the nodes), shows where the replicas are, and stops the cluster with `fabric cluster down`, also when
the demo fails or is interrupted.

Not replicated: `big-clicks`, the Spark sink's output. The exactly-once sink stages its batches in the fabric's
directory and publishes them, and replicated topics do not take publish yet, so `big-clicks` stays in the
coordinator's data directory and the sink writes it through that directory's file:// URL.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import demo

NODES = 3
NOTE = ("note: clicks is replicated (factor 3, min.insync.replicas 2) on the data nodes; big-clicks, the Spark "
        "sink's output, is not: replicated topics do not take the sink's publish yet, so it stays in the "
        "coordinator's directory and the sink writes it through file://")


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
            print(fabric_cli("cluster", "status", "--data", cluster))
            print(NOTE + os.path.join(cluster, "coordinator") + "\n", flush=True)
            demo.main(["--url", url, "--replication-factor", str(NODES),
                       "--sink-url", "file://" + os.path.join(cluster, "coordinator"),  # where `cluster up` keeps it
                       "--work", os.path.join(data, "work"), "--events", str(args.events)])
            print("\n" + fabric_cli("topics", "describe", "clicks", "--url", url))
            print(fabric_cli("topics", "describe", "big-clicks", "--url", url))
        finally:
            print(fabric_cli("cluster", "down", "--data", cluster, check=False).strip())  # never hides an error
    finally:
        if args.data is None:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
