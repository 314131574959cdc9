"""`make bench` keeps working: each benchmark suite runs end to end on a few records (its figures and plots in a
temp dir, not bench/results/) and reports the figures the README quotes. Speed itself is never asserted."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SUITES = [
    ("bench.log_bench", ["--records", "20000", "--send-records", "2000"], "log", "produce_vs_ipc_write"),
    ("bench.coordinator_bench", ["--seconds", "0.3", "--rounds", "1"], "coordinator", "rebalance"),
    ("bench.spark_bench", ["--records", "4000", "--repeats", "1", "--seconds", "2", "--rate", "20"], "spark",
     "vs_peer"),
]


@pytest.mark.parametrize("module, args, name, key", SUITES, ids=[s[2] for s in SUITES])
def test_benchmark_suite_runs_and_reports(repo_root, tmp_path, module, args, name, key) -> None:
    env = {**os.environ, "FABRIC_BENCH_RESULTS": str(tmp_path / "results")}
    done = subprocess.run([sys.executable, "-m", module, *args, "--dir", str(tmp_path / "scratch")], cwd=repo_root,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "results" / f"{name}.json") as f:
        results = json.load(f)
    assert results[key], results
    assert any(p.endswith(".png") for p in os.listdir(tmp_path / "results"))
