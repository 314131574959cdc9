"""The JVM reader (`format("fabric-jvm")`) with its group served by a coordinator instance other than the active
one, as real coordinator, node and ZooKeeper processes: two instances share the offsets partitions out
(fabric/server/offsets_ownership.py), and the active one answers a call about a group of the other's share with
NotActiveCoordinator naming the instance that serves it. The planner sends the group's calls there, as the Python
client does: a stream's commits (`commit_offsets`) and a read from the group's offsets (`committed`)."""
from __future__ import annotations

import pyarrow as pa
import pytest

import fabric
from fabric.common.waiting import wait_for
from fabric.spark import jar

pytestmark = [pytest.mark.spark, pytest.mark.zookeeper,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]
TOPIC = "jvm-sharded"
SETTLE_S = 60  # the commits of a stream on a loaded machine


def produce(fab: fabric.Fabric, first: int, count: int) -> None:
    """`count` records numbered from `first`, alternately to partitions 0 and 1."""
    with fab.producer() as producer:
        producer.send_batch(TOPIC, pa.table({"value": [b"s-%d" % i for i in range(first, first + count)],
                                             "partition": [i % 2 for i in range(first, first + count)]}))


def test_a_stream_commits_to_a_group_served_by_another_instance_and_a_read_starts_at_them(
        spark, offsets_kit, node_cluster, zk_url, tmp_path, the_active) -> None:
    """An availableNow stream commits each batch to a group whose offsets partition the instance that is not the
    active one serves: its commits reach the topic's ends (before, the query failed on its first commit). A batch
    read then starts at that group's committed offsets (startingOffsets=group), asked of the same instance."""
    ha = offsets_kit.HaOffsetsCluster(node_cluster, zk_url, tmp_path, the_active)
    with fabric.connect(ha.url) as fab:
        controller, other, given = ha.shared(fab)
        group = offsets_kit.group_served_by(given[other.address], "jvm-elsewhere")
        fab.create_topic(TOPIC, partitions=2, replication_factor=3)
        produce(fab, 0, 120)
        query = (spark.readStream.format("fabric-jvm").options(url=ha.cluster.url, subscribe=TOPIC, groupId=group,
                                                                startingOffsets="earliest", maxOffsetsPerTrigger="40")
                 .load().writeStream.format("memory").queryName("jvm_sharded").trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        assert query.awaitTermination(300), "the availableNow run did not end"
        assert query.exception() is None
        assert spark.table("jvm_sharded").count() == 120

        def committed() -> dict[tuple[str, int], int]:
            return {tp: c.offset for tp, c in fab.cluster.coordinator.committed(group).items()}
        wait_for(lambda: committed() == {(TOPIC, 0): 60, (TOPIC, 1): 60}, SETTLE_S, "the group's commits")

        produce(fab, 120, 40)
        later = spark.read.format("fabric-jvm").options(url=ha.cluster.url, subscribe=TOPIC, groupId=group,
                                                        startingOffsets="group").load()
        assert sorted(r.value for r in later.select("value").collect()) == sorted(b"s-%d" % i
                                                                                   for i in range(120, 160))
