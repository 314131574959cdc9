"""A streaming job for the Spark-cluster test of the JVM reader (tests/integration/test_spark_cluster_jvm.py), run
with spark-submit and the reader's jar: copy topic IN to topic OUT, reading with format("fabric-jvm") in batches of
at most PER_BATCH offsets and writing with the exactly-once format("fabric") sink, under trigger(availableNow=True)
(it ends at the ends the run began with); then write every progress of the run as JSON lines to PROGRESS.

    spark-submit --jars "$(python -m fabric.spark.jar)" jvm_copy.py URL IN OUT PER_BATCH CHECKPOINT PROGRESS
"""
from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def main() -> None:
    url, source, sink, per_batch, checkpoint, progress = sys.argv[1:7]
    spark = SparkSession.builder.appName("fabric-jvm-copy").getOrCreate()
    query = (spark.readStream.format("fabric-jvm").option("url", url).option("subscribe", source)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_batch).load()
             .select("key", "value").writeStream.format("fabric").option("url", url).option("topic", sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    with open(f"{progress}.tmp", "w") as out:
        out.writelines(p.json + "\n" for p in query.recentProgress)
    os.replace(f"{progress}.tmp", progress)
    spark.stop()


if __name__ == "__main__":
    main()
