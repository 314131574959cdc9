"""The fabric Spark source, batch and streaming, against a real local Spark, on an embedded fabric and on a
replicated cluster. (Its offset planning without Spark: tests/unit/test_source_offsets.py.)"""
from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from chispa import assert_df_equality

import fabric
from fabric.client.url import ENV_URL
from fabric.common.errors import InvalidConfigError
from fabric.common.waiting import wait_for
from fabric.sources.progress import offsets_behind_latest
from fabric.spark import jar
from fabric.spark.options import CLIENT_RACK_CONF, ENV_CLIENT_RACK, URL_CONF, resolve_client_rack, resolve_url
from fabric.spark.session import use_fabric_confs

pytestmark = [pytest.mark.spark]

BASE_MS = (int(time.time()) - 3600) * 1000  # record i is stamped BASE_MS + i s: recent, so retention keeps it
RECORD = "key binary, value binary, topic string, partition int, offset long"
JVM_READER_CONF = "spark.fabric.jvmReader"


@pytest.fixture(params=["file", "cluster", "cluster-python"])
def fabric_url(request, fabric_dir):
    """Every source test runs on an embedded fabric and on a replicated cluster of three data nodes (every topic
    with three replicas, read from the leaders): each option must work the same on both. On the cluster it runs
    twice, through both implementations of format("fabric"): the JVM reader (where make install built its jar:
    "cluster") and the Python source (conf spark.fabric.jvmReader=false: "cluster-python"); where they must differ,
    the test says why (jvm_reads). The cluster is shared by the run: a test's topics and groups are deleted after
    it."""
    if request.param == "file":
        yield f"file://{fabric_dir}"
        return
    if request.param == "cluster-python" and jar.path() is None:
        pytest.skip("without the JVM reader's jar, the cluster case already reads with the Python source")
    url = request.getfixturevalue("replicated_cluster").url
    spark = request.getfixturevalue("spark")
    if request.param == "cluster-python":
        spark.conf.set(JVM_READER_CONF, "false")
    try:
        yield url
    finally:
        spark.conf.unset(JVM_READER_CONF)
    with fabric.connect(url) as fab:
        for topic in fab.list_topics():
            fab.delete_topic(topic)
        for group in fab.list_groups():
            fab.cluster.coordinator.delete_group(group)


def jvm_reads(spark, url: str) -> bool:
    """Whether format("fabric") reads `url` with the JVM reader here (a fabric:// URL, the jar on the class path, and
    conf spark.fabric.jvmReader not false), rather than with the Python source."""
    return (url.startswith("fabric://") and jar.path() is not None
            and spark.conf.get(JVM_READER_CONF, "true").lower() != "false")


def on_embedded_only(url: str, why: str) -> None:
    if url.startswith("fabric://"):
        pytest.skip(why)


def produce(fab, topic: str, per_partition: int, partitions: int = 2, start: int = 0,
            headers: bool = False) -> list[tuple]:
    """Send `per_partition` records to each partition (record i has timestamp BASE_MS + i seconds);
    returns the expected (key, value, topic, partition, offset) rows."""
    producer = fab.producer()
    rows = []
    for p in range(partitions):
        for i in range(start, start + per_partition):
            key, value = f"k{p}-{i}".encode(), f"v{p}-{i}".encode()
            producer.send(topic, value, key=key, partition=p, timestamp=BASE_MS + i * 1000,
                          headers=[("h", f"{i}".encode())] if headers else None)
            rows.append((key, value, topic, p, i))
    producer.flush()
    producer.close()
    return rows


def reader(spark, url: str, **options):
    return spark.read.format("fabric").option("url", url).options(**options)


def expected(spark, rows: list[tuple]):
    return spark.createDataFrame(rows, RECORD)


def records(df):
    return df.select("key", "value", "topic", "partition", "offset")


def offsets(df) -> list[tuple[int, int]]:
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def stream(spark, url: str, name: str, checkpoint, trigger: dict | None = None, files=None, **options):
    """Start a streaming query from the fabric into the memory table `name` (or Parquet files in `files`,
    a sink that can restart from its checkpoint)."""
    df = spark.readStream.format("fabric").option("url", url).options(**options).load()
    writer = df.writeStream.queryName(name).option("checkpointLocation", str(checkpoint))
    writer = writer.format("memory") if files is None else writer.format("parquet").option("path", str(files))
    return writer.trigger(**(trigger or {"availableNow": True})).start()


def run_available_now(spark, url: str, name: str, checkpoint, files=None, **options):
    query = stream(spark, url, name, checkpoint, files=files, **options)
    query.awaitTermination(120)
    return query, spark.table(name) if files is None else spark.read.parquet(str(files))


# -- batch ---------------------------------------------------------------------------------------------
def test_batch_reads_every_record_with_kafka_schema(spark, fab, fabric_url):
    fab.create_topic("orders", partitions=2)
    rows = produce(fab, "orders", 5)
    df = reader(spark, fabric_url, subscribe="orders").load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    assert [f.name for f in df.schema.fields if not f.nullable] == [  # never null, so Spark skips the checks
        "topic", "partition", "offset", "timestamp", "timestampType"]
    assert_df_equality(records(df), expected(spark, rows), ignore_row_order=True, ignore_nullable=True)
    stamps = df.selectExpr("partition", "offset", "unix_millis(timestamp) AS ms", "timestampType").collect()
    assert sorted((r.partition, r.offset, r.ms, r.timestampType) for r in stamps) == sorted(
        (p, i, BASE_MS + i * 1000, 0) for p in range(2) for i in range(5))


def test_batch_read_keeps_each_frames_timestamp_type(request, spark, fab, fabric_url):
    """Frames are combined into large batches for Spark, but never across a change of timestamp type."""
    fab.create_topic("stamps", partitions=1)
    produce(fab, "stamps", 3, partitions=1)
    fab.alter_topic_config("stamps", {"message.timestamp.type": "LogAppendTime"})
    if fabric_url.startswith("fabric://"):  # nodes learn a config change with the controller's next view
        nodes = request.getfixturevalue("replicated_cluster").nodes.values()
        wait_for(lambda: all(node.status()["topics"].get("stamps", {}).get("message.timestamp.type")
                             == "LogAppendTime" for node in nodes), what="the nodes to apply the new timestamp type")
    produce(fab, "stamps", 2, partitions=1, start=3)
    df = reader(spark, fabric_url, subscribe="stamps").load()
    assert sorted((r.offset, r.timestampType) for r in df.collect()) == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1)]


def test_subscribe_pattern_and_assign(spark, fab, fabric_url):
    for topic in ("logs-a", "logs-b", "other"):
        fab.create_topic(topic, partitions=2)
        produce(fab, topic, 2)
    by_pattern = reader(spark, fabric_url, subscribePattern="logs-.*").load()
    assert sorted({r.topic for r in by_pattern.collect()}) == ["logs-a", "logs-b"]
    assert by_pattern.count() == 8
    assigned = reader(spark, fabric_url, assign='{"logs-a":[1],"other":[0]}').load()
    assert sorted({(r.topic, r.partition) for r in assigned.collect()}) == [("logs-a", 1), ("other", 0)]
    assert assigned.count() == 4


def test_starting_and_ending_offsets_json(spark, fab, fabric_url):
    fab.create_topic("t", partitions=2)
    rows = produce(fab, "t", 6)
    missing_partition = reader(spark, fabric_url, subscribe="t", startingOffsets='{"t":{"0":4}}').load()
    assert offsets(missing_partition) == [(0, 4), (0, 5)] + [(1, i) for i in range(6)]
    special = reader(spark, fabric_url, subscribe="t", startingOffsets='{"t":{"0":-2,"1":2}}',
                     endingOffsets='{"t":{"0":3,"1":-1}}').load()
    assert offsets(special) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 3), (1, 4), (1, 5)]
    assert_df_equality(records(special), expected(spark, [r for r in rows if (r[3], r[4]) in offsets(special)]),
                       ignore_row_order=True, ignore_nullable=True)


def test_starting_and_ending_timestamps(spark, fab, fabric_url):
    fab.create_topic("t", partitions=2)
    produce(fab, "t", 6)
    from_ts = reader(spark, fabric_url, subscribe="t", startingTimestamp=str(BASE_MS + 4000)).load()
    assert offsets(from_ts) == [(0, 4), (0, 5), (1, 4), (1, 5)]
    per_partition = reader(spark, fabric_url, subscribe="t",
                           startingOffsetsByTimestamp=f'{{"t":{{"1":{BASE_MS + 5000}}}}}').load()
    assert offsets(per_partition) == [(0, i) for i in range(6)] + [(1, 5)]
    until = reader(spark, fabric_url, subscribe="t", endingTimestamp=str(BASE_MS + 2000)).load()
    assert offsets(until) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        reader(spark, fabric_url, subscribe="t", startingTimestamp=str(BASE_MS + 60_000)).load().collect()
    latest = reader(spark, fabric_url, subscribe="t", startingTimestamp=str(BASE_MS + 60_000),
                    startingOffsetsByTimestampStrategy="latest").load()
    assert latest.count() == 0


def test_min_partitions_splits_ranges_into_tasks(spark, fab, fabric_url):
    fab.create_topic("t", partitions=1)
    rows = produce(fab, "t", 40, partitions=1)
    df = reader(spark, fabric_url, subscribe="t", minPartitions="4").load()
    assert df.rdd.getNumPartitions() == 4
    assert reader(spark, fabric_url, subscribe="t").load().rdd.getNumPartitions() == 1
    assert_df_equality(records(df), expected(spark, rows), ignore_row_order=True, ignore_nullable=True)


def test_include_headers(spark, fab, fabric_url):
    fab.create_topic("t", partitions=1)
    produce(fab, "t", 3, partitions=1, headers=True)
    df = reader(spark, fabric_url, subscribe="t", includeHeaders="true").load()
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    got = {r.offset: [(h.key, bytes(h.value)) for h in r.headers] for r in df.collect()}
    assert got == {i: [("h", str(i).encode())] for i in range(3)}
    assert "headers" not in reader(spark, fabric_url, subscribe="t").load().columns


def test_user_schema_projects_columns(spark, fab, fabric_url):
    fab.create_topic("t", partitions=2)
    rows = produce(fab, "t", 3)
    df = reader(spark, fabric_url, subscribe="t").schema("offset long, value binary").load()
    assert df.columns == ["offset", "value"]
    assert sorted((r.offset, bytes(r.value)) for r in df.collect()) == sorted((r[4], r[1]) for r in rows)
    with pytest.raises(Exception, match="unknown column"):
        reader(spark, fabric_url, subscribe="t").schema("offset long, nope string").load().collect()


def test_typed_topic_returns_value_columns(spark, fab, fabric_url):
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
    fab.create_topic("typed", partitions=1, schema=schema)
    fab.producer().send_batch("typed", pa.table({"id": [1, 2], "name": ["a", "b"], "score": [0.5, 1.5]}))
    df = reader(spark, fabric_url, subscribe="typed").load()
    assert df.columns == ["key", "id", "name", "score", "topic", "partition", "offset", "timestamp",
                          "timestampType"]
    assert [(r.id, r.name, r.score, r.offset) for r in df.orderBy("offset").collect()] == [
        (1, "a", 0.5, 0), (2, "b", 1.5, 1)]
    projected = reader(spark, fabric_url, subscribe="typed").schema("name string, id long").load()
    assert sorted(tuple(r) for r in projected.collect()) == [("a", 1), ("b", 2)]


@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of 'subscribe'"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of 'subscribe'"),
    ({"subscribe": "t", "startingOffsets": "yesterday"}, "startingOffsets"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "cannot start at latest"),
    ({"subscribe": "t", "startingOfsets": "earliest"}, "unknown fabric source option"),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, "must be true or false"),
    ({"subscribe": "t", "minPartitions": "0"}, "positive whole number"),
    ({"subscribe": "t", "maxOffsetsPerTrigger": "10"}, "streaming queries only"),
    ({"subscribe": "nope"}, "do not exist"),
    ({"assign": '{"t":[5]}'}, "has partitions 0..0"),
    ({"subscribePattern": "(unclosed"}, "not a valid regular expression"),
    ({"subscribe": "t", "clientRack": " "}, "for fabric source option 'clientRack'"),
    ({"subscribe": "t", "minOffsetsPerTrigger": "5"}, "streaming queries only"),
    ({"subscribe": "t", "kafka.bootstrap.servers": "broker:9092"}, "options 'url' and 'kafka.bootstrap.servers' "
                                                                   "name different fabrics"),
    ({"subscribe": "t", "kafka.group.id": "g"}, "'kafka.group.id': use option 'groupId' instead"),
])
def test_bad_options_fail_with_a_clear_error(spark, fab, fabric_url, options, message):
    fab.create_topic("t", partitions=1)
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(".", r"\.")):
        reader(spark, fabric_url, **options).load().collect()


def test_url_resolution_order(spark, monkeypatch, tmp_path):
    monkeypatch.setenv("FABRIC_URL", "fabric://env:1")
    spark.conf.set(URL_CONF, "fabric://conf:1")
    try:
        assert resolve_url({"URL": "fabric://option:1"}) == "fabric://option:1"
        assert resolve_url({}) == "fabric://conf:1"
    finally:
        spark.conf.unset(URL_CONF)
    assert resolve_url({}) == "fabric://env:1"
    monkeypatch.delenv("FABRIC_URL")
    monkeypatch.chdir(tmp_path)
    assert resolve_url({}) == f"file://{tmp_path}/fabric-data"


def test_client_rack_resolution_order(spark, monkeypatch):
    """Option clientRack, else conf spark.fabric.clientRack where the process has a session (here, the driver's
    own); else nothing is fixed and each task reads $FABRIC_CLIENT_RACK, which the driver's environment does not
    set."""
    monkeypatch.setenv(ENV_CLIENT_RACK, "driver-rack")
    spark.conf.set(CLIENT_RACK_CONF, "conf-rack")
    try:
        assert resolve_client_rack({"CLIENTRACK": "option-rack"}) == "option-rack"
        assert resolve_client_rack({}) == "conf-rack"
        spark.conf.set(CLIENT_RACK_CONF, "")
        with pytest.raises(InvalidConfigError, match="for Spark conf spark.fabric.clientRack: a rack name must not"):
            resolve_client_rack({})
    finally:
        spark.conf.unset(CLIENT_RACK_CONF)
    assert resolve_client_rack({}) is None


def test_spark_fabric_url_reaches_the_source_once_the_session_passes_its_confs_on(spark, fab, fabric_url):
    """pyspark 4.3 plans a Python data source in a planner Python worker that has no SparkSession and gets no
    session confs: spark.fabric.url alone does not point a read at a fabric (the error names the fabric the source
    looked in and how to point it), until use_fabric_confs (which fabric.spark's sessions and jobs call) registers
    the format with the confs in its Python environment."""
    on_embedded_only(fabric_url, "how confs reach the source does not depend on the fabric")
    fab.create_topic("t", partitions=1)
    with fab.producer() as producer:
        producer.send("t", b"x", partition=0)
    spark.conf.set(URL_CONF, fabric_url)
    try:
        with pytest.raises(Exception, match=r"do not exist in the fabric at .*option 'url', or \$FABRIC_URL") as error:
            spark.read.format("fabric").option("subscribe", "t").load().collect()
        assert f"at {fabric_url};" not in str(error.value)
        use_fabric_confs(spark)
        assert [r.value for r in spark.read.format("fabric").option("subscribe", "t").load().collect()] == [b"x"]
    finally:
        spark.conf.unset(URL_CONF)
        spark.sparkContext.environment.pop(ENV_URL, None)
        use_fabric_confs(spark)  # registered again without it: later tests see the session as before


# -- streaming -----------------------------------------------------------------------------------------
def test_stream_available_now_reads_everything(spark, fab, fabric_url, tmp_path):
    fab.create_topic("s", partitions=2)
    rows = produce(fab, "s", 5)
    _, table = run_available_now(spark, fabric_url, "s_all", tmp_path / "ck", subscribe="s",
                                 startingOffsets="earliest")
    assert_df_equality(records(table), expected(spark, rows), ignore_row_order=True, ignore_nullable=True)


def test_stream_max_offsets_per_trigger_makes_several_batches(spark, fab, fabric_url, tmp_path):
    fab.create_topic("s", partitions=2)
    produce(fab, "s", 10)
    query, table = run_available_now(spark, fabric_url, "s_limited", tmp_path / "ck", subscribe="s",
                                     startingOffsets="earliest", maxOffsetsPerTrigger="6")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 4 and max(sizes) <= 6 and sum(sizes) == 20
    assert table.count() == 20


def test_stream_source_metrics_as_kafka_reports_them_from_the_progress(spark, fab, fabric_url, tmp_path):
    """offsets_behind_latest computes Kafka's source metrics from a progress's offsets. The JVM reader reports the
    same in the progress's `metrics` map (ReportsSourceMetrics); pyspark's Python data source API carries none
    (fabric.sources.progress says why), so the Python source's map stays empty."""
    fab.create_topic("s", partitions=2)
    produce(fab, "s", 10)
    query, _ = run_available_now(spark, fabric_url, "s_metrics", tmp_path / "ck", subscribe="s",
                                 startingOffsets="earliest", maxOffsetsPerTrigger="6")
    sources = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
    jvm = jvm_reads(spark, fabric_url)  # if pyspark ever carries them, the Python source must report them too
    assert [source["metrics"] for source in sources] == [offsets_behind_latest(s) if jvm else {} for s in sources]
    assert offsets_behind_latest(sources[0]) == {  # the first batch read 3 of each partition's 10
        "minOffsetsBehindLatest": "7", "maxOffsetsBehindLatest": "7", "avgOffsetsBehindLatest": "7.0"}
    assert offsets_behind_latest(sources[-1])["maxOffsetsBehindLatest"] == "0"


def test_stream_max_bytes_per_trigger_limits_batches(spark, fab, fabric_url, tmp_path):
    fab.create_topic("s", partitions=1)
    produce(fab, "s", 30, partitions=1)
    per_record = fab.describe_topic("s").partitions[0].size_bytes / 30
    query, table = run_available_now(spark, fabric_url, "s_bytes", tmp_path / "ck", subscribe="s",
                                     startingOffsets="earliest", maxBytesPerTrigger=str(int(per_record * 10)))
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert len(sizes) >= 3 and max(sizes) <= 10 and sum(sizes) == 30
    assert table.count() == 30


def _fill_segments(fab, topic: str, batches: int) -> None:
    """Append `batches` frames of 20 records to partition 0; with segment.bytes=1024 each is a segment."""
    producer = fab.producer()
    for _ in range(batches):
        producer.send_batch(topic, pa.table({"value": [b"x" * 100] * 20, "partition": [0] * 20}))
    producer.close()


def _lose_unread_data(spark, fab, url: str, tmp_path) -> int:
    """Read a topic once, then produce more and let retention delete most of it before the next run.
    Returns the new log start offset."""
    fab.create_topic("lossy", partitions=1, config={"segment.bytes": 1024})
    _fill_segments(fab, "lossy", 2)
    run_available_now(spark, url, "lossy", tmp_path / "ck", files=tmp_path / "out", subscribe="lossy",
                      startingOffsets="earliest")
    _fill_segments(fab, "lossy", 4)
    fab.alter_topic_config("lossy", {"retention.bytes": 1})

    def deleted_unread() -> int | None:  # (a data node learns the config with its next heartbeat)
        fab.enforce_retention("lossy")
        start = fab.describe_topic("lossy").partitions[0].start_offset
        return start if start > 40 else None
    return wait_for(deleted_unread, what="retention to delete records the query has not read")


def test_stream_fails_on_data_loss_by_default(spark, fab, fabric_url, tmp_path):
    start = _lose_unread_data(spark, fab, fabric_url, tmp_path)
    query = stream(spark, fabric_url, "lossy", tmp_path / "ck", files=tmp_path / "out", subscribe="lossy")
    with pytest.raises(Exception) as failure:
        query.awaitTermination(120)
    message = str(failure.value)
    assert f"offsets 40 to {start - 1} of topic 'lossy' partition 0 were deleted" in message
    assert "failOnDataLoss=false" in message and "checkpoint" in message


def test_stream_skips_lost_data_when_told(spark, fab, fabric_url, tmp_path):
    start = _lose_unread_data(spark, fab, fabric_url, tmp_path)
    _, table = run_available_now(spark, fabric_url, "lossy", tmp_path / "ck", files=tmp_path / "out",
                                 subscribe="lossy", failOnDataLoss="false")
    got = [o for p, o in offsets(table)]
    assert got == list(range(40)) + list(range(start, 120))


KEYS, PER_TRIGGER = 150, 100


def _write_rounds(fab, topic: str, rounds: range, written: dict[int, tuple[bytes, bytes]]) -> None:
    """Each round updates all KEYS keys in one batch (no idempotent producer, so no batch is kept whole)."""
    with fab.producer(enable_idempotence=False, linger_ms=0) as producer:
        for r in rounds:
            keys, values = [b"k%03d" % k for k in range(KEYS)], [b"r%d-k%03d" % (r, k) for k in range(KEYS)]
            first = producer.send_batch(topic, pa.table({"key": keys, "value": values}))[0].offset
            written.update({first + i: kv for i, kv in enumerate(zip(keys, values, strict=True))})


def test_stream_reads_segments_cleaned_while_it_runs_once_and_counts_records_per_trigger(spark, fab, fabric_url,
                                                                                         tmp_path):
    fab.create_topic("table", config={"cleanup.policy": "compact", "segment.bytes": 8192})

    def cleaned() -> bool:  # `fabric topics compact`: in the directory, or at the partition's leader node
        return fab.compact_topic("table")[0].cleaned

    written: dict[int, tuple[bytes, bytes]] = {}
    _write_rounds(fab, "table", range(4), written)
    seen: list[tuple[int, bytes, bytes]] = []

    def each(batch, batch_id: int) -> None:
        seen.extend((r.offset, bytes(r.key), bytes(r.value)) for r in batch.select("offset", "key", "value").collect())
        if batch_id == 0:  # the next batches are planned over offsets cleaned since the query started
            assert cleaned()
        if batch_id == 2:
            _write_rounds(fab, "table", range(4, 8), written)
            assert cleaned()

    query = (spark.readStream.format("fabric").option("url", fabric_url)
             .options(subscribe="table", startingOffsets="earliest", maxOffsetsPerTrigger=str(PER_TRIGGER)).load()
             .writeStream.foreachBatch(each).option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        query.processAllAvailable()  # raises if the query failed (as failOnDataLoss=true would make it)
        assert query.exception() is None
    finally:
        query.stop()
    offsets_read = [o for o, _, _ in seen]
    assert len(offsets_read) == len(set(offsets_read))  # nothing read twice
    assert all(written[o] == (k, v) for o, k, v in seen)  # each record as written at its offset
    latest = {key: (offset, value) for offset, (key, value) in sorted(written.items())}
    assert {(o, k, v) for k, (o, v) in latest.items()} <= set(seen)  # every key's surviving value was read
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    assert sum(p["numInputRows"] for p in batches) == len(seen)
    crossed = 0
    jvm = jvm_reads(spark, fabric_url)
    for progress in batches:
        source = progress["sources"][0]
        start, end, latest_offset = ((json.loads(source[f]) or {"table": {"0": 0}})["table"]["0"]  # first: null
                                     for f in ("startOffset", "endOffset", "latestOffset"))
        if end < latest_offset and jvm:  # the JVM reader counts offsets, as Kafka's source: a limited batch spans
            assert end - start == PER_TRIGGER and progress["numInputRows"] <= PER_TRIGGER, progress  # that many
        elif end < latest_offset:  # the Python source's limited batch holds that many records, however many
            assert progress["numInputRows"] == PER_TRIGGER, progress  # offsets it spans
            crossed += end - start > PER_TRIGGER
    assert jvm or crossed >= 2  # after each cleaning, a full batch spanned cleaned offsets
    # a batch read of the topic now (failOnDataLoss=true by default) gets exactly the surviving records
    rows = reader(spark, fabric_url, subscribe="table").load().select("offset", "key", "value").collect()
    assert sorted((r.offset, bytes(r.key), bytes(r.value)) for r in rows) == sorted(
        (o, k, v) for k, (o, v) in latest.items())


def test_stream_picks_up_added_partitions_and_new_records(spark, fab, fabric_url, tmp_path):
    fab.create_topic("grow", partitions=1)
    produce(fab, "grow", 3, partitions=1)
    query = stream(spark, fabric_url, "grow_t", tmp_path / "ck", trigger={"processingTime": "200 milliseconds"},
                   subscribe="grow", startingOffsets="earliest")
    try:
        wait_for(lambda: spark.table("grow_t").count() == 3, timeout=60, what="the first 3 records")
        fab.create_partitions("grow", 2)
        producer = fab.producer()
        for i in range(4):
            producer.send("grow", f"new{i}".encode(), partition=1)
        producer.flush()
        wait_for(lambda: spark.table("grow_t").where("partition = 1").count() == 4, timeout=60,
                 what="the added partition")
        assert offsets(spark.table("grow_t")) == [(0, 0), (0, 1), (0, 2)] + [(1, i) for i in range(4)]
    finally:
        query.stop()


def test_stream_reports_a_deleted_topic(spark, fab, fabric_url, tmp_path):
    fab.create_topic("doomed", partitions=1)
    produce(fab, "doomed", 2, partitions=1)
    query = stream(spark, fabric_url, "doomed_t", tmp_path / "ck", trigger={"processingTime": "200 milliseconds"},
                   subscribe="doomed", startingOffsets="earliest")
    try:
        wait_for(lambda: spark.table("doomed_t").count() == 2, timeout=60, what="the records")
        fab.delete_topic("doomed")
        wait_for(lambda: not query.isActive, timeout=60, what="the query to fail")
        assert "topic 'doomed' was deleted while the query was reading it" in str(query.exception())
    finally:
        query.stop()


def test_stream_group_id_commits_and_group_start(spark, fab, fabric_url, tmp_path):
    fab.create_topic("g", partitions=2)
    produce(fab, "g", 4)
    run_available_now(spark, fabric_url, "g_first", tmp_path / "ck1", subscribe="g", startingOffsets="earliest",
                      groupId="spark-app")
    described = wait_for(lambda: [(r.partition, r.committed, r.lag) for r in fab.describe_group("spark-app")]
                         == [(0, 4, 0), (1, 4, 0)] and fab.describe_group("spark-app"), what="the group commit")
    assert [r.topic for r in described] == ["g", "g"]
    new_rows = produce(fab, "g", 3, start=4)
    assert [r.lag for r in fab.describe_group("spark-app")] == [3, 3]
    _, table = run_available_now(spark, fabric_url, "g_second", tmp_path / "ck2", subscribe="g",
                                 startingOffsets="group", groupId="spark-app")
    assert_df_equality(records(table), expected(spark, new_rows), ignore_row_order=True, ignore_nullable=True)


@pytest.fixture
def every_trigger_reported(spark):
    """Spark reports a progress for each trigger that runs no batch (by default only every 10 s), so a test sees
    the source decline to plan one."""
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")
    yield
    spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def _idle_triggers(query) -> int:
    return sum(1 for p in query.recentProgress if not p["numInputRows"])


def test_stream_min_offsets_per_trigger_waits_for_enough_offsets(spark, fab, fabric_url, tmp_path,
                                                                every_trigger_reported):
    fab.create_topic("few", partitions=2)
    produce(fab, "few", 2, partitions=1)
    query = stream(spark, fabric_url, "few_t", tmp_path / "ck", trigger={"processingTime": "100 milliseconds"},
                   subscribe="few", startingOffsets="earliest", minOffsetsPerTrigger="5", maxTriggerDelay="1h")
    try:
        wait_for(lambda: _idle_triggers(query) >= 3, timeout=60, what="triggers declining the 2 offsets")
        assert spark.table("few_t").count() == 0
        produce(fab, "few", 2, partitions=1, start=2)
        idle = _idle_triggers(query)
        wait_for(lambda: _idle_triggers(query) >= idle + 3, timeout=60, what="triggers declining 4 offsets")
        assert spark.table("few_t").count() == 0
        with fab.producer() as producer:  # the fifth offset, on the other partition: the minimum counts all
            producer.send("few", b"fifth", partition=1)
        # the table shows the batch before Spark reports its progress: wait on the report
        batches = wait_for(lambda: [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]],
                           timeout=60, what="the progress of the batch of 5 records")
        assert batches == [5]
        assert spark.table("few_t").count() == 5
    finally:
        query.stop()
    # trigger(availableNow=True) must end: it reads what there is, however little
    _, table = run_available_now(spark, fabric_url, "few_now", tmp_path / "ck2", subscribe="few",
                                 startingOffsets="earliest", minOffsetsPerTrigger="1000")
    assert table.count() == 5


def test_stream_max_trigger_delay_runs_a_smaller_batch_once_it_passed(spark, fab, fabric_url, tmp_path,
                                                                    every_trigger_reported):
    fab.create_topic("slow", partitions=1)
    rows = produce(fab, "slow", 3, partitions=1)
    started = time.monotonic()
    query = stream(spark, fabric_url, "slow_t", tmp_path / "ck", trigger={"processingTime": "100 milliseconds"},
                   subscribe="slow", startingOffsets="earliest", minOffsetsPerTrigger="1000", maxTriggerDelay="3s")
    try:
        wait_for(lambda: spark.table("slow_t").count() == 3, timeout=60, what="the batch the delay lets run")
        assert time.monotonic() - started >= 3  # not before the delay passed
        assert _idle_triggers(query) >= 1  # triggers before it declined
        assert_df_equality(records(spark.table("slow_t")), expected(spark, rows), ignore_row_order=True,
                           ignore_nullable=True)
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [3]
    finally:
        query.stop()


def test_stream_group_id_prefix_commits_to_a_new_group_each_run(spark, fab, fabric_url, tmp_path):
    """As Kafka's source, each run of the query generates `<prefix>-<uuid>`; unlike it, the fabric source commits
    there, so `fabric groups describe` shows the run's lag."""
    fab.create_topic("pg", partitions=2)
    produce(fab, "pg", 3)
    run_available_now(spark, fabric_url, "pg", tmp_path / "ck", files=tmp_path / "out", subscribe="pg",
                      startingOffsets="earliest", groupIdPrefix="etl")
    first = wait_for(lambda: [g for g in fab.list_groups() if g.startswith("etl-")], what="the generated group")
    assert len(first) == 1
    wait_for(lambda: [(r.partition, r.committed) for r in fab.describe_group(first[0])] == [(0, 3), (1, 3)],
             what="the first run's commit")
    produce(fab, "pg", 2, start=3)
    _, table = run_available_now(spark, fabric_url, "pg", tmp_path / "ck", files=tmp_path / "out", subscribe="pg",
                                 groupIdPrefix="etl")  # the same query again, from its checkpoint
    assert table.count() == 10
    groups = wait_for(lambda: len(g := [g for g in fab.list_groups() if g.startswith("etl-")]) == 2 and g,
                      what="the second run's group")
    (second,) = set(groups) - set(first)
    wait_for(lambda: [(r.partition, r.committed) for r in fab.describe_group(second)] == [(0, 5), (1, 5)],
             what="the second run's commit")
    assert [(r.committed, r.lag) for r in fab.describe_group(first[0])] == [(3, 2), (3, 2)]
    # groupId wins over groupIdPrefix, as in Kafka's source
    run_available_now(spark, fabric_url, "pg_named", tmp_path / "ck3", subscribe="pg", startingOffsets="earliest",
                      groupId="named", groupIdPrefix="etl")
    wait_for(lambda: [r.committed for r in fab.describe_group("named")] == [5, 5], what="groupId's commit")
    assert len([g for g in fab.list_groups() if g.startswith("etl-")]) == 2


def test_stream_rejects_batch_only_options(spark, fab, fabric_url, tmp_path):
    fab.create_topic("t", partitions=1)
    for options, message in [({"endingOffsets": "latest"}, "batch queries only"),
                             ({"startingOffsets": "group"}, "set option 'groupId'")]:
        with pytest.raises(Exception, match=message):
            stream(spark, fabric_url, "bad_stream", tmp_path / message, subscribe="t", **options).awaitTermination(60)
