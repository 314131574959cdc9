"""The fabric sink on a replicated cluster (real node processes; Spark local): a batch `df.write` is one
transaction, visible whole once it succeeded, and nothing of it once a task failed (the job's abort writes the
abort markers, so the partitions' last stable offsets do not stay behind an open transaction). (Streaming on the
cluster, through kills: tests/integration/test_spark_cluster_sink.py.)"""
from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

import fabric

pytestmark = [pytest.mark.spark]


def committed_values(fab: fabric.Fabric, topic: str, isolation_level: str = "read_committed") -> list[bytes]:
    """Every value of the topic a consumer of `isolation_level` reads up to the ends it is told of."""
    with fab.consumer(auto_offset_reset="earliest", isolation_level=isolation_level) as consumer:
        partitions = [(topic, p.partition) for p in fab.describe_topic(topic).partitions]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        out: list[bytes] = []
        while any(consumer.position(*tp) < ends[tp] for tp in partitions):
            out += [r.value for r in consumer.poll(timeout=5)]
        return out


def settled(fab: fabric.Fabric, topic: str) -> bool:
    """True once no transaction is open in the topic: every partition's last stable offset is its high
    watermark (what a read_uncommitted consumer reads to)."""
    with fab.consumer(isolation_level="read_uncommitted") as consumer:
        partitions = [(topic, p.partition) for p in fab.describe_topic(topic).partitions]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek_to_end(tp)
        high = {tp: consumer.position(*tp) for tp in partitions}
    return {(topic, p.partition): p.end_offset for p in fab.describe_topic(topic).partitions} == high


@pytest.fixture
def cluster_fab(replicated_cluster):
    with fabric.connect(replicated_cluster.url) as fab:
        yield fab
        for topic in fab.list_topics():
            fab.delete_topic(topic)


def test_a_batch_write_is_one_transaction(spark, cluster_fab, replicated_cluster) -> None:
    cluster_fab.create_topic("batch-out", partitions=3)
    rows = spark.range(0, 300, numPartitions=3).select(F.format_string("v%03d", "id").cast("binary").alias("value"))
    rows.write.mode("append").format("fabric").option("url", replicated_cluster.url) \
        .option("topic", "batch-out").save()
    assert sorted(committed_values(cluster_fab, "batch-out")) == [b"v%03d" % i for i in range(300)]
    assert settled(cluster_fab, "batch-out")


def test_a_failed_batch_write_leaves_nothing_visible_and_no_open_transaction(spark, cluster_fab,
                                                                            replicated_cluster) -> None:
    """One task fails (a UDF raising on one row) while the others may have appended their rows already: the
    job's abort ends every writer's transaction with an abort marker."""
    cluster_fab.create_topic("batch-failed", partitions=3)

    @F.udf(BinaryType())
    def value(i):  # (no type hints: pyspark warns it cannot infer an eval type from them)
        if i == 250:
            raise ValueError("a failing row")
        return b"w%03d" % i
    rows = spark.range(0, 300, numPartitions=3).select(value("id").alias("value"))
    with pytest.raises(Exception, match="a failing row"):
        rows.write.mode("append").format("fabric").option("url", replicated_cluster.url) \
            .option("topic", "batch-failed").save()
    assert committed_values(cluster_fab, "batch-failed") == []
    assert settled(cluster_fab, "batch-failed")
    with cluster_fab.producer() as producer:  # the partitions take new records, visible at once
        producer.send("batch-failed", b"after", partition=0).result(60)
    assert committed_values(cluster_fab, "batch-failed") == [b"after"]
