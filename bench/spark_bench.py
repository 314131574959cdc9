"""Spark benchmark: the fabric source and sink beside Spark's own parquet file source and sink, on the same
records (random, incompressible 100-byte values, null keys: the Kafka seeds' benchmark record), local[2],
warm (every path runs once untimed, then the paths take turns `--repeats` times and each keeps its best
run, by wall time and by CPU seconds of Spark's JVM and Python workers, which other tenants disturb less);
plus the end-to-end latency of a running fabric -> fabric streaming query.

Pairs (rows/s), each side producing the same columns from the same records:
  source, value column:   fabric topic (2 partitions), .schema("value binary") -> noop
                          vs parquet of the values (2 files) -> noop
  source, whole record:   fabric topic, default columns (key, value, topic, partition, offset, timestamp,
                          timestampType) -> noop   vs   parquet of exactly those rows -> noop
                          beside a Python source handing Spark prebuilt batches of those columns (no reading
                          at all): the ceiling of Spark's Python data source path on this machine
  sink, batch:            parquet -> df.write.format("fabric") (atomic)   vs   parquet -> df.write.parquet
  sink, stream:           parquet -> writeStream.format("fabric"), trigger availableNow (exactly-once)
                          vs   parquet -> Spark's file sink (exactly-once through its metadata log), same trigger
  both sinks again with conf/spark-defaults.conf's spark.sql.execution.arrow.maxBytesPerBatch (which spares
  Spark's Arrow writer a per-row size check; it does not touch the parquet paths); all else Spark's defaults
Latency: a producer sends timestamped records at `--rate`/s to topic lat-in while a streaming query copies
lat-in -> lat-out (trigger processingTime `--trigger`, started and warmed by one record first); a consumer
of lat-out records receive time minus send time (both from this process's clock) -> p50/p99, beside the
median duration of each phase of the query's micro-batches (Spark's durationMs).
"""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import fabric
from bench.ceiling_source import CeilingSource
from bench.latency_turns import schedule
from bench.log_bench import VALUE_BYTES, make_values
from bench.report import bar_chart, latency_plot, progress, save, table, timed
from fabric.sinks.foreach_writer import TopicWriter
from fabric.spark.session import SPARK_DEFAULTS, conf_dir_path, read_spark_defaults

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark's workers cannot connect back without it
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

PARTITIONS = 2
ARROW_MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"  # see conf/spark-defaults.conf
STAMP = struct.Struct("<q")
WARM_UP_WAIT_S = 2.0  # how long a warm-up record may take before another is sent
RUNS = itertools.count()  # numbers the outputs (topics, directories) of the runs of one process


def spark_session():
    """A local[2] session configured like the tests' (no UI, 2 shuffle partitions, reused workers)."""
    from pyspark.sql import SparkSession

    from fabric.spark import jar

    session = (SparkSession.builder.master("local[2]").appName("fabric-bench")
               .config("spark.jars", jar.with_reader())  # the JVM reader (format("fabric-jvm")), where built
               .config("spark.fabric.jvmReader", "false")  # format("fabric"): the Python source, the JVM reader's peer
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


def write_parquet(tbl: pa.Table, directory: str) -> str:
    """The records as PARTITIONS parquet files (snappy) in directory/parquet-src; returns that directory."""
    parquet_dir = os.path.join(directory, "parquet-src")
    os.makedirs(parquet_dir)
    half = tbl.num_rows // PARTITIONS
    for i in range(PARTITIONS):
        pq.write_table(tbl.slice(i * half, half), os.path.join(parquet_dir, f"part-{i}.parquet"),
                       compression="snappy", row_group_size=1 << 20)
    return parquet_dir


def create_topic(fab, name: str, topic_options: Mapping[str, Any] | None = None) -> str:
    """Create a PARTITIONS-partition topic (`topic_options`: more create_topic arguments, e.g. a replication
    factor and config); returns its name."""
    fab.create_topic(name, partitions=PARTITIONS, **(topic_options or {}))
    return name


def write_topic(url: str, tbl: pa.Table, topic_options: Mapping[str, Any] | None = None) -> None:
    """The records into topic 'src' of `url`, the same halves on the same partitions as write_parquet's files."""
    half = tbl.num_rows // PARTITIONS
    with fabric.connect(url) as fab:
        create_topic(fab, "src", topic_options)
        parts = pa.array(np.repeat(np.arange(PARTITIONS, dtype=np.int32), half))
        with fab.producer() as producer:
            producer.send_batch("src", tbl.slice(0, half * PARTITIONS).append_column("partition", parts))


def prepare(records: int, directory: str, url: str) -> str:
    """Write the records as 2 parquet files and into a 2-partition fabric topic 'src'; returns the parquet dir."""
    tbl = make_values(records)
    with timed(f"write {records:,} records as {PARTITIONS} parquet files and fabric topic 'src'"):
        parquet_dir = write_parquet(tbl, directory)
        write_topic(url, tbl)
    return parquet_dir


def best_of(actions: dict[str, Callable[[], None]], records: int, repeats: int,
            servers: Callable[[], float] | None = None) -> dict[str, dict[str, float]]:
    """Each action's rows/s in its fastest run and its lowest CPU seconds (timed's 'cpu') of any run.
    Every action runs once to warm up, then the actions take turns `repeats` times, so a slow spell of this
    noisy machine hits them alike; with `repeats` 0 the warm-up runs are the figures (cold: a quick check that
    every path runs, as the tests make). A run times the Spark job alone: an action's `before()` (making its output,
    e.g. a topic) and `after()` (checking and removing it), where it has them, run untimed around it.
    `servers()`: the CPU seconds used so far by server processes among this one's descendants (a local
    cluster's); then each path also gets its lowest CPU seconds of those servers and of the rest of any run."""
    def run(name: str, action: Callable[[], None], label: str) -> dict:
        getattr(action, "before", lambda: None)()
        served = servers() if servers else 0.0
        with timed(f"{name} ({label})") as t:
            action()
        t["servers"] = servers() - served if servers else 0.0
        getattr(action, "after", lambda: None)()
        return t

    warm = {name: run(name, action, "warm-up") for name, action in actions.items()}
    runs: dict[str, list[dict]] = {name: [] if repeats else [warm[name]] for name in actions}
    for i in range(repeats):
        for name, action in actions.items():
            runs[name].append(run(name, action, f"run {i + 1}/{repeats}"))
    best = {name: {"rows_per_s": records / min(t["seconds"] for t in ts), "cpu_s": min(t["cpu"] for t in ts)}
            for name, ts in runs.items()}
    if servers:
        for name, ts in runs.items():
            best[name] |= {"servers_cpu_s": min(t["servers"] for t in ts),
                           "cpu_s_without_servers": min(t["cpu"] - t["servers"] for t in ts)}
    return best


def check_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with argparse's usage error unless --records, --repeats, --rate and --seconds make a run."""
    if args.records < PARTITIONS or args.repeats < 0 or args.rate * args.seconds < 1:
        parser.error(f"--records at least {PARTITIONS}, --repeats at least 0, --rate x --seconds at least one record")


def best_of_label(repeats: int) -> str:
    """How a chart names best_of's figures."""
    return f"best of {repeats} warm" if repeats else "one cold run"


def noop(df) -> None:
    """Run `df` to its end into Spark's noop sink (reads everything, writes nothing)."""
    df.write.format("noop").mode("overwrite").save()


def stream_parquet(spark, parquet_dir: str, checkpoint: str, sink: str, options: Mapping[str, str]) -> None:
    """parquet -> `sink` as a streaming query with trigger availableNow (one micro-batch)."""
    writer = (spark.readStream.schema("value binary").parquet(parquet_dir).writeStream.format(sink)
              .option("checkpointLocation", checkpoint))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.trigger(availableNow=True).start().awaitTermination()


class ParquetSink:
    """A run of parquet -> Spark's parquet file sink: `df.write.parquet` (batch) or a stream (availableNow, its
    exactly-once file sink), into a new directory; removed after the run."""

    def __init__(self, spark, parquet_dir: str, directory: str, stream: bool) -> None:
        self.spark, self.parquet_dir, self.directory, self.stream = spark, parquet_dir, directory, stream
        self.out = self.checkpoint = ""

    def before(self) -> None:
        run = next(RUNS)
        self.out = os.path.join(self.directory, f"parquet-out-{run}")
        self.checkpoint = os.path.join(self.directory, f"ckpt-{run}")

    def __call__(self) -> None:
        if self.stream:
            stream_parquet(self.spark, self.parquet_dir, self.checkpoint, "parquet", {"path": self.out})
        else:
            self.spark.read.parquet(self.parquet_dir).write.parquet(self.out)

    def after(self) -> None:
        for path in (self.out, self.checkpoint):
            shutil.rmtree(path, ignore_errors=True)


class FabricSink:
    """A run of parquet -> the fabric sink of `url`: `df.write.format("fabric")` (batch, atomic) or a stream
    (availableNow, exactly-once), into a new topic made before the run (`topic_options` as create_topic's);
    after it the topic must hold every record once, then it is deleted. `conf`: Spark confs for the job alone.
    `settle_s`: a wait after creating the topic (a replicated topic's followers learn of it at their next
    heartbeat, and an acks=all write waits for them until then)."""

    def __init__(self, spark, fab, url: str, parquet_dir: str, records: int, directory: str, stream: bool,
                 topic_options: Mapping[str, Any] | None = None, conf: Mapping[str, str] | None = None,
                 settle_s: float = 0.0) -> None:
        self.spark, self.fab, self.url, self.parquet_dir = spark, fab, url, parquet_dir
        self.records, self.directory, self.stream = records, directory, stream
        self.topic_options, self.conf, self.settle_s = topic_options, dict(conf or {}), settle_s
        self.topic = self.checkpoint = ""

    def before(self) -> None:
        run = next(RUNS)
        self.topic = create_topic(self.fab, f"out-{run}", self.topic_options)
        self.checkpoint = os.path.join(self.directory, f"ckpt-{run}")
        time.sleep(self.settle_s)

    def __call__(self) -> None:
        for key, value in self.conf.items():
            self.spark.conf.set(key, value)
        try:
            if self.stream:
                stream_parquet(self.spark, self.parquet_dir, self.checkpoint, "fabric",
                               {"url": self.url, "topic": self.topic})
            else:
                (self.spark.read.parquet(self.parquet_dir).write.format("fabric").mode("append")
                 .option("url", self.url).option("topic", self.topic).save())
        finally:
            for key in self.conf:
                self.spark.conf.unset(key)

    def after(self) -> None:
        _check_count(self.fab, self.topic, self.records)
        self.fab.delete_topic(self.topic)
        shutil.rmtree(self.checkpoint, ignore_errors=True)


def throughput(spark, url: str, parquet_dir: str, records: int, directory: str, repeats: int) -> dict:
    """rows/s of every source and sink path and of its Spark peer, measured in this run."""
    record_parquet = os.path.join(directory, "parquet-records")
    with timed("write the fabric source's rows (all 7 record columns) as parquet"):
        fabric_read(spark, url).write.parquet(record_parquet)
    spark.dataSource.register(CeilingSource)
    tuned = {ARROW_MAX_BYTES: read_spark_defaults(conf_dir_path() / SPARK_DEFAULTS)[ARROW_MAX_BYTES]}
    with fabric.connect(url) as fab:
        def fabric_sink(stream: bool, conf: Mapping[str, str] | None = None) -> FabricSink:
            return FabricSink(spark, fab, url, parquet_dir, records, directory, stream, conf=conf)

        paths: dict[str, Callable[[], None]] = {
            "parquet_value_to_noop": lambda: noop(spark.read.parquet(parquet_dir)),
            "fabric_value_to_noop": lambda: noop(fabric_read(spark, url, "value binary")),
            "parquet_record_to_noop": lambda: noop(spark.read.parquet(record_parquet)),
            "fabric_record_to_noop": lambda: noop(fabric_read(spark, url)),
            "ceiling_record_to_noop": lambda: noop(spark.read.format("fabric-ceiling").option("records", records)
                                                   .option("partitions", PARTITIONS).load()),
            "parquet_to_parquet": ParquetSink(spark, parquet_dir, directory, stream=False),
            "parquet_to_fabric_batch": fabric_sink(stream=False),
            "parquet_to_parquet_stream": ParquetSink(spark, parquet_dir, directory, stream=True),
            "parquet_to_fabric_stream": fabric_sink(stream=True),
            # conf/spark-defaults.conf's Arrow setting: no per-row batch size check (the parquet paths ignore it)
            "parquet_to_fabric_batch_tuned": fabric_sink(stream=False, conf=tuned),
            "parquet_to_fabric_stream_tuned": fabric_sink(stream=True, conf=tuned),
        }
        return best_of(paths, records, repeats)


def fabric_read(spark, url: str, schema: str | None = None):
    """The benchmark topic as a batch DataFrame: all record columns, or only those of `schema`."""
    reader = spark.read.format("fabric").option("url", url).option("subscribe", "src")
    return (reader.schema(schema) if schema else reader).load()


def committed_records(fab, topic: str) -> int:
    """How many records a read_committed consumer reads from the whole topic (a transaction's markers take
    offsets on a cluster, so the partitions' end offsets are not record counts there)."""
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        partitions = [(topic, p) for p in range(len(fab.describe_topic(topic).partitions))]
        consumer.assign(partitions)
        ends, got, deadline = consumer.end_offsets(partitions), 0, time.monotonic() + 60
        while any(consumer.position(*tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {topic!r}: read {got:,} records, not up to its end offsets {ends}")
            got += consumer.poll_batch(1.0).num_rows
        return got


def _check_count(fab, topic: str, records: int) -> None:
    """A sink run only counts if every record landed (once)."""
    got = committed_records(fab, topic)
    if got != records:
        raise AssertionError(f"topic {topic!r} holds {got:,} records, expected {records:,}")


def latency(spark, url: str, directory: str, rate: float, seconds: float, trigger: str,
            topic_options: Mapping[str, Any] | None = None, real_time: bool = False,
            flush_each: bool = True) -> tuple[list[float], dict]:
    """End-to-end latencies (ms) of records sent at `rate`/s through a lat-in -> lat-out streaming query,
    and the median duration (ms) of each phase of its non-empty micro-batches (Spark's durationMs).
    `topic_options`: how the two topics are created (create_topic). `real_time`: the query reads with the JVM
    reader under trigger(realTime=`trigger`) and writes through the foreach sink real-time mode allows
    (fabric.sinks.foreach_writer) instead of micro-batches of format("fabric") under processingTime=`trigger`.
    `flush_each`: the producer waits for each record before the next (else it sends each at once, in flight
    together, as a producer at 1,000 records/s must on the cluster)."""
    run = next(RUNS)
    source, sink = f"lat-in-{run}", f"lat-out-{run}"
    with fabric.connect(url) as fab:
        create_topic(fab, source, topic_options)
        create_topic(fab, sink, topic_options)
        stream = (spark.readStream.format("fabric-jvm" if real_time else "fabric").option("url", url)
                  .option("subscribe", source).option("startingOffsets", "latest").load().select("value")
                  .writeStream.option("checkpointLocation", os.path.join(directory, f"ckpt-latency-{run}")))
        if real_time:
            stream = stream.foreach(TopicWriter(url, sink)).outputMode("update").trigger(realTime=trigger)
        else:
            stream = stream.format("fabric").option("url", url).option("topic", sink).trigger(processingTime=trigger)
        query = stream.start()
        try:
            if not real_time:  # a real-time batch reports progress when it ends: the warm-up record says it runs
                _wait_running(query)
            consumer = fab.consumer(sink, auto_offset_reset="earliest")
            _warm_up(fab, source, consumer, rate)
            since = time.perf_counter_ns()  # a warm-up record still on its way is not measured
            sent = int(rate * seconds)
            producer_thread = threading.Thread(target=_produce_stamped, args=(fab, source, sent, rate, flush_each),
                                               daemon=True)
            mode = f"realTime={trigger!r}" if real_time else f"processingTime={trigger!r}"
            with timed(f"latency: {sent} records at {rate:g}/s through a streaming query ({mode})"):
                producer_thread.start()
                out = _consume_stamped(consumer, sent, deadline=time.monotonic() + seconds + 60, since=since)
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


def _produce_stamped(fab, topic: str, count: int, rate: float, flush_each: bool = True) -> None:
    """Send `count` records to `topic` paced at `rate`/s; each value starts with when it was due (ns, perf counter:
    latency_turns.schedule). `flush_each`: wait for each record before the next."""
    pad = bytes(VALUE_BYTES - STAMP.size)
    with fab.producer(linger_ms=0) as producer:
        for _, due in schedule(count, rate):
            producer.send(topic, STAMP.pack(due) + pad)
            if flush_each:
                producer.flush()


def _warm_up(fab, topic: str, consumer, rate: float, timeout_s: float = 120.0) -> None:
    """Send a record to `topic` each WARM_UP_WAIT_S until one reaches `consumer`: the first batch that carries data
    starts the workers, and a query may not have fixed its starting offsets yet (a record sent before it does is
    never read: startingOffsets=latest)."""
    deadline = time.monotonic() + timeout_s
    while True:
        _produce_stamped(fab, topic, 1, rate)
        if consumer.poll(WARM_UP_WAIT_S):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no warm-up record came through the query within {timeout_s:.0f} s")


def _consume_stamped(consumer, count: int, deadline: float, since: int = 0) -> list[float]:
    """End-to-end latencies (ms) of `count` stamped records, each its receipt minus its stamp; records stamped
    before `since` (perf counter ns) are not counted."""
    latencies: list[float] = []
    while len(latencies) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(latencies)} of {count} records reached lat-out")
        for record in consumer.poll(0.005):
            stamp = STAMP.unpack_from(record.value)[0]
            if stamp >= since:
                latencies.append((time.perf_counter_ns() - stamp) / 1e6)
    return latencies


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per path after one warm-up (0: the "
                        "warm-up's cold figures, a quick check)")
    parser.add_argument("--rate", type=float, default=100.0, help="latency test: records sent per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency test: how long to send")
    parser.add_argument("--trigger", default="0 seconds", help="latency test: processingTime trigger")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    check_sizes(parser, args)
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
    pairs = {  # path: its Spark peer on the same records and columns
        "fabric_value_to_noop": "parquet_value_to_noop", "fabric_record_to_noop": "parquet_record_to_noop",
        "ceiling_record_to_noop": "parquet_record_to_noop", "parquet_to_fabric_batch": "parquet_to_parquet",
        "parquet_to_fabric_stream": "parquet_to_parquet_stream", "parquet_to_fabric_batch_tuned": "parquet_to_parquet",
        "parquet_to_fabric_stream_tuned": "parquet_to_parquet_stream",
    }
    ratio = {path: rps[path]["rows_per_s"] / rps[peer]["rows_per_s"] for path, peer in pairs.items()}
    cpu_ratio = {path: rps[peer]["cpu_s"] / rps[path]["cpu_s"] for path, peer in pairs.items()}
    results = {
        "records": args.records, "value_bytes": VALUE_BYTES, "key": None, "spark_master": "local[2]",
        "repeats": args.repeats, "paths": rps, "peers": pairs, "vs_peer": ratio, "vs_peer_by_cpu": cpu_ratio,
        "latency": {"trigger": args.trigger, "rate_per_s": args.rate, "records": len(lat),
                    "p50_ms": p50, "p99_ms": p99, "max_ms": max(lat), "median_batch_phase_ms": phases},
    }
    save("spark", results)
    labels = {
        "parquet_value_to_noop": "parquet (value) -> noop",
        "fabric_value_to_noop": "fabric, schema value -> noop",
        "parquet_record_to_noop": "parquet (7 record columns) -> noop",
        "fabric_record_to_noop": "fabric (7 record columns) -> noop",
        "ceiling_record_to_noop": "Python source ceiling (7 columns, prebuilt) -> noop",
        "parquet_to_parquet": "parquet -> parquet (df.write)",
        "parquet_to_fabric_batch": "parquet -> fabric (df.write, atomic)",
        "parquet_to_parquet_stream": "parquet -> parquet (stream, availableNow)",
        "parquet_to_fabric_stream": "parquet -> fabric (stream, availableNow, exactly-once)",
        "parquet_to_fabric_batch_tuned": "parquet -> fabric (df.write), conf/spark-defaults.conf Arrow setting",
        "parquet_to_fabric_stream_tuned": "parquet -> fabric (stream), conf/spark-defaults.conf Arrow setting",
    }
    kinds = {"fabric": "#4C72B0", "spark": "#9A9A9A", "ceiling": "#DD8452"}
    colors = [kinds["ceiling"] if k.startswith("ceiling") else kinds["fabric"] if k in pairs else kinds["spark"]
              for k in rps]
    chart = bar_chart("spark", f"Spark local[2], {args.records:,} x 100-byte records, {best_of_label(args.repeats)}",
                      [(labels[k], v["rows_per_s"]) for k, v in rps.items()], "rows/s", colors,
                      {kinds["fabric"]: "fabric", kinds["spark"]: "Spark's parquet (the peer)",
                       kinds["ceiling"]: "Python source reading nothing"})
    lat_chart = latency_plot("spark_latency", f"fabric -> Spark -> fabric end to end, {args.rate:g} records/s, "
                                              f"trigger processingTime={args.trigger!r}", {"end to end": lat},
                             "end-to-end latency")
    print(table([(labels[k], f"{v['rows_per_s']:,.0f}", f"{ratio[k]:.2f}x" if k in ratio else "",
                  f"{v['cpu_s']:.2f}", f"{cpu_ratio[k]:.2f}x" if k in cpu_ratio else "",
                  labels[pairs[k]] if k in pairs else "") for k, v in rps.items()],
                ("path", "rows/s", "vs peer", "CPU s", "vs peer by CPU", "peer")))
    print(table([(f"processingTime={args.trigger!r}", f"{args.rate:g}/s", f"{p50:.0f}", f"{p99:.0f}",
                  f"{max(lat):.0f}", f"{phases.get('triggerExecution', 0):.0f}", f"{phases['rows_per_batch']:.0f}")],
                ("trigger", "send rate", "p50 ms", "p99 ms", "max ms", "median batch ms", "rows/batch")))
    progress("median ms per micro-batch phase: " + ", ".join(f"{k} {v:g}" for k, v in phases.items()))
    progress(f"plots: {chart}, {lat_chart}")
    return results


if __name__ == "__main__":
    main()
