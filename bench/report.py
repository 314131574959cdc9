"""Shared benchmark plumbing: progress lines, timing, results JSON and bar-chart plots."""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from typing import Iterator

import psutil

# bench/results/, or $FABRIC_BENCH_RESULTS (the benchmarks' smoke test keeps its figures out of the checkout)
RESULTS_DIR = os.environ.get("FABRIC_BENCH_RESULTS") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                      "results")


def progress(message: str) -> None:
    """One progress line on stderr, so long runs show where they are."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its live descendants (Spark's JVM and
    its Python workers): steadier than wall time on a shared machine, whose other tenants stretch it."""
    total = 0.0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        total += times.user + times.system
    return total


@contextmanager
def timed(label: str) -> Iterator[dict]:
    """Time a block; the yielded dict gets 'seconds' (wall) and 'cpu' (tree_cpu_seconds) when it ends."""
    progress(f"{label} ...")
    out: dict = {}
    cpu = tree_cpu_seconds()
    start = time.perf_counter()
    yield out
    out["seconds"] = time.perf_counter() - start
    out["cpu"] = tree_cpu_seconds() - cpu
    progress(f"{label}: {out['seconds']:.2f} s, {out['cpu']:.2f} CPU s")


def save(name: str, results: dict) -> str:
    """Write results to bench/results/<name>.json and return the path."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{name}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    return path


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
        ax.legend(handles=[Patch(color=c, label=text) for c, text in legend.items()], loc="lower right",
                  fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A Markdown table (what the README shows)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
