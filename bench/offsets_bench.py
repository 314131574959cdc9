"""Offset commits: group offsets in the offsets topic (embedded, ZooKeeper-backed, through the fabric:// service,
on a replicated cluster of data nodes, where the offsets topic is replicated on up to 3 of them) beside the
stores they replaced (SQLite's table and ZooKeeper's znodes, bench.legacy_offsets), in one run. Each case is
one client, then 10 client processes (--clients), committing one partition's offset back to back for
--seconds; the figures are commits/s (all clients together), p50/p99 latency and, where servers serve the commits,
their CPU per commit (all the case's server processes together, warm-up commits included), the kernel's share of it
and their threads' context switches per commit (what handing requests between threads costs), and the busiest
server process's CPU over the measurement in cores (near 1: that process, one interpreter, bounds the rate). The
clients' groups spread over the offsets topic's partitions; the cluster is measured again with groups that share
one partition, where concurrent commits go together in one append (group commit), and (with ZooKeeper) with
--instances coordinator instances that share the offsets topic's partitions out (each serving the groups of its
own; issue 24's goal 7). Then (--sustained) one client commits one group's offset tens of thousands of times on the
SQLite table and on the embedded offsets topic, whose cleaner runs beside the commits once its partition rolls.

The issue's goal: on the cluster, at least 20x the commits/s of the ZooKeeper znodes (`vs_znodes`). With
--without-zookeeper (a machine without Java) the cases that need ZooKeeper are skipped and the ratios are to the
SQLite table instead (`vs_table`)."""
from __future__ import annotations

import argparse
import glob
import itertools
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from typing import Any

import numpy as np
import psutil
import pyarrow as pa

import fabric
from bench.legacy_offsets import TableOffsets, ZnodeOffsets
from bench.report import bar_chart, progress, run_suite, table, timed
from fabric.common.waiting import wait_for
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.offsets_records import offsets_partition
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.coordinator.zk_store import ZkCoordinator
from fabric.server.launcher import CoordinatorProcess
from fabric.server.local_cluster import LocalCluster, node_racks
from fabric.server.zookeeper import ZooKeeperServer

TOPIC = "bench-commits"
MANY = 10  # the concurrent case's client processes (--clients)
RECORDS = 100  # per partition of TOPIC: the offsets committed cycle through 0..RECORDS, all within the logs
WARMUP_COMMITS = 20
TABLE, ZNODES = "SQLite table (before)", "ZooKeeper znodes (before)"
RATIOS = {TABLE: "vs_table", ZNODES: "vs_znodes"}  # the results' key of the ratios to each baseline
Store = tuple[str, ...]  # how a client process opens a store: (kind, *arguments), see open_store


def open_store(store: Store) -> Coordinator:
    """The Coordinator a store spec names: ("table" | "sqlite", database path), ("znodes", zk URL),
    ("zk", zk URL, offsets directory) or ("url" | "shared", fabric:// URL)."""
    kind, *args = store
    if kind == "table":
        return TableOffsets(args[0])
    if kind == "sqlite":
        return SqliteCoordinator(args[0])
    if kind == "znodes":
        return ZnodeOffsets(args[0])
    if kind == "zk":
        return ZkCoordinator(args[0], offsets_dir=args[1])
    return fabric.connect(args[0]).cluster.coordinator


def group_of(store: Store, number: int) -> str:
    """Client `number`'s group: bench-<number>, or for a ("shared", url) store the number-th bench-<i> whose
    offsets are in the same offsets partition as bench-0's."""
    if store[0] != "shared":
        return f"bench-{number}"
    target = offsets_partition("bench-0")
    sharing = (g for g in (f"bench-{i}" for i in itertools.count()) if offsets_partition(g) == target)
    return next(itertools.islice(sharing, number, None))


def client(store: Store, number: int, seconds: float, barrier: Any) -> dict[str, Any]:
    """One client process: its group (group_of) commits partition `number` of TOPIC, back to back, from when
    every client of the case is ready (`barrier`) for `seconds`; its commit count, span and latencies."""
    coordinator = open_store(store)
    group, tp = group_of(store, number), (TOPIC, number)
    try:
        for i in range(WARMUP_COMMITS):
            coordinator.commit_offsets(group, {tp: i % (RECORDS + 1)})
        barrier.wait()
        latencies_ns: list[int] = []
        start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
        end, commit = start + seconds, WARMUP_COMMITS
        while time.monotonic() < end:
            began = time.perf_counter_ns()
            coordinator.commit_offsets(group, {tp: commit % (RECORDS + 1)})
            latencies_ns.append(time.perf_counter_ns() - began)
            commit += 1
        finished = time.monotonic()
        stored = coordinator.committed(group, [TOPIC]).get(tp)
        if stored is None or stored.offset != (commit - 1) % (RECORDS + 1):
            raise RuntimeError(f"the store lost a commit of {group}: expected {(commit - 1) % (RECORDS + 1)}, "
                               f"read {stored}")
        return {"start": start, "end": finished, "latencies_ms": [n / 1e6 for n in latencies_ns]}
    finally:
        coordinator.close()


def measure(pool: ProcessPoolExecutor, store: Store, clients: int, seconds: float) -> dict[str, Any]:
    """`clients` client processes of the pool committing at once; their total rate and the latency spread."""
    with multiprocessing.Manager() as manager:
        barrier = manager.Barrier(clients, timeout=120)  # a client that failed breaks it instead of a hang
        outs = [f.result() for f in [pool.submit(client, store, n, seconds, barrier) for n in range(clients)]]
    span = max(o["end"] for o in outs) - min(o["start"] for o in outs)
    ms = np.array([x for o in outs for x in o["latencies_ms"]])
    return {"clients": clients, "commits": len(ms), "commits_per_s": len(ms) / span,
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def sustained(store: Store, commits: int, windows: int = 12) -> dict[str, Any]:
    """One client of `store` committing one group's offset `commits` times back to back, in this process: µs per
    commit over all of them and in each of `windows` equal stretches. On the offsets topic a partition rolls its
    segment every 21,000 commits or so and its cleaner then runs beside the commits: what a consumer that commits
    all the time pays for compaction (the stretches with a pass are the slow ones)."""
    coordinator = open_store(store)
    per_window, spans = max(commits // windows, 1), []
    try:
        for w in range(windows):
            began = time.perf_counter()
            for i in range(w * per_window, (w + 1) * per_window):
                coordinator.commit_offsets("bench-sustained", {(TOPIC, 0): i % (RECORDS + 1)})
            spans.append(time.perf_counter() - began)
    finally:
        coordinator.close()
    return {"commits": per_window * windows, "us_per_commit": sum(spans) / (per_window * windows) * 1e6,
            "windows_us": [span / per_window * 1e6 for span in spans]}


def fill_topic(url: str, partitions: int) -> None:
    """Create TOPIC with a partition per client and RECORDS records in each: a server accepts only committed
    offsets within a partition's log."""
    fab = fabric.connect(url)
    fab.create_topic(TOPIC, partitions=partitions)
    with fab.producer() as producer:
        producer.send_batch(TOPIC, pa.table({"value": [b"x"] * (RECORDS * partitions),
                                             "partition": [p for p in range(partitions) for _ in range(RECORDS)]}))
    fab.close()


def offsets_loaded(url: str) -> None:
    """Wait until the cluster's offsets topic is created on the nodes and every partition of it is served: a
    commit of a group in each is acknowledged."""
    groups = {offsets_partition(g): g for g in (f"bench-ready-{n}" for n in range(1000))}
    waiting = sorted(groups)

    def committed() -> bool:
        while waiting:
            try:
                fab.cluster.coordinator.commit_offsets(groups[waiting[0]], {(TOPIC, 0): 0})
            except fabric.FabricError as exc:
                if not exc.retriable:
                    raise
                return False
            waiting.pop(0)
        return True
    with fabric.connect(url) as fab:
        wait_for(committed, 120, "every partition of the offsets topic served")


def stores(stack: ExitStack, directory: str, nodes: int, clients: int, zookeeper: bool = True, instances: int = 3
           ) -> tuple[dict[str, Store], dict[str, dict[str, int]]]:
    """Start ZooKeeper (unless not `zookeeper`), the coordinator services and a cluster; the spec of every case,
    peers first (without ZooKeeper: none of the cases that need it), and the pid of each of a case's servers, by
    name."""
    zk = None
    if zookeeper:
        with timed("starting ZooKeeper (pyspark's jar)"):
            zk = ZooKeeperServer(root=os.path.join(directory, "zk")).start()
        stack.callback(zk.close)
    services: dict[str, str] = {}
    pids: dict[str, dict[str, int]] = {}
    for name, store in (("sqlite", None), *([("zk", zk.url("/service"))] if zk is not None else [])):
        process = CoordinatorProcess(os.path.join(directory, f"service-{name}"), store=store)
        with timed(f"starting the coordinator service over {name}"):
            process.start()
        stack.callback(process.stop)
        fill_topic(process.url(), clients)
        services[name] = process.url()
        assert process.process is not None
        pids[name] = {"service": process.process.pid}
    with timed(f"starting a cluster: a coordinator and {nodes} data nodes, the offsets topic on them"):
        cluster = stack.enter_context(LocalCluster(os.path.join(directory, "cluster"), nodes, 6000, 500, (
            "--offsets-topic-replication-factor", str(min(nodes, 3))), racks=node_racks(nodes)))
        fill_topic(cluster.url, clients)
        offsets_loaded(cluster.url)
    pids["cluster"] = server_pids(cluster)
    sharded = f"offsets topic, cluster of {nodes} nodes, {instances} coordinator instances sharing the groups"
    if zk is not None:
        with timed(f"starting a cluster of {instances} coordinator instances over ZooKeeper and {nodes} data nodes"):
            shared_out = stack.enter_context(LocalCluster(
                os.path.join(directory, "sharded"), nodes, 6000, 500,
                ("--offsets-topic-replication-factor", str(min(nodes, 3))), instances, zk.url("/sharded"),
                racks=node_racks(nodes)))
            fill_topic(shared_out.url, clients)
            offsets_loaded(shared_out.url)
        pids[sharded] = server_pids(shared_out)
    cases: dict[str, Store | None] = {
        TABLE: ("table", os.path.join(directory, "table", "metadata.db")),
        ZNODES: ("znodes", zk.url("/znodes")) if zk is not None else None,
        "offsets topic, embedded": ("sqlite", os.path.join(directory, "embedded", "metadata.db")),
        "offsets topic, ZooKeeper coordinator": ("zk", zk.url("/direct"), os.path.join(directory, "direct"))
        if zk is not None else None,
        "offsets topic, service over SQLite": ("url", services["sqlite"]),
        "offsets topic, service over ZooKeeper": ("url", services["zk"]) if zk is not None else None,
        f"offsets topic, cluster of {nodes} nodes": ("url", cluster.url),
        f"offsets topic, cluster of {nodes} nodes, groups sharing a partition": ("shared", cluster.url),
        sharded: ("url", shared_out.url) if zk is not None else None,
    }
    servers = {"offsets topic, service over SQLite": "sqlite", "offsets topic, service over ZooKeeper": "zk",
               f"offsets topic, cluster of {nodes} nodes": "cluster",
               f"offsets topic, cluster of {nodes} nodes, groups sharing a partition": "cluster", sharded: sharded}
    return ({label: store for label, store in cases.items() if store is not None},
            {label: pids[name] for label, name in servers.items() if name in pids})


def server_pids(cluster: LocalCluster) -> dict[str, int]:
    """The pid of each server process of `cluster`, by name: its coordinator instances, then its nodes."""
    several = len(cluster.coordinators) > 1
    named = [*((f"coordinator {i}" if several else "coordinator", c) for i, c in enumerate(cluster.coordinators)),
             *((f"node {n}", node) for n, node in cluster.nodes.items())]
    return {name: process.process.pid for name, process in named if process.process is not None}


def server_usage(processes: dict[str, psutil.Process]) -> dict[str, tuple[float, float, int]]:
    """What each of `processes` used so far, by name: CPU seconds in user space and in the kernel, and the context
    switches of all its threads (a thread handing a request to another, or waiting for the interpreter lock,
    switches)."""
    return {name: (times.user, times.system, thread_switches(p.pid))
            for name, p in processes.items() for times in (p.cpu_times(),)}


def thread_switches(pid: int) -> int:
    """The context switches, voluntary and not, of every live thread of process `pid` (Linux's
    /proc/PID/task/*/status; psutil's num_ctx_switches counts the main thread's alone); 0 where there is no /proc."""
    total = 0
    for task in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(task) as status:
                total += sum(int(line.split()[1]) for line in status if "ctxt_switches:" in line)
        except OSError:  # the thread ended meanwhile
            continue
    return total


def run(args: argparse.Namespace, directory: str) -> tuple[dict[str, Any], None]:
    """Every case with 1 and with --clients clients; the ratios to the ZooKeeper znodes (`vs_znodes`), or without
    ZooKeeper to the SQLite table (`vs_table`)."""
    baseline = TABLE if args.without_zookeeper else ZNODES
    results: dict[str, Any] = {"seconds_per_measurement": args.seconds, "nodes": args.nodes,
                               "instances": args.instances, "cases": {},
                               "baseline": baseline}
    spawn = multiprocessing.get_context("spawn")
    with ExitStack() as stack, ProcessPoolExecutor(args.clients, mp_context=spawn) as pool:
        cases, pids = stores(stack, directory, args.nodes, args.clients, not args.without_zookeeper,
                             args.instances)
        for label, store in cases.items():
            servers = {name: psutil.Process(pid) for name, pid in pids.get(label, {}).items()}
            for clients in sorted({1, args.clients}):
                with timed(f"{label}, {clients} client(s), {args.seconds:g} s"):
                    before, began = server_usage(servers), time.monotonic()
                    out = measure(pool, store, clients, args.seconds)
                    if servers:
                        span, after = time.monotonic() - began, server_usage(servers)
                        used = {name: [now - then for now, then in zip(after[name], before[name], strict=True)]
                                for name in servers}
                        user, system, switches = (sum(u[i] for u in used.values()) for i in range(3))
                        commits = out["commits"] + clients * WARMUP_COMMITS
                        out["server_cpu_ms_per_commit"] = (user + system) * 1000 / commits
                        out["server_kernel_share"] = system / (user + system) if user + system > 0 else float("nan")
                        out["server_switches_per_commit"] = switches / commits
                        # whether one process bounds the rate: its CPU over the measurement (the warm-up and the
                        # clients' start included, so a little under the truth), near 1 when it used a core up
                        out["server_core_share"] = {name: (u[0] + u[1]) / span for name, u in used.items()}
                progress(f"  {out['commits_per_s']:,.0f} commits/s, p50 {out['p50_ms']:.2f} ms, "
                         f"p99 {out['p99_ms']:.2f} ms")
                results["cases"].setdefault(label, {})[str(clients)] = out
    if args.sustained:
        for label in (TABLE, "offsets topic, embedded"):
            with timed(f"{label}, one client, {args.sustained:,} commits of one group"):
                results.setdefault("sustained", {})[label] = out = sustained(cases[label], args.sustained)
            progress(f"  {out['us_per_commit']:.0f} µs a commit; by stretches: "
                     + " ".join(f"{us:.0f}" for us in out["windows_us"]))
    peer = results["cases"][baseline]
    results[RATIOS[baseline]] = {label: {n: out["commits_per_s"] / peer[n]["commits_per_s"] for n, out in modes.items()}
                            for label, modes in results["cases"].items()}
    return results, None


def report(results: dict[str, Any], _: None) -> None:
    """The plot (bench/results/offsets.png) and the Markdown table."""
    cases, baseline = results["cases"], results.get("baseline", ZNODES)
    ratios = results[RATIOS[baseline]]
    rows = [(f"{label}, {n} client{'s' if n != '1' else ''}", out["commits_per_s"])
            for label, modes in cases.items() for n, out in modes.items()]
    chart = bar_chart("offsets", "Offset commits/s, back to back", rows, "commits/s")
    def servers(out: dict[str, Any]) -> tuple[str, str, str, str]:
        if "server_cpu_ms_per_commit" not in out:
            return "-", "-", "-", "-"
        busiest = max(out["server_core_share"].items(), key=lambda named: named[1])
        return (f"{out['server_cpu_ms_per_commit']:.2f}", f"{out['server_kernel_share']:.0%}",
                f"{out['server_switches_per_commit']:.1f}", f"{busiest[0]}: {busiest[1]:.2f}")
    print(table([(label, n, f"{out['commits_per_s']:,.0f}", f"{out['p50_ms']:.2f}", f"{out['p99_ms']:.2f}",
                  *servers(out), f"{ratios[label][n]:.3g}x")
                 for label, modes in cases.items() for n, out in modes.items()],
                ("store", "clients", "commits/s", "p50 ms", "p99 ms", "server CPU ms/commit", "of it in the kernel",
                 "server context switches/commit", "busiest server, cores",
                 f"vs {baseline.removesuffix(' (before)')}")))
    if results.get("sustained"):
        peer = results["sustained"][TABLE]["us_per_commit"]
        print(table([(label, f"{out['commits']:,}", f"{out['us_per_commit']:.0f}", f"{max(out['windows_us']):.0f}",
                      f"{peer / out['us_per_commit']:.3g}x") for label, out in results["sustained"].items()],
                    ("sustained, one client", "commits", "µs a commit", "slowest stretch, µs a commit",
                     "vs SQLite table")))
    progress(f"plot: {chart}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each measurement")
    parser.add_argument("--nodes", type=int, default=3, help="data nodes of the cluster case")
    parser.add_argument("--sustained", type=int, default=60_000,
                        help="commits of one client, back to back, on the SQLite table and the embedded offsets "
                        "topic, whose cleaner runs beside them past about 21,000 (0: not measured)")
    parser.add_argument("--clients", type=int, default=MANY, help="client processes of the concurrent case")
    parser.add_argument("--instances", type=int, default=3,
                        help="coordinator instances of the case where they share the groups out")
    parser.add_argument("--without-zookeeper", action="store_true",
                        help="skip the cases that need ZooKeeper (and Java); ratios to the SQLite table instead")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.nodes < 1 or args.clients < 1 or args.instances < 1 or args.sustained < 0:
        parser.error("--seconds must be positive, --nodes, --clients and --instances at least 1, and --sustained 0 "
                     "or more")
    return run_suite("offsets", args, run, report)


if __name__ == "__main__":
    main()
