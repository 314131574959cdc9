"""The perf tests' `--plot FILE`: each reporting window's records/s (and a producer's average and largest sampled
latency) against the seconds since the test started, drawn into a PNG, since a run's rate over time is read at a
glance from a chart and not from its lines. It needs matplotlib (the `[notebook]` extra), checked before a test
starts."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from fabric.cli.common import CommandError


@dataclass(frozen=True)
class Point:
    """One reporting window: when it ended (s since the start), its records/s, and a producer's latencies (ms)."""

    seconds: float
    records_per_s: float
    avg_ms: float | None = None
    max_ms: float | None = None


def check(path: str | None) -> None:
    """Refuse --plot before the test runs when matplotlib is missing or `path` is not a .png file name."""
    if path is None:
        return
    if not path.lower().endswith(".png"):
        raise CommandError(f"--plot {path}: give a file name ending in .png")
    if importlib.util.find_spec("matplotlib") is None:
        raise CommandError("--plot needs matplotlib: pip install 'spark-fabric[notebook]' (make installs it)")


def save(path: str, title: str, points: list[Point]) -> None:
    """Draw `points` into the PNG `path`: records/s, and under it the latencies where the points have them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    timed = [p for p in points if p.avg_ms is not None]
    panels = 2 if timed else 1
    figure = Figure(figsize=(8, 2.8 * panels))
    FigureCanvasAgg(figure)
    axes = figure.subplots(panels, 1, sharex=True, squeeze=False)
    rate = axes[0][0]
    rate.plot([p.seconds for p in points], [p.records_per_s for p in points], marker="o")
    rate.set_ylabel("records/s")
    rate.set_ylim(bottom=0)
    rate.set_title(title)
    if timed:
        latency = axes[1][0]
        latency.plot([p.seconds for p in timed], [p.avg_ms for p in timed], marker="o", label="average")
        latency.plot([p.seconds for p in timed], [p.max_ms for p in timed], marker="x", label="largest")
        latency.set_ylabel("latency, ms (sampled)")
        latency.set_ylim(bottom=0)
        latency.legend()
    axes[-1][0].set_xlabel("seconds since the test started")
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as exc:
        raise CommandError(f"--plot {path}: {exc.strerror or exc}; give a file in a directory you can write") from None
