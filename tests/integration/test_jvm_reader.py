"""The JVM reader (`format("fabric-jvm")`, sources/jvm), built by `make install` with javac against pyspark's jars
and on the test session's class path: a batch read of a replicated topic (with its headers or without), of a topic
the coordinator keeps and of a typed topic with tombstones gives the schema and rows the Python source gives, in
Arrow columns handed to Spark as they were fetched, planned and read over the fabric protocol alone (the
coordinator's protocol port found from its Flight port); bad options are named. A stream reads within its limits
with Kafka's offsets-behind metrics, reads on through the SIGKILL of a leader (planner and tasks retry with fresh
metadata), and runs in real-time mode (trigger(realTime=...)) into the foreach sink, every record once and in
order."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

import fabric
from fabric.common.waiting import wait_for
from fabric.sinks.foreach_writer import TopicWriter
from fabric.sources.progress import offsets_behind_latest
from fabric.spark import jar

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]


TYPED = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])


@pytest.fixture(scope="module")
def topics(shared_cluster) -> dict[str, int]:
    """A replicated topic (2 partitions, RF 3) with keys, null keys, empty values and headers; one the coordinator
    keeps; a typed one with tombstones and null fields: the records each holds."""
    counts = {"jvm-replicated": 500, "jvm-kept": 30, "jvm-typed": 40}
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-replicated", partitions=2, replication_factor=3)
        fab.create_topic("jvm-kept", partitions=1)
        fab.create_topic("jvm-typed", partitions=1, replication_factor=3, schema=TYPED)
        with fab.producer() as producer:
            for topic in ("jvm-replicated", "jvm-kept"):
                for i in range(counts[topic]):
                    producer.send(topic, b"" if i % 11 == 0 else b"value-%d" % i,
                                  key=None if i % 7 == 0 else b"key-%d" % i, partition=i % (2 if "rep" in topic else 1),
                                  headers=[("n", b"%d" % i), ("empty", None)] if i % 5 == 0 else None)
            for i in range(counts["jvm-typed"]):
                value = None if i % 9 == 0 else {"user": f"u{i}", "amount": None if i % 4 == 0 else i, "at": i * 1000}
                producer.send("jvm-typed", value, key=b"key-%d" % (i % 6))
    return counts


def rows(df) -> list[tuple]:
    return [tuple(r) for r in sorted(df.collect(), key=lambda r: (r["partition"], r["offset"]))]


@pytest.mark.parametrize("topic, options", [("jvm-replicated", {}), ("jvm-replicated", {"includeHeaders": "true"}),
                                            ("jvm-kept", {}), ("jvm-typed", {})])
def test_the_jvm_reader_reads_the_rows_the_python_source_reads(spark, shared_cluster, topics, topic, options) -> None:
    def read(source: str, **more: str):
        return spark.read.format(source).options(url=shared_cluster.url, subscribe=topic, **options, **more).load()
    jvm, python = read("fabric-jvm"), read("fabric")
    assert jvm.schema == python.schema
    got = rows(jvm)
    assert len(got) == topics[topic] and got == rows(python)
    plan = jvm._jdf.queryExecution().executedPlan().toString()
    assert "fabric JVM reader: topic " + topic in plan and "ColumnarToRow" in plan  # Arrow columns, not rows
    assert read("fabric-jvm", startingOffsets="latest").count() == 0


@pytest.mark.parametrize("topic, columns", [("jvm-replicated", ["offset", "value"]), ("jvm-typed", ["amount", "key"]),
                                            ("jvm-typed", [])])
def test_the_jvm_reader_builds_only_the_columns_a_query_reads(spark, shared_cluster, topics, topic, columns) -> None:
    def read(source: str):
        return spark.read.format(source).options(url=shared_cluster.url, subscribe=topic).load().select(*columns)
    jvm = read("fabric-jvm")
    scan = jvm._jdf.queryExecution().executedPlan().toString()
    assert "fabric JVM reader" in scan and all(c in scan for c in columns)
    assert "timestampType" not in scan  # pruned: never built
    assert jvm.count() == topics[topic]
    if columns:
        assert sorted(map(tuple, jvm.collect()), key=repr) == sorted(map(tuple, read("fabric").collect()), key=repr)


@pytest.mark.parametrize("option, value, named", [
    ("subscribePattern", "jvm-.*", "unknown option subscribePattern"),
    ("startingOffsets", '{"jvm-kept": {"0": 3}}', "startingOffsets must be earliest or latest"),
    ("includeHeaders", "yes", "includeHeaders must be true or false"),
    ("url", "file:///tmp/x", "must be a fabric:// URL"),
])
def test_bad_options_are_named_before_anything_is_read(spark, shared_cluster, topics, option, value, named) -> None:
    reader = spark.read.format("fabric-jvm").option("url", shared_cluster.url).option("subscribe", "jvm-kept")
    with pytest.raises(Exception, match=named):
        reader.option(option, value).load().collect()


def test_without_javac_the_jar_is_not_built_and_says_why(tmp_path) -> None:
    bare = {**os.environ, "PATH": str(tmp_path)}  # no javac (nor anything else) on PATH
    done = subprocess.run([sys.executable, "-c", "import sys; from fabric.spark import jar; "
                           "sys.exit(0 if jar.build() is None else 1)"], env=bare, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "javac (a JDK) is not on PATH" in done.stderr and 'format("fabric") reads with the Python source' in \
        done.stderr


def test_a_stream_reads_every_record_once_within_its_limits_and_reports_kafkas_offsets_behind_latest(
        spark, shared_cluster, tmp_path) -> None:
    """A trigger(availableNow=True) run with maxOffsetsPerTrigger: batches of at most that many offsets until the ends
    the run began with, every record once, and each progress's metrics those Kafka's source reports, equal to what
    fabric.sources.progress computes from the same progress."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-stream", partitions=2, replication_factor=3)
        with fab.producer() as producer:
            for i in range(200):
                producer.send("jvm-stream", b"record-%d" % i, partition=i % 2)
    stream = spark.readStream.format("fabric-jvm").options(url=shared_cluster.url, subscribe="jvm-stream",
                                                            startingOffsets="earliest", maxOffsetsPerTrigger="50")
    query = (stream.load().writeStream.format("memory").queryName("jvm_stream").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    assert query.awaitTermination(300), "the availableNow run did not end"
    got = spark.table("jvm_stream").select("partition", "offset", "value").collect()
    assert sorted((r.partition, r.offset) for r in got) == sorted((i % 2, i // 2) for i in range(200))
    assert sorted(r.value for r in got) == sorted(b"record-%d" % i for i in range(200))
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert len(batches) >= 4 and all(p["numInputRows"] <= 50 for p in batches)
    for progress in batches:
        source = progress["sources"][0]
        assert source["metrics"] == offsets_behind_latest(source), source
    assert int(batches[0]["sources"][0]["metrics"]["maxOffsetsBehindLatest"]) > 0
    assert batches[-1]["sources"][0]["metrics"]["maxOffsetsBehindLatest"] == "0"


def test_a_stream_refuses_an_ending_offset(spark, shared_cluster, topics, tmp_path) -> None:
    stream = spark.readStream.format("fabric-jvm").options(url=shared_cluster.url, subscribe="jvm-kept",
                                                            endingOffsets="latest")
    try:
        with pytest.raises(Exception, match="endingOffsets is for batch reads"):
            stream.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path)).start() \
                .awaitTermination(120)
    finally:
        for query in spark.streams.active:
            query.stop()


def test_a_real_time_query_delivers_every_record_once_in_order_across_its_batches(
        spark, shared_cluster, tmp_path) -> None:
    """trigger(realTime=...): each batch's tasks read on as records come, row by row, and where they stopped is the
    next batch's start. Through a stateless transform to the foreach sink real-time mode allows (TopicWriter, into
    another topic), records written before the query, during its first batch and after a batch ended all arrive
    once (no task fails here: the sink is at-least-once), in offset order within each partition. Delivery and
    order only: the latency is `make bench`'s."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-realtime", partitions=2, replication_factor=3)
        fab.create_topic("jvm-realtime-out", partitions=2, replication_factor=3)
        producer = fab.producer()
        consumer = fab.consumer("jvm-realtime-out", auto_offset_reset="earliest")
        sent, received = 0, []

        def send(count: int) -> None:
            nonlocal sent
            for i in range(sent, sent + count):
                producer.send("jvm-realtime", b"record-%d" % i, partition=i % 2)
            producer.flush()
            sent += count

        def arrived(count: int) -> bool:
            received.extend(consumer.poll(timeout=0.5))
            return len(received) >= count

        send(40)
        stream = spark.readStream.format("fabric-jvm").options(url=shared_cluster.url, subscribe="jvm-realtime",
                                                                startingOffsets="earliest").load()
        query = (stream.selectExpr("partition", "upper(CAST(value AS STRING)) AS value").writeStream
                 .foreach(TopicWriter(shared_cluster.url, "jvm-realtime-out")).outputMode("update")
                 .trigger(realTime="5 seconds").option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            wait_for(lambda: arrived(40), timeout=180, what="the records written before the query")
            plan = query._jsq.streamingQuery().lastExecution().executedPlan().toString()
            assert "RealTimeStreamScan" in plan and "fabric JVM reader" in plan, plan
            send(40)
            wait_for(lambda: arrived(80), timeout=180, what="the records written during its batch")
            wait_for(lambda: query.lastProgress and query.lastProgress["batchId"] >= 1, timeout=180,
                     what="a real-time batch to end")
            send(40)
            wait_for(lambda: arrived(120), timeout=180, what="the records written after a batch ended")
            assert query.exception() is None
        finally:
            query.stop()
            producer.close()
            consumer.close()
    assert sorted(r.value for r in received) == sorted(b"RECORD-%d" % i for i in range(120))
    for partition in (0, 1):
        values = [int(r.value.split(b"-")[1]) for r in received if r.partition == partition]
        assert values == list(range(partition, 120, 2)), f"partition {partition} was delivered out of order"


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
