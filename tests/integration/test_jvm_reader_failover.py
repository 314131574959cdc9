"""The JVM reader (`format("fabric-jvm")`) while the cluster changes under a stream, as real node and coordinator
processes: the SIGKILL of a partition's leader (the planner and the tasks retry with fresh metadata until the
controller elected another), and a new cluster's offsets topic created at the stream's first commit (the commit
retried while the coordinator answers CoordinatorUnavailableError). Each query reads every record once and does not
fail."""
from __future__ import annotations

import pyarrow as pa
import pytest

import fabric
from fabric.common.names import OFFSETS_TOPIC
from fabric.common.waiting import wait_for
from fabric.spark import jar

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]


def test_a_stream_reads_every_record_once_through_a_leaders_death(spark, node_cluster, replication,
                                                                    tmp_path) -> None:
    """SIGKILL of partition 0's leader while a stream reads it in batches of 40 offsets: the planner and the tasks
    retry with fresh metadata until the controller elected another leader (the dead node's session runs out), and
    the query reads every record once instead of failing."""
    cluster = node_cluster()
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("jvm-moving", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer() as producer:
            futures = [producer.send("jvm-moving", b"m-%d" % i, partition=i % 2) for i in range(400)]
            assert all(f.result(60) for f in futures)
        for partition in (0, 1):
            assert replication.wait_in_sync(fab, cluster.nodes, "jvm-moving", partition) == 200
        stream = spark.readStream.format("fabric-jvm").options(url=cluster.url, subscribe="jvm-moving",
                                                                startingOffsets="earliest", maxOffsetsPerTrigger="40")
        query = (stream.load().writeStream.format("memory").queryName("jvm_moving")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            wait_for(lambda: spark.table("jvm_moving").count() > 0, timeout=180, what="the stream's first batch")
            before = replication.state(fab, "jvm-moving", 0)
            cluster.nodes[before.leader].kill()
            wait_for(lambda: spark.table("jvm_moving").count() >= 400 or query.exception(), timeout=300,
                     what="every record through the leader's death")
            assert query.exception() is None
            assert replication.state(fab, "jvm-moving", 0).leader not in (before.leader, -1, None)
        finally:
            query.stop()
    got = spark.table("jvm_moving").select("partition", "offset", "value").collect()
    assert sorted((r.partition, r.offset, r.value) for r in got) == \
        sorted((i % 2, i // 2, b"m-%d" % i) for i in range(400))


def test_a_streams_first_commit_waits_while_a_new_clusters_offsets_topic_is_created(spark, node_cluster,
                                                                                     tmp_path) -> None:
    """A new cluster that keeps group offsets on its nodes creates `__consumer_offsets` at the first group request,
    as Kafka does at the first FindCoordinator: here the stream's first commit, answered CoordinatorUnavailableError
    while the topic is created and loaded. The reader retries it, as the Python client does, instead of failing the
    query; the group ends at the topic's ends."""
    cluster = node_cluster(coordinator_extra=("--offsets-topic-replication-factor", "3"))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("jvm-first-group", partitions=2, replication_factor=3)
        with fab.producer() as producer:
            producer.send_batch("jvm-first-group", pa.table({"value": [b"f-%d" % i for i in range(120)],
                                                             "partition": [i % 2 for i in range(120)]}))
        assert OFFSETS_TOPIC not in fab.cluster.describe_cluster(refresh=True).topic_ids
        query = (spark.readStream.format("fabric-jvm").options(url=cluster.url, subscribe="jvm-first-group",
                                                                startingOffsets="earliest", groupId="jvm-first",
                                                                maxOffsetsPerTrigger="40")
                 .load().writeStream.format("memory").queryName("jvm_first_group").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        assert query.awaitTermination(300), "the availableNow run did not end"
        assert query.exception() is None
        assert spark.table("jvm_first_group").count() == 120
        committed = {tp: c.offset for tp, c in fab.cluster.coordinator.committed("jvm-first").items()}
        assert committed == {("jvm-first-group", 0): 60, ("jvm-first-group", 1): 60}
