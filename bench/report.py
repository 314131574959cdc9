"""Shared benchmark plumbing: progress lines, timing, results JSON and bar-chart plots."""
from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import psutil

# bench/results/, or $FABRIC_BENCH_RESULTS (the benchmarks' smoke test keeps its figures out of the checkout)
RESULTS_DIR = os.environ.get("FABRIC_BENCH_RESULTS") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                      "results")


COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")  # one per series of a plot


def progress(message: str) -> None:
    """One progress line on stderr, so long runs show where they are."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds (user + system) `process` used so far."""
    times = process.cpu_times()
    return times.user + times.system


def tree_cpu() -> dict[tuple[int, float], float]:
    """CPU seconds (user + system) used so far by this process and each of its live descendants (Spark's JVM and
    its Python workers, the servers a benchmark started), by (pid, start time): steadier than wall time on a
    shared machine, whose other tenants stretch it."""
    usage = {}
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            usage[(proc.pid, proc.create_time())] = cpu_seconds(proc)
        except psutil.Error:  # ended meanwhile
            continue
    return usage


def tree_cpu_since(before: dict[tuple[int, float], float]) -> float:
    """CPU seconds the process tree used since `before` (tree_cpu): a process that ended meanwhile (a server a
    benchmark killed) counts nothing after `before`, rather than taking its whole CPU time off the sum."""
    after = tree_cpu()
    return sum(used - before.get(key, 0.0) for key, used in after.items())


def _own_cpu_seconds() -> float:
    return cpu_seconds(psutil.Process())


@contextmanager
def timed(label: str) -> Iterator[dict]:
    """Time a block; the yielded dict gets 'seconds' (wall), 'cpu' (tree_cpu_since) and 'own_cpu' (this
    process's alone: the rest is its children's, e.g. the servers a benchmark started) when it ends."""
    progress(f"{label} ...")
    out: dict = {}
    cpu, own = tree_cpu(), _own_cpu_seconds()
    start = time.perf_counter()
    yield out
    out["seconds"] = time.perf_counter() - start
    out["cpu"] = tree_cpu_since(cpu)
    out["own_cpu"] = _own_cpu_seconds() - own
    progress(f"{label}: {out['seconds']:.2f} s, {out['cpu']:.2f} CPU s")


def save(name: str, results: dict) -> str:
    """Write results to bench/results/<name>.json and return the path."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    return path


def run_suite(name: str, args: Any, run: Callable[[Any, str], tuple[dict, Any]],
              report: Callable[[dict, Any], None]) -> dict:
    """Run a suite in --dir (else a temporary directory, removed after), save its results as `name` and print
    its report; the results."""
    directory = args.dir or tempfile.mkdtemp(prefix=f"fabric-bench-{name}-")
    os.makedirs(directory, exist_ok=True)
    signal.signal(signal.SIGTERM, _stopped)
    try:
        results, raw = run(args, directory)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    save(name, results)
    report(results, raw)
    return results


def _stopped(signum: int, frame: Any) -> None:
    """SIGTERM ends a suite as Ctrl-C does, through its cleanup: the servers it started are stopped with it, not
    left running (a later run in the same --dir would share their files)."""
    raise SystemExit(f"stopped by signal {signum}")


def bar_chart(name: str, title: str, rows: list[tuple[str, float]], unit: str,
              colors: list[str] | None = None, legend: dict[str, str] | None = None) -> str:
    """A horizontal bar chart of (label, value) saved as bench/results/<name>.png; `colors` per bar and a
    `legend` of {color: meaning} tell kinds of bars apart (e.g. ours and the peers)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.png")
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 1.6))
    labels, values = zip(*rows, strict=True)
    bars = ax.barh(labels, values, color=colors or "#4C72B0")
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize=8)
    ax.set_xlim(0, max(values) * 1.15)  # room for the value labels
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    if legend:
        ax.legend(handles=[Patch(color=c, label=text) for c, text in legend.items()], loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_plot(name: str, title: str, series: Mapping[str, Sequence[float]], what: str = "latency") -> str:
    """Histogram and CDF of latencies in ms, saved as bench/results/<name>.png: one series filled, with its p50
    and p99 marked; several as outlines and CDF lines on a log scale (their tails differ by orders of magnitude)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.png")
    single = len(series) == 1
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(11, 4))
    for (label, values), color in zip(series.items(), itertools.cycle(COLORS)):
        data = np.sort(np.asarray(values, dtype=float))
        bins = 50 if single else np.geomspace(max(data[0], 1e-3), data[-1] * 1.01, 60)
        hist.hist(data, bins=bins, color=color, histtype="bar" if single else "step", label=label)
        cdf.plot(data, np.arange(1, len(data) + 1) / len(data), color=color, label=label)
        if single:
            for q in (50, 99):
                cdf.axvline(np.percentile(data, q), ls="--", color="gray")
                cdf.text(np.percentile(data, q), 0.05, f" p{q}", color="gray")
    if not single:
        for ax in (hist, cdf):
            ax.set_xscale("log")
        cdf.legend(fontsize=8, loc="lower right")
    hist.set_xlabel(f"{what} (ms)")
    hist.set_ylabel("records")
    cdf.set_xlabel(f"{what} (ms)")
    cdf.set_ylabel("fraction of records")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A Markdown table (what the README shows)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
