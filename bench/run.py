"""`make bench`: every benchmark in turn; figures land in bench/results/ (JSON and PNG plots)."""
from __future__ import annotations

import importlib

from bench.report import progress

SUITES = ["bench.log_bench", "bench.append_bench", "bench.request_bench", "bench.coordinator_bench",
          "bench.offsets_bench", "bench.cluster_bench", "bench.latency_trace",
          "bench.spark_bench", "bench.spark_cluster_bench", "bench.locality_bench"]


def main() -> None:
    for name in SUITES:
        progress(f"== {name}")
        importlib.import_module(name).main([])  # each suite's defaults; run one with its own options via -m


if __name__ == "__main__":
    main()
