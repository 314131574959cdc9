"""Lag and throughput over time, for a notebook to plot: a Monitor reads the end offsets of some topics (and a
consumer group's lag on them) each time it is asked, and turns the readings into a time series.

Throughput is the growth of the topics' end offsets between two readings divided by the seconds between them,
so it counts records written by anyone (offsets, not bytes; a compacted topic's gaps count too). Lag is what
`fabric groups describe` shows, summed over the group's partitions of those topics.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from fabric.client.admin import Fabric
from fabric.common import checks
from fabric.common.errors import InvalidArgumentError
from fabric.notebook.records import connect

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Reading:
    """The topics' end offsets summed (`records`) and the group's lag at wall-clock `at` (seconds)."""

    at: float
    records: int
    lag: int | None


class Monitor:
    """Readings of `topics` (and `group`'s lag on them), one per `read()`; `watch` takes them on a schedule."""

    def __init__(self, topics: str | list[str], group: str | None = None, fab: Fabric | str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise InvalidArgumentError("Monitor needs at least one topic, e.g. Monitor('clicks', group='dashboard')")
        self.group, self.fab, self.clock = group, connect(fab), clock
        for topic in self.topics:
            self.fab.describe_topic(topic)  # an unknown topic fails here, naming it
        self.readings: list[Reading] = []

    def read(self) -> Reading:
        """Take one reading now and keep it."""
        records = sum(p.end_offset for t in self.topics for p in self.fab.describe_topic(t).partitions)
        lag = None
        if self.group is not None:
            lag = sum(g.lag or 0 for g in self.fab.describe_group(self.group) if g.topic in self.topics)
        reading = Reading(self.clock(), records, lag)
        self.readings.append(reading)
        return reading

    def watch(self, seconds: float, interval: float = 1.0) -> pd.DataFrame:
        """Read every `interval` seconds for `seconds`, printing each reading; the time series so far."""
        seconds, interval = checks.timeout(seconds, "seconds"), checks.timeout(interval, "interval")
        deadline = time.monotonic() + seconds
        while True:
            reading = self.read()
            print(f"{time.strftime('%H:%M:%S', time.localtime(reading.at))}  records {reading.records}"
                  + (f"  lag {reading.lag}" if reading.lag is not None else ""), flush=True)
            if time.monotonic() + interval > deadline:
                return self.frame()
            time.sleep(interval)

    def frame(self) -> pd.DataFrame:
        """The readings indexed by time: records (end offsets summed), throughput (records/s since the previous
        reading; <NA> for the first) and lag (<NA> without a group)."""
        import pandas as pd

        frame = pd.DataFrame({"records": [r.records for r in self.readings],
                              "lag": pd.array([r.lag for r in self.readings], dtype="Int64")},
                             index=pd.to_datetime([r.at for r in self.readings], unit="s", utc=True))
        frame.index.name = "time"
        seconds = frame.index.to_series().diff().dt.total_seconds()
        frame.insert(1, "throughput", (frame["records"].diff() / seconds).astype("Float64"))
        return frame

    def plot(self) -> Figure:
        """Throughput (records/s) and, with a group, its lag (records), over time."""
        import matplotlib.pyplot as plt

        frame = self.frame()
        if len(frame) < 2:
            raise InvalidArgumentError(f"a plot over time needs at least 2 readings, have {len(frame)}; call read() "
                                       "again (or watch(seconds)) first")
        panels = 2 if self.group is not None else 1
        fig, axes = plt.subplots(panels, 1, figsize=(8, 2.6 * panels), sharex=True, squeeze=False)
        throughput_ax = axes[0][0]
        throughput_ax.plot(frame.index, frame["throughput"].astype(float), marker="o")
        throughput_ax.set_ylabel("records/s")
        throughput_ax.set_title(f"{', '.join(self.topics)}: throughput" + (f" and lag of {self.group}"
                                                                          if self.group else ""))
        if self.group is not None:
            lag_ax = axes[1][0]
            lag_ax.plot(frame.index, frame["lag"].astype(float), marker="o", color="#C44E52")
            lag_ax.set_ylabel("lag, records")
        fig.autofmt_xdate()
        fig.tight_layout()
        return fig
