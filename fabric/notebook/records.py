"""A topic's records as a pandas DataFrame, with no Spark: the first records (`sample`), the last ones (`tail`),
and, with `follow`, each new batch as it arrives (as kcat -C and `kafka-console-consumer` show them).

Reads use a consumer without a group, so looking at a topic commits nothing and joins no group. Values stay
what they are stored as: bytes for a plain topic, one column per field for a typed topic (Arrow to pandas, no
deserialization).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from fabric.client.admin import Fabric
from fabric.client.consumer import Consumer
from fabric.client.topic_partition import TopicPartition
from fabric.client.url import open_cluster
from fabric.common import checks

if TYPE_CHECKING:
    import pandas as pd

POLL_S = 0.5  # how long one poll waits for records at the end of a partition


def connect(fab: Fabric | str | None) -> Fabric:
    """`fab` itself, or the fabric its URL names (None: $FABRIC_URL, else ./fabric-data)."""
    return fab if isinstance(fab, Fabric) else Fabric(open_cluster(fab))


def _reader(fab: Fabric, topic: str) -> tuple[Consumer, list[TopicPartition]]:
    """A groupless consumer assigned every partition of `topic`."""
    partitions = [TopicPartition(topic, p.partition) for p in fab.describe_topic(topic).partitions]
    consumer = fab.consumer(enable_auto_commit=False)
    consumer.assign(partitions)
    return consumer, partitions


def _frame(table: pa.Table) -> pd.DataFrame:
    """Records as rows ordered by time, then partition and offset; the index is positional."""
    frame = table.to_pandas()
    if len(frame):
        frame = frame.sort_values(["timestamp", "partition", "offset"], kind="stable").reset_index(drop=True)
    return frame


def _read_to(consumer: Consumer, ends: dict[TopicPartition, int], each: int | None = None) -> pa.Table:
    """Poll until every partition has reached its offset in `ends` or given `each` records; with `each`, only the
    first `each` records of every partition are kept."""
    tables: list[pa.Table] = []
    counts = dict.fromkeys((p for _, p in ends), 0)  # records read per partition (of the one topic)

    def done(tp: TopicPartition) -> bool:
        return consumer.position(*tp) >= ends[tp] or (each is not None and counts[tp[1]] >= each)
    while not all(done(tp) for tp in ends):
        table = consumer.poll_batch(POLL_S)
        for p in table.column("partition").to_pylist():
            counts[p] += 1
        tables.append(table)
    table = pa.concat_tables(tables) if tables else consumer.poll_batch(0)
    if each is None or not table.num_rows:
        return table
    rank = table.select(["partition"]).to_pandas().groupby("partition").cumcount()  # a record's place in its partition
    return table.filter(pa.array(rank < each))


def sample(topic: str, n: int = 10, fab: Fabric | str | None = None) -> pd.DataFrame:
    """The first `n` records of `topic` (from the start of each partition, oldest first), as a DataFrame with
    Spark's Kafka columns: key, value (or a typed topic's fields), topic, partition, offset, timestamp, ..."""
    n = checks.integer(n, "n", lo=1)
    fabric = connect(fab)
    consumer, partitions = _reader(fabric, topic)
    try:
        consumer.seek_to_beginning(*partitions)
        table = _read_to(consumer, consumer.end_offsets(partitions), n)  # the first n of each partition
    finally:
        consumer.close()
    return _frame(table).head(n)


def tail(topic: str, n: int = 10, fab: Fabric | str | None = None, follow: bool = False,
         timeout: float | None = None) -> pd.DataFrame | Iterator[pd.DataFrame]:
    """The last `n` records of `topic` (the newest `n` of each partition's last `n`), as a DataFrame. With
    `follow`, an iterator instead: those records first, then each batch of new records as it arrives, until
    `timeout` seconds pass (None: until the loop stops, e.g. on a notebook's interrupt)."""
    n = checks.integer(n, "n", lo=1)
    if timeout is not None:
        timeout = checks.timeout(timeout, "tail() timeout")
    fabric = connect(fab)
    consumer, partitions = _reader(fabric, topic)
    ends = consumer.end_offsets(partitions)
    starts = consumer.beginning_offsets(partitions)
    for tp, end in ends.items():
        consumer.seek(tp[0], tp[1], max(starts[tp], end - n))
    try:
        last = _frame(_read_to(consumer, ends)).tail(n).reset_index(drop=True)
    except BaseException:
        consumer.close()
        raise
    if not follow:
        consumer.close()
        return last
    return _follow(consumer, last, timeout)


def _follow(consumer: Consumer, first: pd.DataFrame, timeout: float | None) -> Iterator[pd.DataFrame]:
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        yield first
        while deadline is None or time.monotonic() < deadline:
            wait = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            table = consumer.poll_batch(wait)
            if table.num_rows:
                yield _frame(table)
    finally:
        consumer.close()
