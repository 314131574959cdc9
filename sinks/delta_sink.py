"""Archive a stream (e.g. a fabric topic) into a Delta table exactly once: `foreachBatch(DeltaArchiver(path))`.

    (spark.readStream.format("fabric").option("subscribe", "orders").load()
          .writeStream.foreachBatch(DeltaArchiver("/lake/orders"))
          .option("checkpointLocation", "/chk/orders").start())

Each micro-batch is committed with a Delta app transaction (app id = the query's stable id, version = the
batch id), Delta's own exactly-once mechanism for streaming writes: a batch replayed after a crash finds its
version already recorded for the app id and is skipped, so no row is written twice.

Two paths, chosen per batch:
- with the Delta jars (the session's spark.sql.extensions has Delta's): `format("delta")` with the
  `txnAppId` / `txnVersion` write options;
- without them (this environment): `deltalake` (delta-rs). Spark tasks write Parquet files into the table
  directory, then the driver commits them in one Delta transaction carrying the app transaction. Files of a
  batch killed before its commit are never referenced by the log; `DeltaTable.vacuum()` removes them.
The table is a plain Delta table, readable by any Delta reader.
"""
from __future__ import annotations

import json
import os
import uuid
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import InvalidConfigError

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
FILES_SCHEMA = "path string, size long, rows long"


def has_delta_jars(df: DataFrame) -> bool:
    """True when the session is configured with Delta Lake's Spark extension (delta-spark's jars)."""
    return DELTA_EXTENSION in (df.sparkSession.conf.get("spark.sql.extensions", "") or "")


def _write_parquet(table_path: str, schema: pa.Schema):
    """A mapInArrow function: each task writes its rows as one Parquet file and yields its path and size."""
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        name = f"part-{uuid.uuid4().hex}.snappy.parquet"
        full = os.path.join(table_path, name)
        rows = 0
        with pq.ParquetWriter(full, schema, compression="snappy") as writer:
            for batch in batches:
                if batch.num_rows:
                    writer.write_batch(pa.Table.from_batches([batch]).cast(schema).to_batches()[0])
                    rows += batch.num_rows
        if not rows:
            os.unlink(full)
            return
        yield pa.RecordBatch.from_pydict({"path": [name], "size": [os.path.getsize(full)], "rows": [rows]})
    return write


class DeltaArchiver:
    """foreachBatch function appending each micro-batch to the Delta table at `table_path` exactly once.

    `app_id` names the writer in the table's app transactions; by default it is the streaming query's id
    (stable across restarts from the same checkpoint)."""

    def __init__(self, table_path: str, app_id: str | None = None) -> None:
        self.table_path = os.path.abspath(table_path) if "://" not in table_path else table_path
        self.app_id = app_id

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        app_id = self.app_id or df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not app_id:
            raise InvalidConfigError("DeltaArchiver needs a stable app id: pass app_id=... when it is not "
                                     "called from a streaming query's foreachBatch")
        if has_delta_jars(df):
            (df.write.format("delta").mode("append").option("txnAppId", app_id)
             .option("txnVersion", batch_id).save(self.table_path))
            return
        self.write_with_deltalake(df, app_id, batch_id)

    def committed_version(self, app_id: str) -> int | None:
        """The last batch id committed for `app_id`, or None (also when the table does not exist yet)."""
        if not DeltaTable.is_deltatable(self.table_path):
            return None
        return DeltaTable(self.table_path).transaction_version(app_id)

    def write_with_deltalake(self, df: DataFrame, app_id: str, batch_id: int) -> bool:
        """Tasks write Parquet files, the driver commits them with app transaction (app_id, batch_id).

        Returns False when the batch was committed before (a replay), True when it was written now."""
        done = self.committed_version(app_id)
        if done is not None and done >= batch_id:
            return False
        schema = to_arrow_schema(df.schema, timezone="UTC")
        os.makedirs(self.table_path, exist_ok=True)
        files = df.mapInArrow(_write_parquet(self.table_path, schema), FILES_SCHEMA).collect()
        now_ms = SYSTEM_CLOCK.now_ms()
        adds = [AddAction(f.path, f.size, {}, now_ms, True, json.dumps({"numRecords": f.rows})) for f in files]
        commit = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
        if DeltaTable.is_deltatable(self.table_path):
            actions: list[AddAction | RemoveAction] = list(adds)
            DeltaTable(self.table_path).create_write_transaction(actions, "append", schema,
                                                                 commit_properties=commit)
        else:
            create_table_with_add_actions(self.table_path, Schema.from_arrow(schema), adds, mode="append",
                                          commit_properties=commit)
        return True
