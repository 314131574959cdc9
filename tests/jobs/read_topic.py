"""A batch job for the Spark-cluster tests (tests/integration/test_spark_cluster.py), run with spark-submit: read a
topic with format("fabric") and write, as JSON, what each read task saw where it ran.

    spark-submit read_topic.py OUT TOPIC [--url URL] [--release FILE]

Without --url the source resolves the fabric itself (on the driver). OUT gets {"master", "app_id", "tasks": [{"cwd",
"env": {FABRIC_URL, FABRIC_CLIENT_RACK}, "records": [[partition, offset, value], ...]}, ...]}: a task's cwd is its
executor's directory under its worker's work directory. With --release the driver keeps the application (and its
executors) running after writing OUT until FILE exists, so a test can look at the executors. It imports only
pyspark and the standard library.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Iterable, Iterator

from pyspark.sql import Row, SparkSession

RELEASE_TIMEOUT_S = 600.0


def where_read(rows: Iterable[Row]) -> Iterator[dict[str, Any]]:
    """One summary of a read task's records, with where the task ran."""
    records = [[row.partition, row.offset, row.value.decode()] for row in rows]
    yield {"cwd": os.getcwd(), "env": {k: os.environ.get(k) for k in ("FABRIC_URL", "FABRIC_CLIENT_RACK")},
           "records": records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("topic")
    parser.add_argument("--url")
    parser.add_argument("--release")
    args = parser.parse_args()
    spark = SparkSession.builder.appName("fabric-read-topic").getOrCreate()
    reader = spark.read.format("fabric").option("subscribe", args.topic)
    if args.url:
        reader = reader.option("url", args.url)
    tasks = reader.load().select("partition", "offset", "value").rdd.mapPartitions(where_read).collect()
    result = {"master": spark.sparkContext.master, "app_id": spark.sparkContext.applicationId, "tasks": tasks}
    with open(f"{args.out}.tmp", "w") as f:
        json.dump(result, f)
    os.replace(f"{args.out}.tmp", args.out)
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while args.release and not os.path.exists(args.release) and time.monotonic() < deadline:
        time.sleep(0.1)  # poll interval of a deadline-bounded wait for the test's release
    spark.stop()


if __name__ == "__main__":
    main()
