"""A Spark Python data source that reads nothing: each task hands Spark one prebuilt Arrow batch over and over,
in the fabric source's default columns and batch size. Its rows/s is the ceiling of Spark's Python data
source path on this machine: the cost every Python source (the fabric source included) pays on top of its
own reading."""
from __future__ import annotations

import time
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from bench.log_bench import VALUE_BYTES, make_values
from fabric.common.records import output_schema, to_output, to_storage
from fabric.sources.fabric_source import spark_schema
from fabric.sources.reading import BATCH_BYTES, conform


class CeilingSource(DataSource):
    """format("fabric-ceiling"), options `records` and `partitions`."""

    @classmethod
    def name(cls) -> str:
        return "fabric-ceiling"

    def schema(self) -> StructType:
        return spark_schema(None, include_headers=False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return CeilingReader(schema, int(self.options["records"]), int(self.options["partitions"]))


class CeilingReader(DataSourceReader):
    def __init__(self, schema: StructType, records: int, partitions: int) -> None:
        self.target = to_arrow_schema(schema, timezone="UTC")
        self.records = records
        self.parts = partitions

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in range(self.parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows = BATCH_BYTES // VALUE_BYTES
        stored = to_storage(make_values(rows), None, time.time_ns() // 1000).to_batches()[0]
        batch = conform(to_output(stored, 0, "src", partition.value, 0, output_schema(None, self.target.names)),
                        self.target)
        left = self.records // self.parts
        while left > 0:
            yield batch.slice(0, min(rows, left))
            left -= rows
