"""Spark benchmark: the fabric source and sink beside Spark's own parquet file source and sink, on the same
records (random, incompressible 100-byte values, null keys: the Kafka seeds' benchmark record), local[2],
warm (each path runs once untimed, then the best of `--repeats` is kept); plus the end-to-end latency of a
running fabric -> fabric streaming query.

Paths (rows/s):
  source: fabric topic (2 partitions) -> noop sink   vs   parquet (2 files) -> noop sink
  sink:   parquet -> df.write.format("fabric"), parquet -> writeStream.format("fabric") with trigger
          availableNow (exactly-once, one micro-batch)   vs   parquet -> parquet file sink
Latency: a producer sends timestamped records at `--rate`/s to topic lat-in while a streaming query copies
lat-in -> lat-out (trigger processingTime `--trigger`, started and warmed by one record first); a consumer
of lat-out records receive time minus send time (both from this process's clock) -> p50/p99, beside the
median duration of each phase of the query's micro-batches (Spark's durationMs).
"""
from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import fabric
from bench.log_bench import VALUE_BYTES, make_values
from bench.report import RESULTS_DIR, bar_chart, progress, save, table, timed

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark's workers cannot connect back without it
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

PARTITIONS = 2
STAMP = struct.Struct("<q")


def spark_session():
    """A local[2] session configured like the tests' (no UI, 2 shuffle partitions, reused workers)."""
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("fabric-bench")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(PARTITIONS))
               .config("spark.default.parallelism", str(PARTITIONS))
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.memory", "4g")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


def prepare(records: int, directory: str, url: str) -> str:
    """Write the records as 2 parquet files and into a 2-partition fabric topic 'src'; returns the parquet dir."""
    tbl = make_values(records)
    parquet_dir = os.path.join(directory, "parquet-src")
    os.makedirs(parquet_dir)
    half = records // PARTITIONS
    with timed(f"write {records:,} records as {PARTITIONS} parquet files and fabric topic 'src'"):
        for i in range(PARTITIONS):
            pq.write_table(tbl.slice(i * half, half), os.path.join(parquet_dir, f"part-{i}.parquet"),
                           compression="snappy", row_group_size=1 << 20)
        with fabric.connect(url) as fab:
            fab.create_topic("src", partitions=PARTITIONS)
            parts = pa.array(np.repeat(np.arange(PARTITIONS, dtype=np.int32), half))
            with fab.producer() as producer:
                producer.send_batch("src", tbl.slice(0, half * PARTITIONS).append_column("partition", parts))
    return parquet_dir


def best_of(label: str, records: int, action, repeats: int) -> float:
    """Run `action` once to warm up, then `repeats` times; records/s of the fastest run (each run includes
    removing its output, for the file sink and the fabric sink alike)."""
    action()
    seconds = []
    for i in range(repeats):
        with timed(f"{label} (run {i + 1}/{repeats})") as t:
            action()
        seconds.append(t["seconds"])
    return records / min(seconds)


def throughput(spark, url: str, parquet_dir: str, records: int, directory: str, repeats: int) -> dict:
    """rows/s of every source and sink path, measured in this run."""
    counter = iter(range(1_000_000))
    with fabric.connect(url) as fab:
        def fabric_target() -> str:
            name = f"out-{next(counter)}"
            fab.create_topic(name, partitions=PARTITIONS)
            return name

        def parquet_to_noop() -> None:
            spark.read.parquet(parquet_dir).write.format("noop").mode("overwrite").save()

        def fabric_to_noop() -> None:
            (spark.read.format("fabric").option("url", url).option("subscribe", "src").load()
             .write.format("noop").mode("overwrite").save())

        def parquet_to_parquet() -> None:
            out = os.path.join(directory, f"parquet-out-{next(counter)}")
            spark.read.parquet(parquet_dir).write.parquet(out)
            shutil.rmtree(out)

        def parquet_to_fabric_batch() -> None:
            topic = fabric_target()
            (spark.read.parquet(parquet_dir).write.format("fabric").mode("append")
             .option("url", url).option("topic", topic).save())
            _check_count(fab, topic, records)
            fab.delete_topic(topic)

        def parquet_to_fabric_stream() -> None:
            topic = fabric_target()
            query = (spark.readStream.schema("value binary").parquet(parquet_dir)
                     .writeStream.format("fabric").option("url", url).option("topic", topic)
                     .option("checkpointLocation", os.path.join(directory, f"ckpt-{topic}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            _check_count(fab, topic, records)
            fab.delete_topic(topic)

        paths = {
            "parquet_to_noop": parquet_to_noop, "fabric_to_noop": fabric_to_noop,
            "parquet_to_parquet": parquet_to_parquet, "parquet_to_fabric_batch": parquet_to_fabric_batch,
            "parquet_to_fabric_stream": parquet_to_fabric_stream,
        }
        return {name: best_of(name, records, action, repeats) for name, action in paths.items()}


def _check_count(fab, topic: str, records: int) -> None:
    """A sink run only counts if every record landed (once)."""
    got = sum(p.end_offset for p in fab.describe_topic(topic).partitions)
    if got != records:
        raise AssertionError(f"topic {topic!r} holds {got:,} records, expected {records:,}")


def latency(spark, url: str, directory: str, rate: float, seconds: float, trigger: str
            ) -> tuple[list[float], dict]:
    """End-to-end latencies (ms) of records sent at `rate`/s through a lat-in -> lat-out streaming query,
    and the median duration (ms) of each phase of its non-empty micro-batches (Spark's durationMs)."""
    with fabric.connect(url) as fab:
        fab.create_topic("lat-in", partitions=PARTITIONS)
        fab.create_topic("lat-out", partitions=PARTITIONS)
        query = (spark.readStream.format("fabric").option("url", url).option("subscribe", "lat-in")
                 .option("startingOffsets", "latest").load().select("value")
                 .writeStream.format("fabric").option("url", url).option("topic", "lat-out")
                 .option("checkpointLocation", os.path.join(directory, "ckpt-latency"))
                 .trigger(processingTime=trigger).start())
        try:
            _wait_running(query)
            consumer = fab.consumer("lat-out", auto_offset_reset="earliest")
            _produce_stamped(fab, 1, rate)  # warm-up: the first batch that carries data starts the workers
            _consume_stamped(consumer, 1, deadline=time.monotonic() + 60)
            sent = int(rate * seconds)
            producer_thread = threading.Thread(target=_produce_stamped, args=(fab, sent, rate), daemon=True)
            with timed(f"latency: {sent} records at {rate:g}/s through a streaming query (trigger {trigger})"):
                producer_thread.start()
                out = _consume_stamped(consumer, sent, deadline=time.monotonic() + seconds + 60)
                producer_thread.join()
            consumer.close()
            phases = _batch_phases(query.recentProgress)
        finally:
            query.stop()
    return out, phases


def _batch_phases(progress: list) -> dict:
    """Median ms per phase (triggerExecution, addBatch, latestOffset, ...) over batches that read rows."""
    durations = [p.durationMs for p in progress if p.numInputRows]
    names = sorted({name for d in durations for name in d})
    return {name: float(np.median([d.get(name, 0) for d in durations])) for name in names} | \
        {"batches": len(durations), "rows_per_batch": float(np.median([p.numInputRows for p in progress
                                                                        if p.numInputRows] or [0]))}


def _wait_running(query, timeout: float = 60.0) -> None:
    """Wait until the query has finished its first (empty) trigger, so start-up is not measured."""
    deadline = time.monotonic() + timeout
    while query.lastProgress is None:
        if query.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"streaming query did not start: {query.exception()}")
        time.sleep(0.05)


def _produce_stamped(fab, count: int, rate: float) -> None:
    """Send `count` records paced at `rate`/s; each value starts with its send time (ns, perf counter)."""
    pad = bytes(VALUE_BYTES - STAMP.size)
    with fab.producer(linger_ms=0) as producer:
        start = time.perf_counter()
        for i in range(count):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send("lat-in", STAMP.pack(time.perf_counter_ns()) + pad)
            producer.flush()


def _consume_stamped(consumer, count: int, deadline: float) -> list[float]:
    latencies: list[float] = []
    while len(latencies) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(latencies)} of {count} records reached lat-out")
        for record in consumer.poll(0.005):
            latencies.append((time.perf_counter_ns() - STAMP.unpack_from(record.value)[0]) / 1e6)
    return latencies


def latency_plot(latencies: list[float], title: str) -> str:
    """Histogram and CDF of the latencies, saved as bench/results/spark_latency.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = os.path.join(RESULTS_DIR, "spark_latency.png")
    data = np.sort(np.asarray(latencies))
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(11, 4))
    hist.hist(data, bins=50, color="#4C72B0")
    hist.set_xlabel("end-to-end latency (ms)")
    hist.set_ylabel("records")
    cdf.plot(data, np.arange(1, len(data) + 1) / len(data), color="#4C72B0")
    for q in (50, 99):
        cdf.axvline(np.percentile(data, q), ls="--", color="gray")
        cdf.text(np.percentile(data, q), 0.05, f" p{q}", color="gray")
    cdf.set_xlabel("end-to-end latency (ms)")
    cdf.set_ylabel("fraction of records")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per path after one warm-up")
    parser.add_argument("--rate", type=float, default=100.0, help="latency test: records sent per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency test: how long to send")
    parser.add_argument("--trigger", default="0 seconds", help="latency test: processingTime trigger")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="fabric-spark-bench-")
    os.makedirs(directory, exist_ok=True)
    url = f"file://{os.path.join(directory, 'fabric')}"
    spark = spark_session()
    try:
        parquet_dir = prepare(args.records, directory, url)
        rps = throughput(spark, url, parquet_dir, args.records, directory, args.repeats)
        lat, phases = latency(spark, url, directory, args.rate, args.seconds, args.trigger)
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    p50, p99 = (float(np.percentile(lat, q)) for q in (50, 99))
    results = {
        "records": args.records, "value_bytes": VALUE_BYTES, "key": None, "spark_master": "local[2]",
        "repeats": args.repeats, "rows_per_s": rps,
        "source_vs_parquet": rps["fabric_to_noop"] / rps["parquet_to_noop"],
        "sink_batch_vs_parquet": rps["parquet_to_fabric_batch"] / rps["parquet_to_parquet"],
        "sink_stream_vs_parquet": rps["parquet_to_fabric_stream"] / rps["parquet_to_parquet"],
        "latency": {"trigger": args.trigger, "rate_per_s": args.rate, "records": len(lat),
                    "p50_ms": p50, "p99_ms": p99, "max_ms": max(lat), "median_batch_phase_ms": phases},
    }
    save("spark", results)
    labels = {
        "parquet_to_noop": "parquet source -> noop", "fabric_to_noop": "fabric source -> noop",
        "parquet_to_parquet": "parquet -> parquet sink", "parquet_to_fabric_batch": "parquet -> fabric (df.write)",
        "parquet_to_fabric_stream": "parquet -> fabric (stream, availableNow)",
    }
    chart = bar_chart("spark", f"Spark local[2], {args.records:,} x 100-byte records, best of {args.repeats} warm",
                      [(labels[k], v) for k, v in rps.items()], "rows/s")
    lat_chart = latency_plot(lat, f"fabric -> Spark -> fabric end to end, {args.rate:g} records/s, "
                                  f"trigger processingTime={args.trigger!r}")
    ratio = {"fabric_to_noop": results["source_vs_parquet"],
             "parquet_to_fabric_batch": results["sink_batch_vs_parquet"],
             "parquet_to_fabric_stream": results["sink_stream_vs_parquet"]}
    print(table([(labels[k], f"{v:,.0f}", f"{v * VALUE_BYTES / 1e6:,.0f}",
                  f"{ratio[k]:.2f}x of parquet" if k in ratio else "") for k, v in rps.items()],
                ("path", "rows/s", "MB/s of values", "vs Spark's file format, same run")))
    print(table([(f"processingTime={args.trigger!r}", f"{args.rate:g}/s", f"{p50:.0f}", f"{p99:.0f}",
                  f"{max(lat):.0f}", f"{phases.get('triggerExecution', 0):.0f}", f"{phases['rows_per_batch']:.0f}")],
                ("trigger", "send rate", "p50 ms", "p99 ms", "max ms", "median batch ms", "rows/batch")))
    progress("median ms per micro-batch phase: " + ", ".join(f"{k} {v:g}" for k, v in phases.items()))
    progress(f"plots: {chart}, {lat_chart}")
    return results


if __name__ == "__main__":
    main()
