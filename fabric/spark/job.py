"""What every job shares: its command line (--url, --checkpoint, --trigger), the Spark session, and the run loop."""
from __future__ import annotations

import argparse
import os
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from fabric.spark.session import spark_session, use_fabric_confs

# Spark's Python workers cannot connect back in sandboxes without these (see README).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
PROGRESS_POLL_S = 1  # seconds between run()'s looks at the batches finished since (Spark keeps the last 100)


def parser(description: str, micro_batches: bool = True) -> argparse.ArgumentParser:
    """The options every job takes (--trigger and --max-offsets-per-trigger only for `micro_batches`: a real-time
    query has neither); jobs add their own."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--url", default=os.environ.get("FABRIC_URL", "./fabric-data"),
                   help="fabric URL: file:///dir or a path (embedded), or fabric://host:port")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory of the streaming query")
    if micro_batches:
        p.add_argument("--trigger", default="available-now",
                       help="'available-now' (process the backlog, then stop) or an interval such as '5 seconds'")
        p.add_argument("--max-offsets-per-trigger", type=int, default=None,
                       help="cap on records per micro-batch (Spark Kafka's maxOffsetsPerTrigger)")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop a continuously triggered query after this many seconds")
    return p


def session(app: str) -> SparkSession:
    """The job's SparkSession: under spark-submit, its --master and --conf/--properties-file decide; run
    directly (python -m jobs.X, as `make demo` does), the project's conf/ (local[2], quiet logs)."""
    active = SparkSession.getActiveSession()
    if active is not None:  # e.g. the demo running two jobs in one process
        return active
    if os.environ.get("_PYSPARK_DRIVER_CONN_INFO_PATH") or os.environ.get("PYSPARK_GATEWAY_PORT"):
        spark = use_fabric_confs(SparkSession.builder.appName(app).getOrCreate())
    else:
        spark = spark_session(app)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def read_topic(spark: SparkSession, args: argparse.Namespace, topic: str, **options: str) -> DataFrame:
    """A streaming DataFrame over a fabric topic."""
    reader = spark.readStream.format("fabric").option("url", args.url).option("subscribe", topic)
    reader = reader.option("startingOffsets", options.pop("startingOffsets", "earliest"))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def run(query: StreamingQuery, args: argparse.Namespace) -> None:
    """Wait for the query: to the end of the backlog (available-now) or until --timeout; print a line for each
    micro-batch it ran."""
    deadline = time.monotonic() + args.timeout if args.timeout else None
    printed = -1
    while query.isActive:
        query.awaitTermination(PROGRESS_POLL_S)
        printed = print_batches(query, printed)
        if deadline and time.monotonic() > deadline:
            query.stop()
    print_batches(query, printed)
    if query.exception():
        raise SystemExit(f"query failed: {query.exception()}")


def print_batches(query: StreamingQuery, after: int) -> int:
    """Print one line (id, rows, duration) for each micro-batch the query ran after batch `after`, from its
    recent progress; returns the last batch id printed. A trigger that found no new data reports progress too,
    under the id the next batch will have, but runs nothing (no addBatch): it is not a batch and not printed."""
    for progress in query.recentProgress:
        if progress["batchId"] > after and "addBatch" in progress["durationMs"]:
            after = progress["batchId"]
            print(f"[{query.name or query.id}] batch {after}: {progress['numInputRows']:,} rows in "
                  f"{progress['durationMs']['triggerExecution'] / 1000:.2f} s", flush=True)
    return after


def trigger(args: argparse.Namespace) -> dict:
    """writeStream.trigger(**kwargs) for the --trigger option."""
    return {"availableNow": True} if args.trigger == "available-now" else {"processingTime": args.trigger}
