"""pandas and matplotlib views of a fabric for notebooks: a topic's partitions and a consumer group's lag."""
from __future__ import annotations

from typing import TYPE_CHECKING

from fabric.client.admin import Fabric
from fabric.common.errors import InvalidConfigError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def topic_frame(fab: Fabric, topic: str) -> pd.DataFrame:
    """One row per partition of `topic`: start/end offsets, records, segments and bytes."""
    import pandas as pd

    rows = [{"partition": p.partition, "start_offset": p.start_offset, "end_offset": p.end_offset,
             "records": p.end_offset - p.start_offset, "segments": p.segments, "size_bytes": p.size_bytes}
            for p in fab.describe_topic(topic).partitions]
    return pd.DataFrame(rows).set_index("partition")


def group_frame(fab: Fabric, group: str) -> pd.DataFrame:
    """One row per (topic, partition) a consumer group committed in: committed offset, end offset, lag."""
    import pandas as pd

    rows = [{"topic": g.topic, "partition": g.partition, "committed": g.committed, "end_offset": g.end_offset,
             "lag": g.lag} for g in fab.describe_group(group)]
    if not rows:
        raise InvalidConfigError(f"consumer group {group!r} has no committed offsets; known groups: "
                                 f"{fab.list_groups()}")
    return pd.DataFrame(rows).set_index(["topic", "partition"])


def _bars(frame: pd.DataFrame, columns: list[str], title: str, ylabel: str) -> Figure:
    """A grouped bar chart of `columns`, one group of bars per row of `frame`."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    frame[columns].plot.bar(ax=ax, rot=0)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    fig.tight_layout()
    return fig


def plot_offsets(fab: Fabric, topic: str) -> Figure:
    """Bar chart of each partition's start and end offsets."""
    return _bars(topic_frame(fab, topic), ["start_offset", "end_offset"], f"topic {topic}: offsets", "offset")


def plot_lag(fab: Fabric, group: str) -> Figure:
    """Bar chart of a consumer group's committed offsets, the end offsets, and the lag, per partition."""
    frame = group_frame(fab, group).fillna(0)
    return _bars(frame, ["end_offset", "committed", "lag"], f"consumer group {group}: lag", "records")
