"""`make bench` keeps working: each benchmark suite runs end to end on a few records (its figures and plots in a
temp dir, not bench/results/) and reports the figures the README quotes. Speed itself is never asserted."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fabric.spark import jar

SUITES = [
    ("bench.log_bench", ["--records", "20000", "--send-records", "2000"], "log", "produce_vs_ipc_write"),
    ("bench.request_bench", ["--requests", "20", "--zookeeper", "--held", "4", "--held-seconds", "0.5"], "requests",
     "held_fetches"),
    ("bench.append_bench", ["--records", "200", "--rounds", "1", "--rate", "100", "--seconds", "0.5", "--warmup",
                            "0.1"], "append", "send_get"),
    ("bench.coordinator_bench", ["--rounds", "1", "--members", "4"], "coordinator", "rebalance"),
    ("bench.offsets_bench", ["--seconds", "0.3", "--nodes", "1", "--clients", "3", "--instances", "2",
                            "--sustained", "240"], "offsets",
     "vs_znodes"),
    ("bench.spark_bench", ["--records", "4000", "--repeats", "0", "--seconds", "2", "--rate", "20"], "spark",
     "vs_peer"),
]
CLUSTER_PATHS = {"rf3", "rf1", "service", "file"}


def run_suite(repo_root, tmp_path, module: str, args: list[str], name: str) -> dict:
    """Run `python -m module args` with its results under tmp_path; the results JSON (a plot was written too)."""
    env = {**os.environ, "FABRIC_BENCH_RESULTS": str(tmp_path / "results")}
    done = subprocess.run([sys.executable, "-m", module, *args, "--dir", str(tmp_path / "scratch")], cwd=repo_root,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(p.endswith(".png") for p in os.listdir(tmp_path / "results"))
    with open(tmp_path / "results" / f"{name}.json") as f:
        return json.load(f)


@pytest.mark.parametrize("module, args, name, key", SUITES, ids=[s[2] for s in SUITES])
def test_benchmark_suite_runs_and_reports(repo_root, tmp_path, module, args, name, key) -> None:
    results = run_suite(repo_root, tmp_path, module, args, name)
    assert results[key], results


def test_cluster_benchmark_reports_every_path_and_failover(repo_root, tmp_path) -> None:
    results = run_suite(repo_root, tmp_path, "bench.cluster_bench", [
        "--records", "2000", "--partitions", "2", "--repeats", "1", "--rate", "100", "--seconds", "0.5",
        "--warmup", "0.1", "--rounds", "1", "--failovers", "1", "--idle-partitions", "4"], "cluster")
    for kind in ("produce", "consume"):
        assert set(results[kind]) == CLUSTER_PATHS
        assert all(out["records_per_s"] > 0 for out in results[kind].values()), results[kind]
    assert results["produce_ratio"]["rf3_vs_rf1"] > 0
    assert set(results["produce_one_in_flight"]) == {"rf3", "rf1"}  # the peer of pipelining
    assert all(out["records_per_s"] > 0 for out in results["produce_one_in_flight"].values())
    for key in (*CLUSTER_PATHS, "rf3-apart"):  # (rf3 again with the consumer in a process of its own)
        for kind in ("produce", "end_to_end"):
            figures = results["latency"][key][kind]
            assert figures["records"] == 50 and 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    failover = results["failover"]
    assert failover["session_timeout_ms"] == 3000 and failover["goal_s"] == 4
    rounds = ("cluster", "cluster_sigterm", "single_node_restart")
    assert [len(failover[f"{k}_s"]) for k in rounds] == [1, 1, 1]
    assert all(failover[f"{k}_median_s"] > 0 for k in rounds)
    assert results["consume_from_follower"]["records_per_s"] > 0 and results["follower_reads"]["vs_leaders"] > 0
    idle = results["latency_beside_idle_partitions"]
    assert idle["partitions"] == 4 and idle["produce"]["records"] == 50 and idle["end_to_end"]["p99_ms"] > 0
    shares = idle["idle_core_share"]
    assert set(shares["without"]) == set(shares["with"]) == {"coordinator", "node 1", "node 2", "node 3"}
    assert all(0 <= share < 16 for kind in shares.values() for share in kind.values())


def test_latency_trace_follows_every_acks_all_write_through_every_process(repo_root, tmp_path) -> None:
    results = run_suite(repo_root, tmp_path, "bench.latency_trace", ["--records", "20", "--rate", "50", "--warmup",
                                                                     "3"], "latency_trace")
    assert results["writes"] == results["traced"] == 20, results  # every step of every write found in the trace
    steps = results["steps"]
    assert list(steps) == ["send", "request", "produce_read", "produce_received", "append_started", "leader_append",
                           "fetch_answered", "fetch_received", "follower_append", "next_fetch", "high_watermark",
                           "produce_answered", "ack"]
    medians = [figures["since_send_p50_ms"] for figures in steps.values()]
    assert medians == sorted(medians) and medians[-1] > 0, steps  # each step after the one ahead of it
    assert all(0 <= f["delta_p50_ms"] <= f["delta_p99_ms"] for f in steps.values()), steps


def test_spark_cluster_benchmark_reports_every_path_goal_and_latency(repo_root, tmp_path) -> None:
    results = run_suite(repo_root, tmp_path, "bench.spark_cluster_bench", [
        "--records", "2000", "--repeats", "0", "--rate", "20", "--seconds", "1", "--realtime-rate", "50",
        "--realtime-batch", "5 seconds"], "spark_cluster")
    paths = results["paths"]
    for where in ("parquet", "file", "cluster"):
        for path in (f"{where}_value_to_noop", f"{where}_record_to_noop", f"parquet_to_{where}_batch",
                     f"parquet_to_{where}_stream"):
            assert paths[path]["rows_per_s"] > 0 and paths[path]["cpu_s"] > 0, path
    assert all(paths[f"{kind}_{where}"]["rows_per_s"] > 0 for kind in ("consume", "produce")
               for where in ("file", "cluster"))
    assert set(results["goals"]) == {"cluster_value_to_noop", "cluster_record_to_noop", "parquet_to_cluster_batch",
                                     "parquet_to_cluster_stream"}
    assert all(goal["vs_file"] > 0 and isinstance(goal["met"], bool) for goal in results["goals"].values())
    if jar.path() is not None:  # the JVM reader was built: its two reads, against parquet and format("fabric")
        jvm = results["jvm_reader"]["ratios"]
        assert set(jvm) == {"jvm_value_to_noop", "jvm_record_to_noop"}
        assert all(r["vs_parquet"] > 0 and r["vs_python"] > 0 for r in jvm.values())
        for mode in ("micro_batch", "real_time"):  # and the latency through real-time mode beside micro-batches
            figures = results["real_time"][mode]
            assert figures["records"] == 50 and 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
    assert results["cluster"]["replication_factor"] == 3 and results["cluster"]["min_insync_replicas"] == 2
    for where in ("cluster", "file"):
        figures = results["latency"][where]
        assert figures["records"] == 20 and 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]


@pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")
def test_locality_benchmark_reports_where_each_readers_tasks_ran(repo_root, tmp_path) -> None:
    """A Spark standalone cluster whose workers are on two of the three nodes' loopback hosts: every task of both
    readers is counted, with its locality level, against where its partition's replica is."""
    results = run_suite(repo_root, tmp_path, "bench.locality_bench", ["--records", "600", "--repeats", "1"],
                        "locality")
    assert results["worker_hosts"] == results["node_hosts"][:2]
    for reader in ("jvm", "python"):
        figures = results["readers"][reader]
        assert figures["tasks"] == 6 and 0 <= figures["on_replica_host"] <= figures["tasks"]
        assert sum(figures["locality_levels"].values()) == 6 and figures["seconds_per_read"] > 0
