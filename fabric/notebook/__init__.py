"""Looking at a fabric from a notebook, with pandas and matplotlib and no Spark (the `[notebook]` extra):

    from fabric.notebook import sample, tail, Monitor
    sample("clicks", 5)                      # the first records, a DataFrame
    tail("clicks", 5)                        # the last ones; tail(..., follow=True) yields new ones as they come
    Monitor("clicks", group="dashboard").watch(30).plot()   # throughput and lag over time

plus per-partition views: topic_frame, group_frame, replication_frame and their plots. Every function takes
`fab=` (a Fabric or a URL; default $FABRIC_URL, else ./fabric-data) or, for the views, the Fabric first.
This layer uses only the client layer.
"""
from __future__ import annotations

from fabric.notebook.monitor import Monitor, Reading
from fabric.notebook.records import sample, tail
from fabric.notebook.views import (
    group_frame,
    plot_lag,
    plot_offsets,
    plot_replication,
    replication_frame,
    topic_frame,
)

__all__ = ["Monitor", "Reading", "sample", "tail", "group_frame", "plot_lag", "plot_offsets", "plot_replication",
           "replication_frame", "topic_frame"]
