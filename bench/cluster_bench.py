"""Cluster benchmark: a local replicated cluster (a coordinator and 3 data nodes, real processes on 127.0.0.1)
beside single-node fabrics, on the same records (random 100-byte values) in the same run.

Paths (each on topics of its own):
  rf3      the cluster, replication factor 3, acks=all, min.insync.replicas=2 (leaders spread over the nodes)
  rf1      the cluster, replication factor 1, acks=1
  service  single node: a coordinator service alone (fabric://, no data nodes), producer defaults (acks=all)
  file     single node: the embedded fabric (file://) in this process, producer defaults

Measurements:
  produce throughput  one producer's send_batch of --records records spread over --partitions partitions; every
                      path runs once to warm up, then the paths take turns --repeats times and each keeps its best
                      run: records/s, and CPU microseconds per record of this process and every server together
                      (and of the servers alone: issue 24's goal for a replicated record); the cluster's paths
                      again with one append per partition in flight (the peer of pipelining)
  consume throughput  poll_batch of as many records from the start of those topics, from each partition's leader
  latency             a producer sends one record after another at --rate/s (linger_ms=0; a second thread waits
                      for the acks) to a 1-partition topic while a consumer long-polls it, all in this process
                      (and on rf3 again with the consumer in a process of its own, as it runs in practice:
                      CLOCK_MONOTONIC is one clock for both): produce latency (to the ack) and end to end (to the
                      poll), each from the time
                      the record was due to be sent by the schedule (so a send() that waits delays the records
                      behind it in the figures too, not only their sending: no coordinated omission); the first
                      --warmup seconds are dropped; the paths take turns --rounds times, --seconds each
  failover            a producer sends one record at a time to an RF3 partition; between two sends its leader is
                      SIGKILLed: time from the kill to the ack of the next send (retried until the controller has
                      elected a new leader, after the node session timeout); the node is restarted and back in the
                      ISR before the next of --failovers rounds. Then the same with SIGTERM, a rolling restart's
                      stop: the node's controlled shutdown hands the leadership over before it exits, with no
                      session timeout. Single-node peer: the coordinator service SIGKILLed and restarted at once on
                      its port and directory (as a supervisor would).

Consume from a follower: the RF 3 topics read again by a consumer in node 1's rack (client_rack, KIP-392), which
reads the partitions node 1 follows from node 1.
"""
from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from contextlib import ExitStack
from typing import Any, Callable

import numpy as np
import psutil
import pyarrow as pa

import fabric
from bench.latency_turns import MIN_ISR, PAD, SETTLE_S, Path, latency_turn, summary
from bench.log_bench import VALUE_BYTES, make_values
from bench.report import bar_chart, cpu_seconds, latency_plot, progress, run_suite, table, timed
from fabric.common.config import PRODUCER_SETTINGS
from fabric.common.waiting import wait_for
from fabric.server.launcher import CoordinatorProcess
from fabric.server.local_cluster import LocalCluster, node_racks

NODES = 3
RATIO_GOAL, KREPS_2014 = 0.6, 0.51  # RF3 acks=all over RF1 acks=1: the goal and Kafka's 2014 figure
SERVER_CPU_GOAL_US = 0.6  # the servers' CPU per replicated record: the issue's goal
E2E_P99_GOAL_MS, PRODUCE_P99_GOAL_MS = 5.0, 5.0  # at 1,000 records/s: the goal 4 for both p99s
FOLLOWER_RACK = "rack-1"  # node 1's: a consumer there reads the partitions node 1 follows from node 1 (KIP-392)


def paths(stack: ExitStack, cluster_url: str, service_url: str, directory: str) -> list[Path]:
    """The four paths, the cluster's first; their connections are closed with `stack`."""
    embedded_url = os.path.join(directory, "embedded")
    cluster = stack.enter_context(fabric.connect(cluster_url))
    service = stack.enter_context(fabric.connect(service_url))
    embedded = stack.enter_context(fabric.connect(embedded_url))
    return [
        Path("rf3", f"cluster, RF {NODES}, acks=all, min.insync.replicas={MIN_ISR}", cluster, "all", NODES,
             cluster_url),
        Path("rf1", "cluster, RF 1, acks=1", cluster, "1", 1, cluster_url),
        Path("service", "single node: coordinator service alone (fabric://)", service, "all", url=service_url),
        Path("file", "single node: embedded (file://, in process)", embedded, "all", url=embedded_url),
    ]


# -- throughput ---------------------------------------------------------------------------------------------
def spread(records: int, partitions: int) -> pa.Table:
    """`records` random 100-byte values with a partition column dealing them round robin over `partitions`."""
    values = make_values(records)
    return values.append_column("partition", pa.array(np.arange(records) % partitions, pa.int32()))


def best_of(what: str, runs: dict[str, Callable[[], int]], repeats: int) -> dict[str, dict[str, float]]:
    """Each run (returning the records it moved) once to warm up, then `repeats` times taking turns; per path
    the best run's records/s, MB/s and CPU microseconds per record (this process and every server; and the
    servers' alone)."""
    for key, run in runs.items():
        with timed(f"{what}, {key}, warm-up"):
            run()
    best: dict[str, dict[str, float]] = {}
    for r in range(repeats):
        for key, run in runs.items():
            with timed(f"{what}, {key}, run {r + 1} of {repeats}") as t:
                records = run()
            rps = records / t["seconds"]
            if rps > best.get(key, {}).get("records_per_s", 0):
                best[key] = {"records_per_s": rps, "mb_per_s": rps * VALUE_BYTES / 1e6,
                             "cpu_us_per_record": t["cpu"] / records * 1e6,
                             "servers_cpu_us_per_record": (t["cpu"] - t["own_cpu"]) / records * 1e6}
    return best


def throughput(all_paths: list[Path], records: int, partitions: int, repeats: int) -> dict[str, Any]:
    """Produce, then consume, `records` records on each path (best of `repeats`)."""
    data = spread(records, partitions)
    topics = {p.key: p.create_topic(f"tput-{p.key}", partitions) for p in all_paths}

    def produce(path: Path, in_flight: int = PRODUCER_SETTINGS["max_in_flight_requests_per_connection"].default
                ) -> Callable[[], int]:
        def run() -> int:
            with path.fab.producer(acks=path.acks, max_in_flight_requests_per_connection=in_flight) as producer:
                producer.send_batch(topics[path.key], data)
            return records
        return run

    def consume(path: Path, rack: str = "") -> Callable[[], int]:
        def run() -> int:
            with path.fab.consumer(auto_offset_reset="earliest", client_rack=rack) as consumer:
                consumer.assign([(topics[path.key], p) for p in range(partitions)])
                got = 0
                while got < records:
                    got += consumer.poll_batch(SETTLE_S).num_rows
            return got
        return run

    rf3 = all_paths[0]
    cluster = all_paths[:2]  # the peer of pipelining: one append per partition in flight
    return {"produce": best_of("produce", {p.key: produce(p) for p in all_paths}, repeats),
            "produce_one_in_flight": best_of("produce, one append per partition in flight",
                                             {p.key: produce(p, 1) for p in cluster}, repeats),
            "consume": best_of("consume", {p.key: consume(p) for p in all_paths}, repeats),
            "consume_from_follower": best_of(f"consume with client_rack={FOLLOWER_RACK}",
                                             {rf3.key: consume(rf3, FOLLOWER_RACK)}, repeats)[rf3.key]}


# -- latency ------------------------------------------------------------------------------------------------
def latency(all_paths: list[Path], rate: float, warmup_s: float, seconds: float, rounds: int, topic: str = "latency",
            apart: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, dict[str, list[float]]]]:
    """latency_turn on every path (to a topic `topic`-<path> of one partition), taking turns `rounds` times (so a
    burst of load from other tenants of the machine falls on all of them), and on the paths keyed in `apart` again
    with the consumer in a process of its own (their results keyed <path>-apart); per path the summaries, and the
    raw latencies for the plots."""
    topics = {p.key: p.create_topic(f"{topic}-{p.key}", 1) for p in all_paths}
    turns = [(p, False) for p in all_paths] + [(p, True) for p in all_paths if p.key in apart]
    raw: dict[str, dict[str, list[float]]] = {_turn_key(p, a): {"produce": [], "end_to_end": []} for p, a in turns}
    for r in range(rounds):
        for path, consumer_apart in turns:
            key = _turn_key(path, consumer_apart)
            with timed(f"latency, {key}, round {r + 1} of {rounds}: {rate:g} records/s for "
                       f"{warmup_s:g} + {seconds:g} s"):
                turn = latency_turn(path, topics[path.key], rate, warmup_s, seconds, consumer_apart)
            for kind, values in turn.items():
                raw[key][kind] += values
            progress(f"  produce p99 {summary(turn['produce'])['p99_ms']:.2f} ms, "
                     f"end to end p99 {summary(turn['end_to_end'])['p99_ms']:.2f} ms")
    return {key: {kind: summary(values) for kind, values in kinds.items()} for key, kinds in raw.items()}, raw


def _turn_key(path: Path, apart: bool) -> str:
    return f"{path.key}-apart" if apart else path.key


# -- failover -----------------------------------------------------------------------------------------------
def acked_after(fab: fabric.Fabric, topic: str, kill: Callable[[], None],
                moved: Callable[[], bool] = lambda: True) -> float:
    """Seconds from kill() (called between two sends) to the first ack once the leadership `moved()`: the producer
    retries each send (every retry_backoff_ms) until the partition has a leader again, and sends again while the
    old leader still acks (a SIGTERMed node serves until its controlled shutdown has handed the leadership over)."""
    with fab.producer(acks="all", linger_ms=0) as producer:
        for _ in range(10):  # the producer is warm and the partition's leader known before the kill
            producer.send(topic, PAD).result(SETTLE_S)
        killed = time.perf_counter()
        kill()
        while True:
            producer.send(topic, PAD).result(SETTLE_S + 60)
            if moved() or time.perf_counter() - killed > SETTLE_S:
                return time.perf_counter() - killed


def kill_leader(cluster: LocalCluster, fab: fabric.Fabric, topic: str, sig: signal.Signals) -> float:
    """acked_after `sig` (SIGKILL, or SIGTERM: a controlled shutdown) to the leader of `topic`-0, sent without
    waiting for the process to exit; then the node is restarted and waited for until it is back in the ISR."""
    leader = wait_for(lambda: fab.describe_topic(topic).partitions[0].leader, SETTLE_S, "a leader")
    assert leader is not None  # wait_for returns a truthy value
    process = cluster.nodes[leader].process
    assert process is not None
    seconds = acked_after(fab, topic, lambda: process.send_signal(sig),
                          lambda: fab.describe_topic(topic).partitions[0].leader != leader)
    moved = fab.describe_topic(topic).partitions[0]
    if moved.leader == leader:
        raise RuntimeError(f"{topic}-0 was acknowledged with node {leader} still its leader after its {sig.name}")
    progress(f"  node {leader} sent {sig.name}: first ack {seconds:.3f} s later, on node {moved.leader} (leader "
             f"epoch {moved.leader_epoch}); restarting node {leader}")
    cluster.restart(leader)
    wait_for(lambda: leader in fab.describe_topic(topic).partitions[0].isr, SETTLE_S,
             f"node {leader} back in the ISR of {topic}-0")
    return seconds


def rounds_of(what: str, rounds: int, once: Callable[[], float]) -> list[float]:
    """once()'s seconds, `rounds` times, each round timed and shown as `what`."""
    out = []
    for r in range(rounds):
        with timed(f"{what}, round {r + 1} of {rounds}"):
            out.append(once())
    return out


def failover_cluster(cluster: LocalCluster, path: Path, rounds: int, sig: signal.Signals) -> list[float]:
    """kill_leader with `sig` on an RF3 partition of `path`, `rounds` times."""
    topic = path.create_topic(f"failover-{sig.name.lower()}", 1)
    return rounds_of(f"failover: {sig.name} of the leader of {topic}-0", rounds,
                     lambda: kill_leader(cluster, path.fab, topic, sig))


def supervised_restart(service: CoordinatorProcess, fab: fabric.Fabric, topic: str) -> float:
    """acked_after the SIGKILL of the coordinator `service`, which another thread starts again at once on its
    port and directory (as a supervisor would, while the producer retries)."""
    failed: list[BaseException] = []

    def start() -> None:
        try:
            service.start()
        except BaseException as exc:  # noqa: BLE001 (raised again below)
            failed.append(exc)
    restart = threading.Thread(target=start, daemon=True)

    def kill_and_restart() -> None:
        service.kill()
        restart.start()
    try:
        seconds = acked_after(fab, topic, kill_and_restart)
    finally:
        restart.join(SETTLE_S)
        if failed:
            raise RuntimeError(f"the coordinator service did not start again: {failed[0]}")
    return seconds


def failover_single(service: CoordinatorProcess, path: Path, rounds: int) -> list[float]:
    """supervised_restart of the coordinator service of `path`, `rounds` times."""
    topic = path.create_topic("failover", 1)
    return rounds_of("single-node restart: SIGKILL of the coordinator service", rounds,
                     lambda: supervised_restart(service, path.fab, topic))


# -- the run ------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace, directory: str) -> tuple[dict[str, Any], dict[str, dict[str, list[float]]]]:
    """Start the cluster and the single-node service, measure, stop them (also on Ctrl-C or an error); the
    results, and the raw latencies for the plots."""
    load_before = os.getloadavg()
    with ExitStack() as stack:
        with timed(f"starting a coordinator and {NODES} data nodes, and a coordinator service alone"):
            cluster = stack.enter_context(LocalCluster(os.path.join(directory, "cluster"), NODES,
                                                       args.session_timeout_ms, args.heartbeat_ms,
                                                       racks=node_racks(NODES)))
            service = CoordinatorProcess(os.path.join(directory, "service"))
            stack.callback(service.stop)
            service.start()
        all_paths = paths(stack, cluster.url, service.url(), directory)
        moved = throughput(all_paths, args.records, args.partitions, args.repeats)
        lat, raw = latency(all_paths, args.rate, args.warmup, args.seconds, args.rounds, apart=("rf3",))
        failover: dict[str, Any] = {
            "cluster_s": failover_cluster(cluster, all_paths[0], args.failovers, signal.SIGKILL),
            "cluster_sigterm_s": failover_cluster(cluster, all_paths[0], args.failovers, signal.SIGTERM),
            "single_node_restart_s": failover_single(service, all_paths[2], args.failovers)}
        idle = idle_latency(cluster, all_paths[0], args) if args.idle_partitions else {}
    failover |= {f"{k}_median_s": float(np.median(failover[f"{k}_s"]))
                 for k in ("cluster", "cluster_sigterm", "single_node_restart")}
    return {
        "records": args.records, "value_bytes": VALUE_BYTES, "partitions": args.partitions, "repeats": args.repeats,
        "nodes": NODES, "cpus": os.cpu_count(), "load_average_1m": [load_before[0], os.getloadavg()[0]],
        "paths": {p.key: p.label for p in all_paths},
        **moved,
        "produce_ratio": {"rf3_vs_rf1": moved["produce"]["rf3"]["records_per_s"] / moved["produce"]["rf1"][
            "records_per_s"], "goal": RATIO_GOAL, "kreps_2014": KREPS_2014},
        "vs_service": {kind: {key: out["records_per_s"] / moved[kind]["service"]["records_per_s"]
                              for key, out in moved[kind].items()} for kind in ("produce", "consume")},
        "follower_reads": {"client_rack": FOLLOWER_RACK, "from_followers": f"{args.partitions - 1} of "
                           f"{args.partitions} partitions (node 1 leads one)",
                           "vs_leaders": moved["consume_from_follower"]["records_per_s"]
                           / moved["consume"]["rf3"]["records_per_s"]},
        "latency": {"rate_per_s": args.rate, "warmup_s": args.warmup, "seconds": args.seconds, "rounds": args.rounds,
                    "goals_p99_ms": {"produce": PRODUCE_P99_GOAL_MS, "end_to_end": E2E_P99_GOAL_MS}, **lat},
        "failover": {"session_timeout_ms": args.session_timeout_ms, "heartbeat_interval_ms": args.heartbeat_ms,
                     "retry_backoff_ms": PRODUCER_SETTINGS["retry_backoff_ms"].default,
                     "goal_s": args.session_timeout_ms / 1000 + 1, **failover},
        "latency_beside_idle_partitions": idle,
    }, raw


def idle_latency(cluster: LocalCluster, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The latency turns of `path` again with a topic of args.idle_partitions partitions beside it, idle once one
    record was written to each with acks=all (so every follower copies them before the turns start): what idle
    partitions cost the replication of a busy one (each follower fetch names them all); and what they cost each
    server process with nothing written at all (its CPU over a latency turn's --seconds, before the topic and
    after)."""
    before = idle_cpu(cluster, args.seconds)
    with timed(f"creating a topic of {args.idle_partitions} partitions, one record written to each"):
        path.create_topic("idle", args.idle_partitions)
        with path.fab.producer(acks=path.acks) as producer:
            producer.send_batch("idle", pa.table({"value": [b"x"] * args.idle_partitions,
                                                  "partition": list(range(args.idle_partitions))}))
    after = idle_cpu(cluster, args.seconds)
    lat, _ = latency([path], args.rate, args.warmup, args.seconds, args.rounds, "latency-beside-idle")
    return {"partitions": args.idle_partitions, **lat[path.key],
            "idle_core_share": {"without": before, "with": after}}


def idle_cpu(cluster: LocalCluster, seconds: float) -> dict[str, float]:
    """Each server process's CPU (the coordinator's, each node's) as a share of one core over `seconds` in which
    nothing is sent: heartbeats, ISR upkeep and follower fetches alone."""
    processes = {"coordinator": cluster.coordinator.process, **{f"node {i}": node.process
                                                                for i, node in sorted(cluster.nodes.items())}}
    measured = {name: psutil.Process(process.pid) for name, process in processes.items() if process is not None}
    progress(f"  the servers' CPU with nothing sent, {seconds:g} s")
    start, began = {name: cpu_seconds(p) for name, p in measured.items()}, time.perf_counter()
    time.sleep(seconds)  # (a measurement window)
    wall = time.perf_counter() - began
    return {name: (cpu_seconds(p) - start[name]) / wall for name, p in measured.items()}


def report(results: dict[str, Any], raw: dict[str, dict[str, list[float]]]) -> None:
    """The plots (bench/results/cluster*.png) and the Markdown tables."""
    labels, lat, failover = results["paths"], results["latency"], results["failover"]
    kinds = ("produce", "consume")

    def moved(key: str) -> tuple[str, ...]:
        return tuple(f"{results[kind][key]['records_per_s']:,.0f}" for kind in kinds) + \
            tuple(f"{results[kind][key]['cpu_us_per_record']:.2f}" for kind in kinds) + \
            tuple(f"{results['vs_service'][kind][key]:.2f}" for kind in kinds)

    def delays(key: str) -> tuple[str, ...]:
        return tuple(f"{lat[key][kind][m]:.2f}" for kind in ("produce", "end_to_end")
                     for m in ("p50_ms", "p99_ms", "max_ms"))

    print(table([(labels[key], *moved(key)) for key in labels],
                ("path", "produce records/s", "consume records/s", "produce CPU µs/record", "consume CPU µs/record",
                 "produce vs service", "consume vs service")))
    ratio = results["produce_ratio"]
    print(f"\nproduce, RF {NODES} acks=all over RF 1 acks=1: {ratio['rf3_vs_rf1']:.2f} (goal >= {RATIO_GOAL}; "
          f"Kafka 2014: {KREPS_2014}).")
    print(f"produce, the servers' CPU per replicated record (RF {NODES}, every server process of the run): "
          f"{results['produce']['rf3']['servers_cpu_us_per_record']:.2f} µs (goal <= {SERVER_CPU_GOAL_US}); RF 1: "
          f"{results['produce']['rf1']['servers_cpu_us_per_record']:.2f} µs.")
    for key, alone in results["produce_one_in_flight"].items():
        print(f"produce, {labels[key]}: {results['produce'][key]['records_per_s'] / alone['records_per_s']:.2f}x "
              f"with max_in_flight_requests_per_connection="
              f"{PRODUCER_SETTINGS['max_in_flight_requests_per_connection'].default} over 1 "
              f"({alone['records_per_s']:,.0f} records/s)")
    follower = results["follower_reads"]
    print(f"consume RF {NODES} with client_rack={follower['client_rack']} ({follower['from_followers']} read from a "
          f"follower): {results['consume_from_follower']['records_per_s']:,.0f} records/s, "
          f"{follower['vs_leaders']:.2f}x the leaders'\n")
    print(table([(labels[key], *delays(key),
                  f"{lat[key]['end_to_end']['p99_ms'] / lat['service']['end_to_end']['p99_ms']:.2f}")
                 for key in labels],
                ("path", "produce p50 ms", "p99", "max", "end-to-end p50 ms", "p99", "max", "e2e p99 vs service")))
    apart = lat["rf3-apart"]
    print(f"{labels['rf3']}, the consumer in a process of its own: produce p50 / p99 "
          f"{apart['produce']['p50_ms']:.2f} / {apart['produce']['p99_ms']:.2f} ms, end to end p50 / p99 "
          f"{apart['end_to_end']['p50_ms']:.2f} / {apart['end_to_end']['p99_ms']:.2f} ms")
    print(f"\nlatency at {lat['rate_per_s']:g} records/s, {lat['rounds']} x {lat['seconds']:g} s after "
          f"{lat['warmup_s']:g} s of warm-up each; goals for p99: produce <= {PRODUCE_P99_GOAL_MS:g} ms, end to end "
          f"<= {E2E_P99_GOAL_MS:g} ms")
    idle = results["latency_beside_idle_partitions"]
    if idle:
        print(f"{labels['rf3']}, beside a topic of {idle['partitions']} idle partitions: produce p50 / p99 "
              f"{idle['produce']['p50_ms']:.2f} / {idle['produce']['p99_ms']:.2f} ms, end to end p99 "
              f"{idle['end_to_end']['p99_ms']:.2f} ms (without: {lat['rf3']['produce']['p50_ms']:.2f} / "
              f"{lat['rf3']['produce']['p99_ms']:.2f}, {lat['rf3']['end_to_end']['p99_ms']:.2f} ms)")
        shares = idle["idle_core_share"]
        print("the servers' CPU with nothing sent, share of a core, without / with them: " + ", ".join(
            f"{name} {shares['without'][name]:.1%} / {share:.1%}" for name, share in shares["with"].items()))
    print()
    print(table([("cluster: SIGKILL of an RF 3 leader", f"{failover['cluster_median_s']:.2f}",
                  ", ".join(f"{s:.2f}" for s in failover["cluster_s"]), str(failover["session_timeout_ms"]),
                  f"<= {failover['goal_s']:g}"),
                 ("cluster: SIGTERM of an RF 3 leader (controlled shutdown)",
                  f"{failover['cluster_sigterm_median_s']:.2f}",
                  ", ".join(f"{s:.2f}" for s in failover["cluster_sigterm_s"]), str(failover["session_timeout_ms"]),
                  ""),
                 ("single node: SIGKILL, restarted at once", f"{failover['single_node_restart_median_s']:.2f}",
                  ", ".join(f"{s:.2f}" for s in failover["single_node_restart_s"]), "", "")],
                ("failover", "median s", "each s", "node.session.timeout.ms", "goal s")))
    colors = {"cluster": "#4C72B0", "single": "#9A9A9A"}
    chart = bar_chart("cluster", f"{results['records']:,} x 100-byte records, {results['partitions']} partitions, "
                      f"one client, best of {results['repeats']}",
                      [(f"{kind}: {labels[key]}", results[kind][key]["records_per_s"]) for kind in kinds
                       for key in labels], "records/s",
                      [colors["cluster"] if key.startswith("rf") else colors["single"] for key in labels] * 2,
                      {colors["cluster"]: f"cluster ({NODES} nodes)", colors["single"]: "single node, same run"})
    series = {**labels, "rf3-apart": f"{labels['rf3']}, consumer in a process of its own"}
    plots = [latency_plot(f"cluster_latency_{kind}", f"{what} latency, {lat['rate_per_s']:g} records/s",
                          {series[key]: raw[key][kind] for key in series}, f"{what} latency")
             for kind, what in (("produce", "produce"), ("end_to_end", "end-to-end"))]
    progress(f"plots: {chart}, {', '.join(plots)}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options = (("--records", int, 500_000, "records per throughput run"),
               ("--partitions", int, 3, "partitions of the throughput topics"),
               ("--repeats", int, 3, "timed throughput runs per path (the best is kept)"),
               ("--rate", float, 1000.0, "latency: records sent per second"),
               ("--seconds", float, 3.0, "latency: seconds measured per turn"),
               ("--warmup", float, 1.0, "latency: seconds dropped at the start of each turn"),
               ("--rounds", int, 3, "latency: turns per path"),
               ("--failovers", int, 3, "leader SIGKILLs (and single-node restarts)"),
               ("--session-timeout-ms", int, 3000, "node.session.timeout.ms of the coordinator and nodes"),
               ("--heartbeat-ms", int, 300, "node.heartbeat.interval.ms"),
               ("--idle-partitions", int, 300, "latency: the RF 3 path again beside this many idle partitions "
                "(0: not)"))
    for flag, kind, default, text in options:
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default {default:g})")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    if min(args.records, args.partitions, args.repeats, args.rounds, args.failovers) < 1 or \
            args.rate * args.seconds < 1 or args.warmup < 0 or args.idle_partitions < 0:
        parser.error("sizes and counts must be positive, --rate x --seconds at least one record, --warmup and "
                     "--idle-partitions >= 0")
    return run_suite("cluster", args, run, report)


if __name__ == "__main__":
    main()
