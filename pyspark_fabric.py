"""Registers the `fabric` format with Spark: a top-level `pyspark_<name>` module defining `DefaultSource` is
found by Spark's Python data source lookup, so `spark.read.format("fabric")` needs no register() call."""
from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType


class DefaultSource(DataSource):
    """Topics of a fabric as a Spark source (options as Spark's Kafka source) and sink."""

    @classmethod
    def name(cls) -> str:
        return "fabric"

    def schema(self) -> StructType:
        from fabric.sources.fabric_source import source_schema
        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from fabric.sources.fabric_source import FabricBatchReader
        return FabricBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from fabric.sources.fabric_source import FabricStreamReader
        return FabricStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from fabric.sinks.fabric_sink import FabricBatchWriter
        return FabricBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from fabric.sinks.fabric_sink import FabricStreamWriter
        return FabricStreamWriter(self.options, schema)
