"""The JVM reader (`format("fabric-jvm")`, sources/jvm), built by `make install` with javac against pyspark's jars
and on the test session's class path: a batch read of a replicated topic (with its headers or without), of a topic
the coordinator keeps and of a typed topic with tombstones gives the schema and rows the Python source gives, in
Arrow columns handed to Spark as they were fetched, planned and read over the fabric protocol alone (the
coordinator's protocol port found from its Flight port). It takes format("fabric")'s options alike: several topics
(subscribe, subscribePattern, assign), offsets per partition, by group and by time, minPartitions, and a stream's
admission limits and group commits, each compared with format("fabric") on the same options; bad options are named
with the Python source's words. A stream runs in real-time mode (trigger(realTime=...)) into the foreach sink,
every record once and in order. What a stream meets as the cluster changes under it: test_jvm_reader_failover.py;
data loss: test_jvm_reader_data_loss.py."""
from __future__ import annotations

import calendar
import json
import os
import re
import subprocess
import sys
import time

import pyarrow as pa
import pytest

import fabric
from fabric.common.waiting import wait_for
from fabric.sinks.foreach_writer import TopicWriter
from fabric.sources.progress import offsets_behind_latest
from fabric.spark import jar

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]


TIMED_MS = int(time.time() - 3600) * 1000  # the records of the timed topics are a second apart from here
TYPED = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])


@pytest.fixture(scope="module")
def topics(shared_cluster) -> dict[str, int]:
    """A replicated topic (2 partitions, RF 3) with keys, null keys, empty values and headers; one the coordinator
    keeps; a typed one with tombstones and null fields: the records each holds."""
    counts = {"jvm-replicated": 500, "jvm-kept": 30, "jvm-typed": 40, "jvm-typed-too": 40, "jvm-timed": 40,
              "jvm-timed-kept": 40}
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-replicated", partitions=2, replication_factor=3)
        fab.create_topic("jvm-kept", partitions=1)
        fab.create_topic("jvm-typed", partitions=1, replication_factor=3, schema=TYPED)
        fab.create_topic("jvm-typed-too", partitions=1, schema=TYPED)
        fab.create_topic("jvm-timed", partitions=2, replication_factor=3)
        fab.create_topic("jvm-timed-kept", partitions=1)
        with fab.producer() as producer:
            for topic in ("jvm-replicated", "jvm-kept"):
                for i in range(counts[topic]):
                    producer.send(topic, b"" if i % 11 == 0 else b"value-%d" % i,
                                  key=None if i % 7 == 0 else b"key-%d" % i, partition=i % (2 if "rep" in topic else 1),
                                  headers=[("n", b"%d" % i), ("empty", None)] if i % 5 == 0 else None)
            for i in range(counts["jvm-typed"]):
                value = None if i % 9 == 0 else {"user": f"u{i}", "amount": None if i % 4 == 0 else i, "at": i * 1000}
                producer.send("jvm-typed", value, key=b"key-%d" % (i % 6))
                producer.send("jvm-typed-too", value, key=b"key-%d" % (i % 5))
            for i in range(40):  # a second apart, from TIMED_MS
                producer.send("jvm-timed", b"timed-%d" % i, partition=i % 2, timestamp=TIMED_MS + 1000 * i)
                producer.send("jvm-timed-kept", b"timed-%d" % i, timestamp=TIMED_MS + 1000 * i)
    return counts


def rows(df) -> list[tuple]:
    return [tuple(r) for r in sorted(df.collect(), key=lambda r: (r["topic"], r["partition"], r["offset"]))]


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


PARITY = [  # options read alike by both sources, besides url (all over the module's topics)
    {"subscribe": "jvm-replicated,jvm-kept"},
    {"subscribe": " jvm-kept , jvm-replicated,jvm-kept"},
    {"subscribePattern": "jvm-(replicated|kept)"},
    {"subscribePattern": "jvm-typed.*", "includeHeaders": "true"},
    {"assign": '{"jvm-replicated": [1], "jvm-kept": [0]}'},
    {"subscribe": "jvm-replicated,jvm-kept", "startingOffsets": '{"jvm-replicated": {"0": 10, "1": -2}}',
     "endingOffsets": '{"jvm-replicated": {"0": 100, "1": -1}, "jvm-kept": {"0": 20}}'},
    {"assign": '{"jvm-replicated": [0, 1]}', "startingOffsets": '{"jvm-replicated": {"1": 249}}'},
    {"subscribe": "jvm-replicated,jvm-kept", "minPartitions": "7"},
    {"subscribe": "jvm-kept", "minPartitions": "100"},  # more than the offsets: one task an offset
    {"subscribe": "jvm-replicated", "endingOffsets": '{"jvm-replicated": {"0": 0, "1": 0}}', "minPartitions": "3"},
]


@pytest.mark.parametrize("options", PARITY, ids=lambda options: ",".join(f"{k}={v}" for k, v in options.items()))
def test_the_jvm_reader_takes_the_python_sources_options_alike(spark, shared_cluster, topics, options) -> None:
    """Same schema, same rows and (minPartitions) the same number of tasks as format("fabric") on the same options."""
    def read(source: str):
        return spark.read.format(source).options(url=shared_cluster.url, **options).load()
    jvm, python = read("fabric-jvm"), read("fabric")
    assert jvm.schema == python.schema
    got = rows(jvm)
    assert got == rows(python)
    if "endingOffsets" not in options and "startingOffsets" not in options and "assign" not in options:
        assert len(got) == sum(topics[r.topic] for r in jvm.select("topic").distinct().collect())
    if "minPartitions" in options:  # an empty read has no task (a Python data source's read gets one all the same)
        assert jvm.rdd.getNumPartitions() == (python.rdd.getNumPartitions() if got else 0)
        assert jvm.rdd.getNumPartitions() >= min(int(options["minPartitions"]), len(got))


def test_a_group_start_and_times_resolve_as_the_python_sources(spark, shared_cluster, topics) -> None:
    """startingOffsets=group starts at groupId's committed offsets (earliest where it has none); a time starts at the
    first record at or after it, at the coordinator or at a partition's leader, and ends before it."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.cluster.commit_offsets("jvm-group", {("jvm-timed", 0): 7, ("jvm-timed-kept", 0): 25})
    cases = [({"startingOffsets": "group", "groupId": "jvm-group"}, 13 + 20 + 15),
             ({"startingTimestamp": str(TIMED_MS + 10_500)}, 29 + 29),
             ({"endingTimestamp": str(TIMED_MS + 10_000)}, 10 + 10),
             ({"startingOffsetsByTimestamp": json.dumps({"jvm-timed": {"1": TIMED_MS + 30_000},
                                                         "jvm-timed-kept": {"0": TIMED_MS}})}, 20 + 5 + 40),
             ({"startingTimestamp": str(TIMED_MS + 39_001), "startingOffsetsByTimestampStrategy": "latest"}, 0),
             ({"startingTimestamp": str(TIMED_MS + 5_000), "endingOffsetsByTimestamp": json.dumps(
                 {"jvm-timed-kept": {"0": TIMED_MS + 7_000}})}, 35 + 2)]
    for options, count in cases:
        def read(source: str, options: dict[str, str] = options):
            return spark.read.format(source).options(url=shared_cluster.url, subscribe="jvm-timed,jvm-timed-kept",
                                                     **options).load()
        got = rows(read("fabric-jvm"))
        assert got == rows(read("fabric")) and len(got) == count, (options, len(got))


BAD = [  # options both sources refuse, and the words both name the problem with
    ({"subscribe": "jvm-kept", "subscribePattern": "jvm-.*"}, "needs exactly one of 'subscribe'"),
    ({"startingOffsets": "jvm-kept"}, "use earliest, latest, group or JSON offsets"),
    ({"subscribe": " , "}, "name at least one topic"),
    ({"subscribePattern": "jvm-(", "subscribe": None}, "not a valid regular expression"),
    ({"assign": '{"jvm-kept": 0}', "subscribe": None}, "is not mapped to its partitions"),
    ({"assign": '{"jvm-kept": [3]}', "subscribe": None}, "has partitions 0..0"),
    ({"assign": '{"jvm-kept": []}', "subscribe": None}, "topic 'jvm-kept' lists no partitions: name them"),
    ({"startingOffsets": "latest"}, "a batch query cannot start at latest"),
    ({"endingOffsets": "earliest"}, "a batch query cannot end at earliest"),
    ({"startingOffsets": '{"jvm-kept": {"0": -3}}'}, "offsets are >= 0, or -2 (earliest) / -1 (latest)"),
    ({"startingOffsets": '{"jvm-kept": {"0": -1}}'}, "a batch query cannot use -1 in startingOffsets"),
    ({"startingOffsets": '{"jvm-kept": {"0": 100000}}'}, "is past its end offset 30"),
    ({"startingOffsets": '{"jvm-replicated": {"0": 1}}'}, "names partitions"),
    ({"startingOffsets": '{"jvm-kept": {"0": 20}}', "endingOffsets": '{"jvm-kept": {"0": 10}}'},
     "is after the ending offset 10"),
    ({"startingOffsets": "group"}, "set option 'groupId'"),
    ({"endingOffsets": "group"}, "'group' is only a starting position"),
    ({"startingTimestamp": "yesterday"}, "must be milliseconds since the epoch"),
    ({"startingTimestamp": str(2**42)}, "has a timestamp >= 4398046511104 ms"),
    ({"startingOffsetsByTimestampStrategy": "first"}, "must be error or latest"),
    ({"includeHeaders": "yes"}, "must be true or false"),
    ({"minPartitions": "0"}, "must be a positive whole number"),
    ({"maxOffsetsPerTrigger": "10"}, "applies to streaming queries only (readStream)"),
    ({"groupIdPrefix": " "}, "must not be empty"),
    ({"groupIdPrefix": "g" * 1000}, "are invalid: group id is longer than 1024 characters"),
    ({"groupId": ""}, "group id must be a non-empty string"),
    ({"subscribe": "jvm-kept,jvm kept!"}, "contains illegal characters [' ', '!']"),
    ({"assign": '{"__mine": [0]}', "subscribe": None}, "starts with '__', which is reserved"),
    ({"subscribe": "jvm-kept,jvm-nowhere"}, "do not exist in the fabric"),
    ({"subscribe": "jvm-typed,jvm-kept"}, "the subscribed topics have different value schemas"),
    ({"bogus": "1"}, "unknown fabric source option(s)"),
    ({"kafka.group.id": "g"}, "has no Kafka client to pass 'kafka.' options to"),
    ({"kafka.bootstrap.servers": "broker"}, "option 'kafka.bootstrap.servers': bootstrap servers are "
                                            "host:port[,host:port] (a coordinator service's), got 'broker'"),
    ({"kafka.bootstrap.servers": "elsewhere:9093"}, "options 'url' and 'kafka.bootstrap.servers' name different "
                                                    "fabrics; give one of them"),
]


@pytest.mark.parametrize("options, named", BAD, ids=[named for _, named in BAD])
def test_bad_options_are_named_as_the_python_source_names_them(spark, shared_cluster, topics, options,
                                                               named) -> None:
    for source in ("fabric-jvm", "fabric"):
        reader = spark.read.format(source).option("url", shared_cluster.url)
        for name, value in {"subscribe": "jvm-kept", **options}.items():
            if value is not None:
                reader = reader.option(name, value)
        with pytest.raises(Exception, match=re.escape(named)) as refused:
            reader.load().collect()
        if source == "fabric-jvm":  # the words first, before any Java stack trace
            assert named in str(refused.value).split("\tat ")[0], str(refused.value)[:3000]


def test_the_jvm_reader_refuses_a_url_it_cannot_read(spark, shared_cluster, topics) -> None:
    """Where the two differ: file:// is read by the Python source only (format("fabric") hands it to it)."""
    reader = spark.read.format("fabric-jvm").options(url="file:///tmp/x", subscribe="jvm-kept")
    with pytest.raises(Exception, match="must be a fabric:// or fabric\\+tls:// URL"):
        reader.load().collect()


def test_the_jvm_reader_reads_a_tls_cluster_and_checks_its_certificate(spark, node_cluster, tls_files, self_signed,
                                                                       monkeypatch) -> None:
    """fabric+tls://: format("fabric") reads a cluster that serves TLS only with the JVM reader, its Flight status
    call and protocol connections checked against the URL's CA (?ca=, read on the driver); a CA that did not sign the
    servers' certificate is refused, naming TLS."""
    cert, key = tls_files
    monkeypatch.setenv("FABRIC_TLS_CA", cert)  # the servers' and this process's clients' trust
    cluster = node_cluster(nodes=1, tls=(cert, key))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("sealed", partitions=2, replication_factor=1)
        with fab.producer() as producer:
            for i in range(20):
                producer.send("sealed", b"s-%d" % i, partition=i % 2)
    df = spark.read.format("fabric").options(url=f"{cluster.url}?ca={cert}", subscribe="sealed").load()
    assert sorted(r.value for r in df.collect()) == sorted(b"s-%d" % i for i in range(20))
    assert "fabric JVM reader" in df._jdf.queryExecution().executedPlan().toString()
    other, _ = self_signed("other")  # a CA that signed nothing the servers hold
    refused = "TLS with the Flight port at 127.0.0.1:[0-9]+ failed: Path does not chain with any of the trust anchors"
    with pytest.raises(Exception, match=refused):
        spark.read.format("fabric").options(url=f"{cluster.url}?ca={other}", subscribe="sealed").load().collect()


def test_without_javac_the_jar_is_not_built_and_says_why(tmp_path) -> None:
    bare = {**os.environ, "PATH": str(tmp_path)}  # no javac (nor anything else) on PATH
    done = subprocess.run([sys.executable, "-c", "import sys; from fabric.spark import jar; "
                           "sys.exit(0 if jar.build() is None else 1)"], env=bare, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "javac (a JDK) is not on PATH" in done.stderr and 'format("fabric") reads with the Python source' in \
        done.stderr


def assert_offsets_behind_latest(source: dict) -> None:
    """A JVM stream's progress carries the metrics fabric.sources.progress computes for the Python source's: equal,
    but for the average, which the progress shows to one decimal."""
    metrics = source["metrics"]
    expected = offsets_behind_latest(source)
    assert metrics.keys() == expected.keys(), source
    assert all(abs(float(metrics[name]) - float(expected[name])) < 0.05 for name in metrics), source


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


@pytest.mark.parametrize("options", [{"maxBytesPerTrigger": "6000"},
                                     {"maxOffsetsPerTrigger": "90", "maxBytesPerTrigger": "9000",
                                      "minOffsetsPerTrigger": "1000"}])
def test_a_stream_admits_the_batches_the_python_sources_admit_and_commits_them_to_its_group(
        spark, shared_cluster, topics, tmp_path, options) -> None:
    """trigger(availableNow=True) runs over two topics with the stream's byte and offset limits (a run that must end
    never waits for minOffsetsPerTrigger): the same batches as format("fabric")'s, every record once, and groupId's
    committed offsets where format("fabric")'s group's are."""
    group = {source: f"jvm-admit-{source}-{len(options)}" for source in ("fabric-jvm", "fabric")}
    batches, read = {}, {}
    for source in ("fabric-jvm", "fabric"):
        name = f"admit_{source.replace('-', '_')}_{len(options)}"
        query = (spark.readStream.format(source).options(url=shared_cluster.url, subscribe="jvm-replicated,jvm-kept",
                                                         startingOffsets="earliest", groupId=group[source], **options)
                 .load().writeStream.format("memory").queryName(name).trigger(availableNow=True)
                 .option("checkpointLocation", str(tmp_path / name)).start())
        assert query.awaitTermination(300), "the availableNow run did not end"
        batches[source] = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        for progress in query.recentProgress if source == "fabric-jvm" else ():  # Kafka's metrics, both topics'
            assert_offsets_behind_latest(progress["sources"][0])
        read[source] = sorted(tuple(r) for r in spark.table(name).select("topic", "partition", "offset").collect())
    assert read["fabric-jvm"] == read["fabric"] and len(read["fabric"]) == topics["jvm-replicated"] + topics["jvm-kept"]
    assert batches["fabric-jvm"] == batches["fabric"] and len(batches["fabric"]) > 2
    with fabric.connect(shared_cluster.url) as fab:
        def committed(source: str) -> dict:
            return {tp: c.offset for tp, c in fab.cluster.coordinator.committed(group[source]).items()}
        ends = {(t, p): fab.cluster.partition_state(t, p).end_offset for t, p in committed("fabric")}
        assert wait_for(lambda: committed("fabric-jvm") == committed("fabric") == ends, 60, "the groups' commits")


def test_a_pattern_stream_reads_topics_created_while_it_runs_and_commits_to_a_generated_group(
        spark, shared_cluster, tmp_path) -> None:
    """subscribePattern is matched anew at every micro-batch: a matching topic created while the stream runs is read
    from its start; groupIdPrefix names the group the stream commits to, <prefix>-<uuid>."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-pattern-a", partitions=1)
        with fab.producer() as producer:
            for i in range(10):
                producer.send("jvm-pattern-a", b"a-%d" % i)
        query = (spark.readStream.format("fabric-jvm")
                 .options(url=shared_cluster.url, subscribePattern="jvm-pattern-.*", startingOffsets="earliest",
                          groupIdPrefix="jvm-pattern").load().writeStream.format("memory").queryName("jvm_pattern")
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            query.processAllAvailable()
            assert spark.table("jvm_pattern").count() == 10
            fab.create_topic("jvm-pattern-b", partitions=2, replication_factor=3)
            with fab.producer() as producer:
                for i in range(15):
                    producer.send("jvm-pattern-b", b"b-%d" % i, partition=i % 2)
            wait_for(lambda: spark.table("jvm_pattern").count() == 25, 120, "the new topic's records")
            got = sorted(r.value for r in spark.table("jvm_pattern").collect())
            assert got == sorted([b"a-%d" % i for i in range(10)] + [b"b-%d" % i for i in range(15)])

            def generated() -> dict:
                groups = [g for g in fab.cluster.coordinator.list_groups() if g.startswith("jvm-pattern-")]
                return {tp: c.offset for g in groups for tp, c in fab.cluster.coordinator.committed(g).items()}
            wait_for(lambda: generated().get(("jvm-pattern-a", 0)) == 10, 120, "the generated group's commit")
        finally:
            query.stop()


def test_a_stream_restarted_on_its_checkpoint_reads_on_where_it_stopped(spark, shared_cluster, tmp_path) -> None:
    """The checkpoint holds Kafka's JSON offsets of every topic read (one topic's, as an earlier JVM reader wrote
    them, is the same JSON): a restarted stream reads only what came since, of each topic."""
    topics = ("jvm-restart-a", "jvm-restart-b")

    def produce(fab, tag: bytes) -> None:
        with fab.producer() as producer:
            for i in range(6):  # 2 to topic a, 2 to each partition of topic b
                producer.send(topics[0] if i < 2 else topics[1], b"%s-%d" % (tag, i), partition=0 if i < 2 else i % 2)

    def run() -> list[bytes]:
        """The values the stream has written, after one more run (a file sink: it recovers from its checkpoint)."""
        query = (spark.readStream.format("fabric-jvm")
                 .options(url=shared_cluster.url, subscribe=",".join(topics), startingOffsets="earliest").load()
                 .select("value").writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        assert query.awaitTermination(300), "the availableNow run did not end"
        return sorted(r.value for r in spark.read.parquet(str(tmp_path / "out")).collect())

    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic(topics[0], partitions=1)
        fab.create_topic(topics[1], partitions=2, replication_factor=3)
        produce(fab, b"first")
        assert run() == sorted(b"first-%d" % i for i in range(6))
        produce(fab, b"second")
    assert run() == sorted([b"first-%d" % i for i in range(6)] + [b"second-%d" % i for i in range(6)])
    offsets = max((f for f in (tmp_path / "checkpoint" / "offsets").iterdir() if f.name.isdigit()),
                  key=lambda f: int(f.name))
    assert json.loads(offsets.read_text().splitlines()[-1]) == {"jvm-restart-a": {"0": 4},
                                                               "jvm-restart-b": {"0": 4, "1": 4}}


def test_a_stream_waits_for_min_offsets_per_trigger_until_max_trigger_delay(spark, shared_cluster, tmp_path) -> None:
    """Fewer new offsets than minOffsetsPerTrigger wait, until maxTriggerDelay has passed: then they are one batch."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-min", partitions=1)
        with fab.producer() as producer:
            for i in range(20):
                producer.send("jvm-min", b"m-%d" % i)
    started = time.time()
    query = (spark.readStream.format("fabric-jvm").options(url=shared_cluster.url, subscribe="jvm-min",
                                                            startingOffsets="earliest", minOffsetsPerTrigger="1000",
                                                            maxTriggerDelay="4s")
             .load().writeStream.format("memory").queryName("jvm_min")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        wait_for(lambda: spark.table("jvm_min").count() == 20, 120, "the delayed batch")
        # (the memory sink shows the rows when the batch is written, its progress comes once the trigger ends)
        first = wait_for(lambda: next((p for p in query.recentProgress if p["numInputRows"]), None), 60,
                         "the delayed batch's progress")
        assert first["numInputRows"] == 20
        # when the trigger that admitted them began (UTC, e.g. 2026-01-01T00:00:00.000Z): not before the 4 s delay,
        # less the second the format drops
        trigger = calendar.timegm(time.strptime(first["timestamp"][:19], "%Y-%m-%dT%H:%M:%S"))
        assert trigger >= started + 4 - 1, (first["timestamp"], started)
    finally:
        query.stop()


def test_a_stream_refuses_an_ending_offset_as_the_python_source_does(spark, shared_cluster, topics, tmp_path) -> None:
    for source in ("fabric-jvm", "fabric"):
        stream = spark.readStream.format(source).options(url=shared_cluster.url, subscribe="jvm-kept",
                                                        endingOffsets="latest")
        try:
            with pytest.raises(Exception, match="endingOffsets/endingTimestamp apply to batch queries only"):
                stream.load().writeStream.format("noop").option("checkpointLocation", str(tmp_path / source)) \
                    .start().awaitTermination(120)
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


def test_a_reader_with_a_rack_reads_from_the_in_sync_replica_there(spark, racked_cluster, replication) -> None:
    """KIP-392: clientRack=rack-k makes every task read from node k (rack-k), the leader of some partitions and an
    in-sync follower of the others, while the other nodes serve no reader; a bad rack is named."""
    nodes = racked_cluster.nodes
    with fabric.connect(racked_cluster.url) as fab:
        fab.create_topic("jvm-racked", partitions=3, replication_factor=3, config={"min.insync.replicas": "3"})
        with fab.producer() as producer:
            assert all(f.result(60) for f in [producer.send("jvm-racked", b"r-%d" % i, partition=i % 3)
                                              for i in range(300)])
        for p in range(3):  # a follower serves up to its own high watermark: let it know them all
            assert replication.wait_in_sync(fab, nodes, "jvm-racked", p) == 100
        leaders = [replication.state(fab, "jvm-racked", p).leader for p in range(3)]
    near = min(nodes, key=leaders.count)
    assert leaders.count(near) < 3  # node `near` follows at least one partition
    before = {n: replication.fetched_bytes(node) for n, node in nodes.items()}
    read = spark.read.format("fabric-jvm").options(url=racked_cluster.url, subscribe="jvm-racked")
    got = read.option("clientRack", f"rack-{near}").load().select("value").collect()
    after = {n: replication.fetched_bytes(node) for n, node in nodes.items()}
    assert sorted(r.value for r in got) == sorted(b"r-%d" % i for i in range(300))
    assert after[near] > before[near]
    assert {n: after[n] - before[n] for n in nodes if n != near} == {n: 0 for n in nodes if n != near}, leaders
    with pytest.raises(Exception, match="a rack name has leading or trailing whitespace"):
        read.option("clientRack", " rack-1").load().collect()


def test_format_fabric_reads_clusters_with_the_jvm_reader_and_hands_the_rest_to_the_python_source(
        spark, shared_cluster, topics, tmp_path) -> None:
    """With the jar on the class path, format("fabric") is the JVM reader for a fabric:// read (its plan says so), the
    Python source for a file:// read or with conf spark.fabric.jvmReader=false, and the Python sink for writes."""
    def scan(url: str, topic: str) -> tuple[int, str]:
        df = spark.read.format("fabric").options(url=url, subscribe=topic).load()
        return df.count(), df._jdf.queryExecution().executedPlan().toString()

    count, plan = scan(shared_cluster.url, "jvm-replicated")
    assert count == topics["jvm-replicated"] and "fabric JVM reader" in plan
    local = f"file://{tmp_path / 'fabric'}"
    with fabric.connect(local) as fab:
        fab.create_topic("here")
        with fab.producer() as producer:
            for i in range(3):
                producer.send("here", b"%d" % i)
    count, plan = scan(local, "here")
    assert count == 3 and "fabric JVM reader" not in plan
    spark.conf.set("spark.fabric.jvmReader", "false")
    try:
        count, plan = scan(shared_cluster.url, "jvm-replicated")
        assert count == topics["jvm-replicated"] and "fabric JVM reader" not in plan
    finally:
        spark.conf.unset("spark.fabric.jvmReader")
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-written", partitions=1, replication_factor=3)
    (spark.createDataFrame([(b"a",), (b"b",)], "value binary").write.format("fabric")
     .options(url=shared_cluster.url, topic="jvm-written").mode("append").save())
    assert scan(shared_cluster.url, "jvm-written")[0] == 2


def test_a_query_naming_kafkas_bootstrap_servers_writes_and_reads_the_cluster(spark, shared_cluster, topics) -> None:
    """A Spark Kafka query's `kafka.bootstrap.servers` (the coordinator services' host:port list, no url) names the
    fabric for the sink and for both readers: the rows written are the rows read, by the JVM reader and by the
    Python source (conf spark.fabric.jvmReader=false)."""
    servers = shared_cluster.url.removeprefix("fabric://")
    assert "://" not in servers
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-bootstrap", partitions=2, replication_factor=3)
    written = spark.createDataFrame([(b"k%d" % i, b"v%d" % i) for i in range(20)], "key binary, value binary")
    (written.write.format("fabric").option("kafka.bootstrap.servers", servers).option("topic", "jvm-bootstrap")
     .mode("append").save())

    def read(source: str) -> list[tuple]:
        df = (spark.read.format(source).option("kafka.bootstrap.servers", servers)
              .option("subscribe", "jvm-bootstrap").load())
        return sorted((r["key"], r["value"]) for r in df.collect())
    expected = sorted((bytes(k), bytes(v)) for k, v in written.collect())
    assert [(bytes(k), bytes(v)) for k, v in read("fabric-jvm")] == expected
    spark.conf.set("spark.fabric.jvmReader", "false")
    try:
        assert [(bytes(k), bytes(v)) for k, v in read("fabric")] == expected
    finally:
        spark.conf.unset("spark.fabric.jvmReader")
