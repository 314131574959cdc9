"""Helpers that keep the notebooks short: a SparkSession configured from conf/, waiting on a condition,
and pandas/matplotlib views of a topic's partitions and of a consumer group's lag."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from fabric.errors import InvalidConfigError
from fabric.url import ENV_URL
from fabric.waiting import wait_for

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from fabric.client import Fabric

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
SPARK_DEFAULTS = "spark-defaults.conf"
LOG4J2 = "log4j2.properties"


def read_spark_defaults(path: Path) -> dict[str, str]:
    """The `key value` pairs of a spark-defaults.conf file (blank lines and # comments skipped)."""
    confs = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise InvalidConfigError(f"{path}:{number}: {line!r} has no value; write `key value`, "
                                     "e.g. `spark.sql.shuffle.partitions 2`")
        confs[parts[0]] = parts[1].strip()
    return confs


def spark_session(app: str, conf_dir: str | None = None) -> SparkSession:
    """A SparkSession configured by conf_dir's spark-defaults.conf and log4j2.properties (default: the
    project's conf/), with the environment Spark's Python workers need. `format("fabric")` needs no
    registration: Spark finds the installed pyspark_fabric module itself."""
    directory = Path(conf_dir) if conf_dir else CONF_DIR
    defaults, log4j = directory / SPARK_DEFAULTS, directory / LOG4J2
    for path in (defaults, log4j):
        if not path.is_file():
            raise InvalidConfigError(f"missing {path}; pass conf_dir= a directory holding {SPARK_DEFAULTS} "
                                     f"and {LOG4J2} (the project's are in {CONF_DIR})")
    # Spark's Python workers cannot connect back in sandboxes without these (see README).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    confs = read_spark_defaults(defaults)
    if os.environ.get(ENV_URL):  # the fabric the user points at wins over the file's default
        confs["spark.fabric.url"] = os.environ[ENV_URL]
    java_options = confs.get("spark.driver.extraJavaOptions", "")
    confs["spark.driver.extraJavaOptions"] = f"{java_options} -Dlog4j2.configurationFile={log4j.resolve()}".strip()
    builder = SparkSession.builder.appName(app)
    for key, value in confs.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0,
               query: StreamingQuery | None = None) -> None:
    """Poll `condition` until it holds; fail naming `what` on timeout, or at once if `query` failed."""
    def holds() -> bool:
        if query is not None and query.exception() is not None:
            raise RuntimeError(f"streaming query failed while waiting for {what}: {query.exception()}")
        return bool(condition())
    wait_for(holds, timeout_s, what, interval=0.2)


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
