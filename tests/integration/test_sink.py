"""The fabric Spark sink: batch and streaming writes, placement, topic routing, typed topics, bad input."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

pytestmark = pytest.mark.spark

COLUMNS = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def _records(spark, n: int, start: int = 0, partitions: int = 2):
    return spark.range(start, start + n, numPartitions=partitions).select(
        F.col("id").cast("string").cast("binary").alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"))


def _topic_df(spark, fab, topic: str, columns: list[str]):
    """What the consumer reads from a topic, as a DataFrame (the independent read-back path)."""
    consumer = fab.consumer(topic, auto_offset_reset="earliest", enable_auto_commit=False)
    expected = sum(p.end_offset for p in fab.describe_topic(topic).partitions)
    tables = []
    while sum(t.num_rows for t in tables) < expected:
        tables.append(consumer.poll_batch(5, columns=columns))
    consumer.close()
    return spark.createDataFrame(pa.concat_tables(tables).to_pandas())


def _write(df, fabric_url: str, **options):
    writer = df.write.format("fabric").option("url", fabric_url).mode("append")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def test_batch_write_is_read_back(spark, fab, fabric_url):
    fab.create_topic("events", partitions=3)
    df = _records(spark, 500)
    _write(df, fabric_url, topic="events")
    assert_df_equality(_topic_df(spark, fab, "events", ["key", "value"]), df, ignore_row_order=True,
                       ignore_nullable=True)
    assert not os.listdir(os.path.join(fab.cluster.root, "__fabric", "staging"))


def test_headers_timestamp_and_explicit_partition(spark, fab, fabric_url):
    fab.create_topic("meta", partitions=2)
    df = spark.sql("""SELECT CAST('k' AS BINARY) AS key, CAST('v' AS BINARY) AS value, 1 AS partition,
                      TIMESTAMP '2026-01-02 03:04:05 UTC' AS timestamp,
                      array(named_struct('key', 'h', 'value', CAST('x' AS BINARY))) AS headers""")
    _write(df, fabric_url, topic="meta")
    [record] = fab.consumer("meta", auto_offset_reset="earliest").poll(5)
    assert (record.partition, record.key, record.value, record.headers) == (1, b"k", b"v", [("h", b"x")])
    assert record.timestamp == 1767323045000


def test_key_placement_matches_python_producer(spark, fab, fabric_url):
    fab.create_topic("by-sink", partitions=5)
    fab.create_topic("by-producer", partitions=5)
    df = _records(spark, 300)
    _write(df, fabric_url, topic="by-sink")
    with fab.producer() as producer:
        producer.send_batch("by-producer", df.toArrow())
    placed = {}
    for topic in ("by-sink", "by-producer"):
        table = _topic_df(spark, fab, topic, ["key", "partition"]).toArrow()
        keys, partitions = table.column("key").to_pylist(), table.column("partition").to_pylist()
        placed[topic] = dict(zip(keys, partitions, strict=True))
    assert placed["by-sink"] == placed["by-producer"]
    assert len(set(placed["by-sink"].values())) == 5


def test_topic_column_routes_rows(spark, fab, fabric_url):
    fab.create_topic("even")
    fab.create_topic("odd", partitions=2)
    df = spark.range(200, numPartitions=2).select(
        F.col("id").cast("string").cast("binary").alias("key"),
        F.col("id").cast("string").alias("value"),
        F.when(F.col("id") % 2 == 0, "even").otherwise("odd").alias("topic"))
    _write(df, fabric_url)
    for topic, parity in (("even", 0), ("odd", 1)):
        got = sorted(int(v) for v in _topic_df(spark, fab, topic, ["value"]).toArrow().column("value").to_pylist())
        assert got == list(range(parity, 200, 2))


def test_typed_topic_takes_value_columns(spark, fab, fabric_url):
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    fab.create_topic("typed", partitions=2, schema=schema)
    df = spark.range(50, numPartitions=2).select(
        F.col("id").cast("string").alias("key"), "id", F.concat(F.lit("n"), F.col("id").cast("string")).alias("name"))
    _write(df, fabric_url, topic="typed")
    got = _topic_df(spark, fab, "typed", ["id", "name"])
    assert_df_equality(got, df.select("id", "name"), ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("select, options, message", [
    ("CAST('k' AS BINARY) AS key", {"topic": "t"}, "'value'"),
    ("CAST('v' AS BINARY) AS value, 1 AS extra", {"topic": "t"}, "extra"),
    ("CAST('v' AS BINARY) AS value", {}, "'topic' column or the 'topic' option"),
    ("CAST('v' AS BINARY) AS value", {"topic": "t", "topics": "t"}, "unknown fabric sink option"),
    ("CAST('v' AS BINARY) AS value", {"topic": "t", "kafka.bootstrap.servers": "broker:9092"},
     "options 'url' and 'kafka.bootstrap.servers' name different fabrics"),
    ("CAST('v' AS BINARY) AS value, 'p' AS partition", {"topic": "t"}, "'partition' must be an integer"),
    ("CAST('v' AS BINARY) AS value", {"topic": "missing"}, "missing"),
    ("CAST('v' AS BINARY) AS value, array(named_struct('k', 'h', 'v', CAST('x' AS BINARY))) AS headers",
     {"topic": "t"}, "column 'headers' must be list<struct<key: string, value: binary>>"),
    ("CAST('v' AS BINARY) AS value, 1700000000000 AS timestamp", {"topic": "t"},
     r"column 'timestamp' must be a timestamp \(for milliseconds since the epoch, timestamp_millis\(ms\)\)"),
])
def test_bad_input_fails_naming_the_problem(spark, fab, fabric_url, select, options, message):
    fab.create_topic("t")
    with pytest.raises(Exception, match=message):
        _write(spark.sql(f"SELECT {select}"), fabric_url, **options)
    assert fab.describe_topic("t").partitions[0].end_offset == 0


def test_the_topic_option_wins_over_a_topic_column_of_any_type(spark, fab, fabric_url):
    """As Kafka's sink: with the 'topic' option the column is not read, so its type does not matter; without the
    option a non-string one is refused."""
    fab.create_topic("t")
    df = spark.sql("SELECT CAST('v' AS BINARY) AS value, 7 AS topic")
    with pytest.raises(Exception, match="column 'topic' must be string, got int32"):
        _write(df, fabric_url)
    _write(df, fabric_url, topic="t")
    assert fab.describe_topic("t").partitions[0].end_offset == 1


def test_overwrite_is_refused_not_turned_into_an_append(spark, fab, fabric_url):
    """Spark's Kafka sink refuses mode("overwrite"); the fabric sink used to append instead, silently keeping the
    records the user meant to replace."""
    fab.create_topic("t")
    df = spark.sql("SELECT CAST('v' AS BINARY) AS value")
    with pytest.raises(Exception, match=r"cannot overwrite a topic .*mode\('append'\)"):
        df.write.format("fabric").option("url", fabric_url).option("topic", "t").mode("overwrite").save()
    assert fab.describe_topic("t").partitions[0].end_offset == 0


def test_stream_write_publishes_each_batch_once(spark, fab, fabric_url, tmp_path):
    """A file stream, one file per micro-batch, run twice from the same checkpoint: every record once."""
    fab.create_topic("stream-out", partitions=2)
    source, checkpoint = str(tmp_path / "in"), str(tmp_path / "chk")
    for i in range(3):
        _records(spark, 100, start=100 * i, partitions=1).write.parquet(f"{source}/{i}")

    def run() -> str:
        query = (spark.readStream.schema(COLUMNS).option("maxFilesPerTrigger", 1)
                 .option("recursiveFileLookup", "true").parquet(source)
                 .writeStream.format("fabric").option("url", fabric_url).option("topic", "stream-out")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        return query.id

    first = run()
    _records(spark, 100, start=300, partitions=1).write.parquet(f"{source}/3")
    assert run() == first
    got = _topic_df(spark, fab, "stream-out", ["key", "value"])
    assert_df_equality(got, _records(spark, 400), ignore_row_order=True, ignore_nullable=True)
    assert all(fab.cluster.coordinator.transaction_committed(f"query-{first}:{b}") for b in range(4))
    assert not os.listdir(os.path.join(fab.cluster.root, "__fabric", "staging"))


def test_large_staged_files_become_segments(spark, fab, fabric_url):
    """A task's staged file of 4 MiB or more is published by renaming it into the partition (no copy)."""
    fab.create_topic("big", partitions=1)
    with fab.producer() as producer:
        producer.send("big", b"first").result()
    df = spark.range(0, 60_000, numPartitions=1).select(
        F.concat(F.col("id").cast("string"), F.lit(":"), F.repeat(F.lit("x"), 90)).cast("binary").alias("value"))
    _write(df, fabric_url, topic="big")
    state = fab.describe_topic("big").partitions[0]
    assert (state.end_offset, state.segments) == (60_001, 2)  # the adopted file is a segment of its own
    got = _topic_df(spark, fab, "big", ["value"]).collect()
    assert [r.value for r in got[:2]] == [b"first", b"0:" + b"x" * 90]
    assert sorted(r.value for r in got[1:]) == sorted(r.value for r in df.collect())
