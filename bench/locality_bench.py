"""Locality benchmark: where Spark runs the read tasks of a cluster topic, with the JVM reader's preferred locations
(each task names the hosts of its partition's in-sync replicas, leader first) and without them (format("fabric")'s
Python source, whose API cannot name any).

Hosts are loopback addresses, so one machine holds several as Spark's scheduler sees hosts: data node i serves on
127.0.0.<i+1> in rack rack-<i> (fabric.server.local_cluster), and a Spark standalone worker of one core runs on
each of the first `--workers` of those hosts (fabric.spark.standalone), its executors labelled with that rack
($FABRIC_CLIENT_RACK). The topic has `--partitions` partitions of one replica each (RF 1: a partition is on one host
only), holding `--records` records. Each reader reads it whole into noop `--repeats` times; Spark's REST API gives
every task's host and locality level.
Reported: the share of tasks that ran on a host holding their partition's replica, over all tasks and over those
whose replica has an executor on its host (the others cannot be local), the locality levels Spark recorded, and the
best time of a read (a task whose preferred host has no executor waits spark.locality.wait, 3 s, before it runs
elsewhere).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import urllib.request
from typing import Any

import fabric
from bench.report import bar_chart, progress, run_suite, table, timed
from fabric.common.ports import free_port
from fabric.server.local_cluster import LocalCluster, node_racks
from fabric.spark import jar
from fabric.spark.standalone import StandaloneSpark

NODES = 3
HOSTS = tuple(f"127.0.0.{i + 1}" for i in range(1, NODES + 1))  # node i's
READERS = {"jvm": "JVM reader (preferred locations)", "python": "Python source (none)"}


def session(master: str, ui_port: int):
    """The driver, on this machine's 127.0.0.1, with the JVM reader's jar and Spark's UI (its REST API)."""
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(master).appName("fabric-locality")
             .config("spark.jars", jar.with_reader()).config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.port", str(ui_port))
             .config("spark.ui.showConsoleProgress", "false").config("spark.executor.memory", "512m")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def last_stage_tasks(spark, ui_port: int) -> list[dict[str, Any]]:
    """The tasks of the application's latest completed stage: their index (the input partition), host and
    locality level, from Spark's REST API."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications/{spark.sparkContext.applicationId}"

    def get(path: str) -> Any:
        with urllib.request.urlopen(base + path, timeout=30) as answer:
            return json.load(answer)
    stage = max(get("/stages?status=complete"), key=lambda s: s["stageId"])
    tasks = get(f"/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=1000")
    return [{"index": t["index"], "host": t["host"], "locality": t["taskLocality"]} for t in tasks]


def read(spark, url: str, reader: str) -> None:
    """The topic whole into noop: the JVM reader, or the Python source (conf spark.fabric.jvmReader=false)."""
    spark.conf.set("spark.fabric.jvmReader", "true" if reader == "jvm" else "false")
    spark.read.format("fabric").option("url", url).option("subscribe", "spread").load() \
        .write.format("noop").mode("overwrite").save()


def run(args: argparse.Namespace, directory: str) -> tuple[dict, None]:
    workers = HOSTS[:args.workers]
    with LocalCluster(os.path.join(directory, "cluster"), NODES, 10_000, 300, hosts=HOSTS,
                      racks=node_racks(NODES)) as cluster:
        with fabric.connect(cluster.url) as fab:
            fab.create_topic("spread", partitions=args.partitions, replication_factor=1)
            with fab.producer() as producer:
                for i in range(args.records):
                    producer.send("spread", b"r-%d" % i, partition=i % args.partitions)
            leaders = {p.partition: p.leader for p in fab.describe_topic("spread").partitions}
        if None in leaders.values():
            raise RuntimeError(f"a partition of topic 'spread' has no leader: {leaders}")
        replica = {partition: HOSTS[leader - 1] for partition, leader in leaders.items() if leader is not None}
        placed = sorted(collections.Counter(replica.values()).items())
        progress(f"topic 'spread': {args.partitions} partitions, on hosts {placed}")
        ui_port = free_port()
        racks = tuple({"FABRIC_CLIENT_RACK": f"rack-{i}"} for i in range(1, len(workers) + 1))  # node i's rack
        with StandaloneSpark(os.path.join(directory, "spark"), workers, worker_env=racks) as standalone:
            spark = session(standalone.master_url, ui_port)
            try:
                out: dict[str, Any] = {}
                for reader in READERS:
                    read(spark, cluster.url, reader)  # warm-up: executors started, classes loaded
                    tasks: list[dict[str, Any]] = []
                    seconds = []
                    for turn in range(1, args.repeats + 1):
                        with timed(f"{READERS[reader]}: read {turn} of {args.repeats}") as took:
                            read(spark, cluster.url, reader)
                        seconds.append(took["seconds"])
                        tasks += last_stage_tasks(spark, ui_port)
                    out[reader] = {**shares(tasks, replica, workers), "seconds_per_read": min(seconds)}
            finally:
                spark.stop()
    return {"records": args.records, "partitions": args.partitions, "repeats": args.repeats,
            "node_hosts": list(HOSTS), "worker_hosts": list(workers), "readers": out}, None


def shares(tasks: list[dict[str, Any]], replica: dict[int, str], workers: tuple[str, ...]) -> dict[str, Any]:
    """How many of `tasks` ran where their partition's replica is (task index = partition: one task per partition,
    in partition order, for either reader), over all and over those that could (an executor on the replica's
    host); and Spark's locality levels."""
    local = [t for t in tasks if t["host"] == replica[t["index"]]]
    possible = [t for t in tasks if replica[t["index"]] in workers]
    return {"tasks": len(tasks), "on_replica_host": len(local), "share": len(local) / max(len(tasks), 1),
            "possible": len(possible), "share_of_possible": len(local) / max(len(possible), 1),
            "locality_levels": dict(collections.Counter(t["locality"] for t in tasks))}


def report(results: dict, _: None) -> None:
    readers = results["readers"]
    print(table([(READERS[r], str(v["tasks"]), f"{v['share']:.0%}", f"{v['share_of_possible']:.0%}",
                  ", ".join(f"{k} {n}" for k, n in sorted(v["locality_levels"].items())),
                  f"{v['seconds_per_read']:.2f}")
                 for r, v in readers.items()],
                ("reader", "tasks", "on a replica's host", "of those that could be", "Spark's locality levels",
                 "s per read (best)")))
    print(f"\n{results['partitions']} partitions (RF 1) on nodes at {', '.join(results['node_hosts'])}; executors on "
          f"{', '.join(results['worker_hosts'])}")
    chart = bar_chart("locality", "Read tasks on a host holding their partition's replica",
                      [(READERS[r], 100 * v["share_of_possible"]) for r, v in readers.items()],
                      "% of the tasks that could be")
    progress(f"plot: {chart}")


def main(argv: list[str] | None = None) -> dict:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver's; each worker gets its host's
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the driver's Python workers (the Python source's)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=60_000, help="records in the topic (default 60,000)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of the topic (default 6)")
    parser.add_argument("--workers", type=int, default=2, choices=range(1, NODES + 1),
                        help=f"Spark workers, on the first hosts of the {NODES} nodes' (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="reads per reader after a warm-up (default 3)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    if jar.path() is None:
        parser.error("the JVM reader is not built (no javac): make install")
    if args.records < args.partitions or args.repeats < 1:
        parser.error("--records at least --partitions, --repeats at least 1")
    return run_suite("locality", args, run, report)


if __name__ == "__main__":
    main()
