"""How the JVM reader's tasks fetch (sources/jvm PartitionFetches): a partition of several fetches is read whole
and in order while each next fetch is sent ahead and read on another thread, its payload sliced into Arrow batches
(IpcBatches; its damaged payloads are checked in test_protocol.py)."""
from __future__ import annotations

import pyarrow as pa
import pytest

import fabric
from fabric.spark import jar

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]


def test_a_partition_of_several_fetches_is_read_whole_and_in_order_with_each_next_fetch_sent_ahead(
        spark, shared_cluster) -> None:
    """A partition holding more than two fetches' bytes (PartitionFetches.FETCH_BYTES, 32 MiB): each fetch's answer
    names its batches' record counts, so the task sends the next fetch while Spark takes in the last one's batches,
    and reads its answer on another thread. Every record comes once, at its offset, with its own value."""
    count, size = 18_000, 4 << 10  # 72 MiB: three fetches
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-large", partitions=1, replication_factor=3)
        with fab.producer() as producer:
            for start in range(0, count, 1000):
                producer.send_batch("jvm-large", pa.table({"value": [
                    i.to_bytes(8, "big") + bytes(size - 8) for i in range(start, start + 1000)]}))
    try:
        df = spark.read.format("fabric-jvm").options(url=shared_cluster.url, subscribe="jvm-large").load()
        got = df.selectExpr("offset", "conv(hex(substring(value, 1, 8)), 16, 10) = offset AS own",
                            "length(value) AS size").agg({"offset": "count", "own": "min", "size": "min"}).collect()
        counted = df.selectExpr("count(DISTINCT offset) AS n", "min(offset) AS first", "max(offset) AS last").first()
        assert (counted.n, counted.first, counted.last) == (count, 0, count - 1)
        assert (got[0]["count(offset)"], got[0]["min(own)"], got[0]["min(size)"]) == (count, True, size)
    finally:
        with fabric.connect(shared_cluster.url) as fab:
            fab.delete_topic("jvm-large")
