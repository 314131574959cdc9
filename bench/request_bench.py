"""Request path benchmark: what one small request costs, per transport, in one run.

Transports (bench.echo_servers, a process of its own): an echo of a 40-byte request over a unary Flight DoAction
(the baseline: one gRPC call per request, as every coordinator call was), one Flight DoExchange stream, and the
fabric protocol (docs/protocol.md) on uvloop and on asyncio's own loop.

Service requests: a coordinator service process (SQLite store) answering, over the fabric protocol and over
Flight, an offset commit (one partition), a one-record produce (acks=1), a one-record fetch, a topic metadata read
and (protocol only) a bare echo; with --zookeeper, the same of a service over ZooKeeper (a server of this run,
pyspark's jar) too, its cases named `zookeeper <transport>/<request>`.

Held fetches (--held, a service over SQLite): that many idle consumers' long polls, each a fetch at the end of a
partition of its own held for max_wait_ms 500 (Kafka's fetch.max.wait.ms) and asked again as it ends, for
--held-seconds: the service's CPU as a share of one core and per held fetch and second (what idle consumers cost
it).

Each case runs --requests requests one after another from this process and reports the server's CPU microseconds
per request (its process's CPU over the run, less what it burns idle), this process's CPU per request, wall p50
and p99, and the server CPU as a multiple of the bare DoAction's (`vs_action`, the issue's goal: at most 0.25 for
the service's small requests). --profile samples the coordinator with py-spy during each service case and keeps
its top frames (the innermost function of each sample, by share of samples).
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.flight as flight

import fabric
from bench.report import bar_chart, cpu_seconds, progress, run_suite, table
from fabric.client.remote import RemoteCluster
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.records import to_storage
from fabric.common.waiting import wait_for
from fabric.server.launcher import CoordinatorProcess
from fabric.server.zookeeper import ZooKeeperServer

TOPIC, GROUP, HELD_TOPIC = "bench-requests", "bench-requests", "bench-held"
HELD_WAIT_MS = 500  # a held fetch's max_wait_ms: Kafka's fetch.max.wait.ms
RECORDS = 100  # in TOPIC: the offsets committed and fetched cycle through them
BODY = {"pad": "x" * 30}  # with its envelope, a request of about 40 bytes
IDLE_S = 1.0


class Server:
    """A server process whose CPU is measured: psutil's view of it, and the CPU seconds it burns idle per second
    (timers, heartbeats), taken out of each case."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        start = self.cpu()
        time.sleep(IDLE_S)
        self.idle_per_s = (self.cpu() - start) / IDLE_S

    def cpu(self) -> float:
        return cpu_seconds(self.process)


def measure(server: Server, request: Callable[[int], Any], requests: int) -> dict[str, float]:
    """`requests` requests one after another (after a tenth as many to warm up): CPU and wall figures."""
    for i in range(max(requests // 10, 10)):
        request(i)
    latencies = np.empty(requests)
    server_start, client_start, wall_start = server.cpu(), time.process_time(), time.perf_counter()
    for i in range(requests):
        begin = time.perf_counter()
        request(i)
        latencies[i] = time.perf_counter() - begin
    wall = time.perf_counter() - wall_start
    server_cpu = max(server.cpu() - server_start - server.idle_per_s * wall, 0.0)
    return {"server_cpu_us": server_cpu / requests * 1e6,
            "client_cpu_us": (time.process_time() - client_start) / requests * 1e6,
            "p50_us": float(np.percentile(latencies, 50) * 1e6), "p99_us": float(np.percentile(latencies, 99) * 1e6),
            "requests_per_s": requests / wall}


# -- transports ------------------------------------------------------------------------------------------------
def transport_cases(requests: int) -> dict[str, dict[str, float]]:
    """The echo over each transport, against bench.echo_servers."""
    echo = subprocess.Popen([sys.executable, "-m", "bench.echo_servers"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout is not None
        ports = json.loads(echo.stdout.readline())
        server = Server(echo.pid)
        client = flight.connect(f"grpc+tcp://127.0.0.1:{ports['flight']}")
        body = json.dumps(BODY).encode()
        def action(i: int) -> None:
            next(iter(client.do_action(flight.Action("echo", body))))
        out = {"flight-action": measure(server, action, requests)}
        writer, reader = client.do_exchange(flight.FlightDescriptor.for_command(b"echo"))
        buffer = pa.py_buffer(body)

        def exchange(i: int) -> None:
            writer.write_metadata(buffer)
            reader.read_chunk()
        out["flight-exchange"] = measure(server, exchange, requests)
        writer.close()
        for name in ("protocol", "protocol-asyncio"):
            connection = ProtocolConnection(f"127.0.0.1:{ports[name]}", None, None, 10.0, lambda info: None)
            out[name] = measure(server, functools.partial(echo_over, connection), requests)
            connection.close()
        client.close()
        return out
    finally:
        if echo.stdin is not None:
            echo.stdin.close()
        echo.wait(10)


def echo_over(connection: ProtocolConnection, number: int) -> None:
    connection.call("echo", BODY)


# -- service requests ------------------------------------------------------------------------------------------
def service_requests(cluster: RemoteCluster) -> dict[str, Callable[[int], Any]]:
    """The small requests, each as a function of the request's number."""
    rows = to_storage(pa.table({"value": [b"v" * 40]}), None, 0).to_batches()[0]
    return {
        "commit": lambda i: cluster.coordinator.commit_offsets(GROUP, {(TOPIC, 0): i % RECORDS}),
        "produce": lambda i: cluster.append(TOPIC, 0, rows, acks="1"),
        "fetch": lambda i: cluster.fetch(TOPIC, 0, i % RECORDS, 1 << 20, end_offset=i % RECORDS + 1),
        "metadata": lambda i: cluster.coordinator.topic(TOPIC),
        "echo": lambda i: cluster.protocol.coordinator("echo", BODY),
    }


def held_fetches(fab: fabric.Fabric, server: Server, cluster: RemoteCluster, count: int, seconds: float
                 ) -> dict[str, float]:
    """`count` idle consumers' long polls (module doc) for `seconds`: the server's CPU (less what it burns idle) as
    a share of a core and per held fetch and second, and the fetches asked per second."""
    fab.create_topic(HELD_TOPIC, partitions=count)
    stop, asked = threading.Event(), [0] * count

    def consumer(partition: int) -> None:
        while not stop.is_set():
            cluster.fetch(HELD_TOPIC, partition, 0, 1 << 20, max_wait_ms=HELD_WAIT_MS)
            asked[partition] += 1
    threads = [threading.Thread(target=consumer, args=(p,), daemon=True) for p in range(count)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: all(asked), 60, "every held fetch to be answered once")
        server_start, wall_start, asked_start = server.cpu(), time.perf_counter(), sum(asked)
        stop.wait(seconds)
        wall = time.perf_counter() - wall_start
        cpu = max(server.cpu() - server_start - server.idle_per_s * wall, 0.0)
        asked_end = sum(asked)
    finally:
        stop.set()
        for thread in threads:
            thread.join(HELD_WAIT_MS / 1000 + 30)
    return {"fetches": count, "seconds": wall, "core_share": cpu / wall, "us_per_fetch_s": cpu / wall / count * 1e6,
            "asked_per_s": (asked_end - asked_start) / wall}


def service_cases(directory: str, requests: int, profile: bool, store: str | None = None, label: str = "",
                  held: int = 0, held_s: float = 0.0
                  ) -> tuple[dict[str, dict[str, float]], dict[str, list[tuple[str, float]]], dict[str, float]]:
    """Each small request over the fabric protocol and over Flight, against a coordinator service process (its
    metadata in `store`, default SQLite; its cases' names start with `label`); with `profile`, its top frames in
    each case; then `held` idle consumers' long polls for `held_s` (held_fetches; none if 0)."""
    out: dict[str, dict[str, float]] = {}
    frames: dict[str, list[tuple[str, float]]] = {}
    idle: dict[str, float] = {}
    coordinator = CoordinatorProcess(os.path.join(directory, f"{label}coordinator"), store=store).start()
    try:
        with fabric.connect(coordinator.url()) as fab:
            fab.create_topic(TOPIC, partitions=1)
            with fab.producer(linger_ms=0) as producer:
                for i in range(RECORDS):
                    producer.send(TOPIC, value=b"%d" % i, partition=0)
            assert coordinator.process is not None and isinstance(fab.cluster, RemoteCluster)
            server, cluster = Server(coordinator.process.pid), fab.cluster
            for transport in ("protocol", "flight"):
                cluster.protocol.enabled = transport == "protocol"
                for name, request in service_requests(cluster).items():
                    if name == "echo" and transport == "flight":
                        continue
                    key = f"{label}{transport}/{name}"
                    progress(f"  {key}")
                    sampler = py_spy(server.process.pid, os.path.join(directory, f"{transport}-{name}.txt")
                                     ) if profile else None
                    out[key] = measure(server, request, requests)
                    if sampler is not None:
                        frames[key] = top_frames(*sampler)
            if held:
                progress(f"  {label}protocol/{held} held fetches")
                cluster.protocol.enabled = True
                idle = held_fetches(fab, server, cluster, held, held_s)
    finally:
        coordinator.stop()
    return out, frames, idle


def py_spy(pid: int, path: str) -> tuple[subprocess.Popen, str]:
    """py-spy sampling `pid` into `path` (raw collapsed stacks) until stopped."""
    executable = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    process = subprocess.Popen([executable, "record", "--pid", str(pid), "--rate", "500", "--gil", "--format", "raw",
                                "--nonblocking", "--output", path], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # attached
    return process, path


def top_frames(process: subprocess.Popen, path: str, count: int = 8) -> list[tuple[str, float]]:
    """Stop the sampler; the innermost frames of its samples by share (py-spy's raw format: `stack count`)."""
    process.send_signal(2)
    process.wait(30)
    leaves: collections.Counter[str] = collections.Counter()
    if os.path.exists(path):
        with open(path) as lines:
            for line in lines:
                stack, _, samples = line.rstrip().rpartition(" ")
                if stack and samples.isdigit():
                    leaves[stack.split(";")[-1]] += int(samples)
    total = sum(leaves.values()) or 1
    return [(frame, count_ / total) for frame, count_ in leaves.most_common(count)]


# -- suite -----------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace, directory: str) -> tuple[dict, Any]:
    progress("== echo over each transport")
    transports = transport_cases(args.requests)
    progress("== small requests to a coordinator service")
    service, frames, held = service_cases(directory, args.requests, args.profile, held=args.held,
                                          held_s=args.held_seconds)
    if args.zookeeper:
        progress("== small requests to a coordinator service over ZooKeeper")
        zookeeper = ZooKeeperServer(root=os.path.join(directory, "zk")).start()
        try:
            over_zk, zk_frames, _ = service_cases(directory, args.requests, args.profile, zookeeper.url("/service"),
                                                  "zookeeper ")
        finally:
            zookeeper.close()
        service.update(over_zk)
        frames.update(zk_frames)
    baseline = transports["flight-action"]["server_cpu_us"]
    for figures in (*transports.values(), *service.values()):
        # a short run can measure no server CPU at all (the clock ticks in 10 ms): then there is no ratio
        figures["vs_action"] = figures["server_cpu_us"] / baseline if baseline > 0 else float("nan")
    results = {"date": time.strftime("%Y-%m-%d"), "requests": args.requests, "cores": psutil.cpu_count(),
               "transports": transports, "service": service, "profile": frames, "held_fetches": held,
               "vs_action": {k: v["vs_action"] for k, v in service.items()}}
    return results, None


def report(results: dict, raw: Any) -> None:
    rows = [(f"echo over {name}", *_figures(figures)) for name, figures in results["transports"].items()]
    rows += [(name, *_figures(figures)) for name, figures in results["service"].items()]
    print(table(rows, ("request", "server CPU µs", "× DoAction", "client CPU µs", "wall p50 µs", "wall p99 µs")))
    held = results["held_fetches"]
    if held:
        print(f"\n{held['fetches']} idle consumers' fetches held (max_wait_ms {HELD_WAIT_MS}, "
              f"{held['asked_per_s']:.0f} asked a second) for {held['seconds']:.1f} s: the service spends "
              f"{held['core_share']:.1%} of a core, {held['us_per_fetch_s']:.0f} µs per held fetch and second")
    for case, frames in results["profile"].items():
        print(f"\n{case}: " + "; ".join(f"{share:.0%} {frame}" for frame, share in frames))
    bar_chart("requests", f"Server CPU per request, µs ({results['date']}, {results['cores']} cores)",
              [(name, figures["server_cpu_us"]) for name, figures in
               [*results["transports"].items(), *results["service"].items()]], "server CPU µs per request")


def _figures(figures: dict[str, float]) -> tuple[str, ...]:
    return (f"{figures['server_cpu_us']:.0f}", f"{figures['vs_action']:.2f}", f"{figures['client_cpu_us']:.0f}",
            f"{figures['p50_us']:.0f}", f"{figures['p99_us']:.0f}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=5000, help="requests per case")
    parser.add_argument("--profile", action="store_true", help="sample the coordinator with py-spy in each case")
    parser.add_argument("--zookeeper", action="store_true",
                        help="also a coordinator service over ZooKeeper (needs Java)")
    parser.add_argument("--held", type=int, default=200, help="idle consumers' held fetches (0: none; default 200)")
    parser.add_argument("--held-seconds", type=float, default=5.0, help="how long they are measured (default 5)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    if args.requests < 10:
        parser.error("--requests must be at least 10")
    if args.held < 0 or args.held_seconds <= 0:
        parser.error("--held must be 0 or more and --held-seconds positive")
    return run_suite("requests", args, run, report)


if __name__ == "__main__":
    main()
