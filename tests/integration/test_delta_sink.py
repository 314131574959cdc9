"""The Delta archiver: a topic streamed into a Delta table exactly once, replays skipped, any reader sees it."""
from __future__ import annotations

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from fabric.sinks.delta_sink import DeltaArchiver, has_delta_jars

pytestmark = pytest.mark.spark


def _rows(spark, lo: int, hi: int):
    return spark.range(lo, hi, numPartitions=2).select(
        F.col("id").cast("string").cast("binary").alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.current_timestamp().alias("timestamp"))


def test_replayed_batch_is_skipped(spark, tmp_path):
    table = str(tmp_path / "delta")
    archiver = DeltaArchiver(table, app_id="archive-test")
    assert not has_delta_jars(_rows(spark, 0, 1))
    archiver(_rows(spark, 0, 100), 0)
    archiver(_rows(spark, 100, 150), 1)
    archiver(_rows(spark, 100, 150), 1)  # the batch replayed after a crash
    archiver(_rows(spark, 0, 100), 0)  # an older batch too
    delta = DeltaTable(table)
    assert delta.transaction_version("archive-test") == 1
    got = delta.to_pyarrow_table()
    assert sorted(int(k) for k in got.column("key").to_pylist()) == list(range(150))
    assert got.column("value").to_pylist()[:1][0].startswith(b"v")


def test_stream_archives_each_batch_once(spark, tmp_path):
    """A streaming query over a parquet directory, archived via foreachBatch; rerun from its checkpoint
    after more input arrives: only the new files are added, with the query id as app id."""
    source, table, checkpoint = (str(tmp_path / n) for n in ("in", "delta", "chk"))
    _rows(spark, 0, 60).write.parquet(source + "/a")
    schema = _rows(spark, 0, 1).schema

    def run() -> str:
        query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
                 .option("recursiveFileLookup", "true").parquet(source)
                 .writeStream.foreachBatch(DeltaArchiver(table)).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        return query.id

    first = run()
    _rows(spark, 60, 90).write.parquet(source + "/b")
    assert run() == first
    delta = DeltaTable(table)
    keys = sorted(int(k) for k in delta.to_pyarrow_table().column("key").to_pylist())
    assert keys == list(range(90))
    assert delta.transaction_version(first) is not None
