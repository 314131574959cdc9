"""The JVM reader on a real Spark standalone cluster (`spark_cluster`: executors in JVMs of their own) next to a
real fabric cluster of three data nodes: tests/jobs/jvm_copy.py, submitted with the reader's jar, copies a
replicated topic into another with format("fabric-jvm") and the exactly-once format("fabric") sink while the test
SIGKILLs an executor (its tasks run again elsewhere) and then the leader of an input partition (the planner and the
tasks retry with fresh metadata until the controller elected another). Every wait follows the job's progress.

Checked: the output holds every input record exactly once, and each progress of the run (as JSON, written by the
job) carries Kafka's three offsets-behind-latest metrics, equal to what fabric.sources.progress computes from that
progress.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import fabric
from fabric.sources.progress import offsets_behind_latest
from fabric.spark import jar

pytestmark = [pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "jvm_copy.py"
PARTITIONS, RECORDS, PER_BATCH = 3, 3000, 250  # about 12 micro-batches


def committed(fab: fabric.Fabric, topic: str) -> int:
    """The sum of the topic's partition ends (last stable offsets): grows as micro-batches commit."""
    return sum(max(p.end_offset, 0) for p in fab.describe_topic(topic).partitions)


def test_a_stream_through_the_jvm_reader_copies_every_record_once_through_kills(
        spark_cluster, node_cluster, replication, tmp_path) -> None:
    cluster = node_cluster()
    values = [f"jvm-{i:05d}".encode() for i in range(RECORDS)]
    with fabric.connect(cluster.url) as fab:
        for topic in ("jvm-raw", "jvm-copied"):
            fab.create_topic(topic, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer() as producer:
            for i, value in enumerate(values):
                producer.send("jvm-raw", value, key=b"k%d" % (i % 97))
        checkpoint, progress = tmp_path / "checkpoint", tmp_path / "progress.jsonl"
        job = spark_cluster.supervise(JOB, cluster.url, "jvm-raw", "jvm-copied", str(PER_BATCH), str(checkpoint),
                                      str(progress), conf={"spark.jars": str(jar.path())}, name="fabric-jvm-copy")

        def progressed(beyond: int) -> int:
            """Wait until the output's committed records pass `beyond`; how many there are."""
            spark_cluster.wait(lambda: committed(fab, "jvm-copied") > beyond or job.ended(),
                               f"the copy to commit more than {beyond} records", checkpoint)
            assert not job.ended(), f"the job ended before the kills:\n{spark_cluster.output(job.job)}"
            return committed(fab, "jvm-copied")

        done = progressed(0)
        spark_cluster.kill_executor(app_id=spark_cluster.wait_for_app("fabric-jvm-copy")["id"])
        progressed(done)
        before = replication.state(fab, "jvm-raw", 0)
        cluster.nodes[before.leader].kill()
        replication.wait_elected(fab, "jvm-raw", 0, before)
        spark_cluster.wait(job.ended, "the copy to reach the input's end", checkpoint)
        assert job.job.returncode == 0, spark_cluster.output(job.job)
        copied = []
        with fab.consumer(auto_offset_reset="earliest") as consumer:
            consumer.assign([("jvm-copied", p) for p in range(PARTITIONS)])
            while len(copied) < RECORDS:
                got = consumer.poll(timeout=30)
                assert got, f"the output stopped at {len(copied)} of {RECORDS} records"
                copied += [r.value for r in got]
            assert consumer.poll(timeout=2) == []
    assert sorted(copied) == values  # every input record exactly once
    batches = [p for p in map(json.loads, progress.read_text().splitlines()) if p["numInputRows"]]
    assert batches, "the run reported no batch"
    for batch in batches:  # the progress's JSON gives the average rounded to one decimal
        source = batch["sources"][0]
        got, expected = source["metrics"], offsets_behind_latest(source)
        assert set(got) == set(expected) and all(got[m] == expected[m] for m in ("minOffsetsBehindLatest",
                                                                                 "maxOffsetsBehindLatest")), source
        assert abs(float(got["avgOffsetsBehindLatest"]) - float(expected["avgOffsetsBehindLatest"])) <= 0.05, source
    assert batches[-1]["sources"][0]["metrics"]["maxOffsetsBehindLatest"] == "0"
