"""pandas and matplotlib views of a fabric for notebooks: a topic's partitions, their replication (leader, ISR)
and a consumer group's lag."""
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


def replication_frame(fab: Fabric, topic: str, group: str | None = None) -> pd.DataFrame:
    """One row per partition of `topic`: leader, replicas, ISR, ISR size, end offset and, for `group`, its
    committed offset and lag. A partition that is not replicated (every topic of an embedded fabric) has no
    leader, replicas or ISR: leader and ISR size are then <NA> and replicas and ISR empty lists."""
    import pandas as pd

    committed = {g.partition: g for g in fab.describe_group(group) if g.topic == topic} if group else {}
    rows = []
    for p in fab.describe_topic(topic).partitions:
        offsets = committed.get(p.partition)
        rows.append({"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isr),
                     "isr_size": len(p.isr) if p.replicas else None, "end_offset": p.end_offset,
                     "committed": offsets.committed if offsets else None, "lag": offsets.lag if offsets else None})
    frame = pd.DataFrame(rows).set_index("partition")
    for column in ("leader", "isr_size", "committed", "lag"):
        frame[column] = frame[column].astype("Int64")  # integers with <NA>, not floats with NaN
    return frame


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


def plot_replication(fab: Fabric, topic: str, group: str | None = None) -> Figure:
    """Three panels per partition of `topic`: its leader node, its ISR size against its replica count, and the
    lag of `group`. On a topic that is not replicated the leader and ISR panels say so instead."""
    import matplotlib.pyplot as plt
    import pandas as pd

    frame = replication_frame(fab, topic, group)
    at = list(range(len(frame)))  # x position of each partition
    fig, (leader_ax, isr_ax, lag_ax) = plt.subplots(1, 3, figsize=(10, 3.2))
    if any(frame["replicas"].map(len)):
        led = [(x, int(leader)) for x, leader in enumerate(frame["leader"]) if not pd.isna(leader)]
        leader_ax.scatter([x for x, _ in led], [leader for _, leader in led], s=80)
        nodes = sorted({n for replicas in frame["replicas"] for n in replicas})
        leader_ax.set_yticks(nodes, [f"node {n}" for n in nodes])
        leader_ax.set_ylim(min(nodes) - 0.5, max(nodes) + 0.5)
        most = max(frame["replicas"].map(len))
        isr_ax.bar(at, frame["replicas"].map(len), color="lightgray", label="replicas")
        isr_ax.bar(at, frame["isr_size"].fillna(0), width=0.5, label="in sync")
        isr_ax.set_yticks(range(most + 1))
        isr_ax.set_ylim(0, most + 1)
        isr_ax.legend(loc="upper center", ncol=2, fontsize="small")
    else:
        for ax in (leader_ax, isr_ax):
            ax.text(0.5, 0.5, "not replicated:\nno leader, no ISR", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set_yticks([])
    if frame["lag"].notna().any():
        lag_ax.bar(at, frame["lag"].fillna(0))
        lag_ax.set_ylim(0, max(1, int(frame["lag"].max())) * 1.1)
    else:
        lag_ax.text(0.5, 0.5, f"no offsets committed\nby {group}" if group else "no group given", ha="center",
                    va="center", transform=lag_ax.transAxes)
        lag_ax.set_yticks([])
    lag_title = f"lag of {group} (records)" if group else "lag"
    for ax, title in ((leader_ax, "leader"), (isr_ax, "ISR size"), (lag_ax, lag_title)):
        ax.set_title(title)
        ax.set_xlabel("partition")
        ax.set_xticks(at, [str(p) for p in frame.index])
        ax.set_xlim(-0.5, len(frame) - 0.5)
    fig.suptitle(f"topic {topic}: replication")
    fig.tight_layout()
    return fig
