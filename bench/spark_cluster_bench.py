"""Spark benchmark on a replicated cluster: the fabric source and sink on a local cluster (a coordinator and 3 data
nodes, real processes on 127.0.0.1; fabric.server.local_cluster) beside the same on the embedded `file://` fabric and
Spark's own parquet, on the same records (random 100-byte values, null keys) in the same run, local[2], warm
(spark_bench's best_of: every path runs once untimed, then the paths take turns `--repeats` times and each keeps
its best run, by wall time and by CPU seconds of Spark's JVM and Python workers and the cluster's servers, and
of the servers alone: on one 2-core machine they take CPU from Spark, where a real cluster has machines of its own).

Cluster topics: 2 partitions, replication factor 3, min.insync.replicas 2, written with acks=all (the producer's
default; the sink's transactional appends always wait for the in-sync replicas). Readers read committed data.

Paths (rows/s), each on the same records and producing the same columns:
  source, value column:   cluster topic, .schema("value binary") -> noop   vs   file:// topic, same   vs
                          parquet of the values -> noop
  source, whole record:   cluster topic, the 7 record columns -> noop   vs   file:// topic, same   vs
                          parquet of those rows (read from the file:// topic) -> noop
  the JVM reader:         the same two reads of the cluster topic through format("fabric-jvm") (where make install
                          built it), against parquet and against format("fabric") on the cluster
  sink, batch:            parquet -> df.write.format("fabric") (atomic) into a new cluster topic   vs   into a new
                          file:// topic   vs   parquet -> df.write.parquet
  sink, stream:           parquet -> writeStream.format("fabric"), trigger availableNow (exactly-once), cluster
                          vs file://   vs   parquet -> Spark's file sink (exactly-once), same trigger
  Spark's defaults throughout (no conf/spark-defaults.conf Arrow setting). A sink run times the Spark job: its
  topic is created before, and checked for every record once (read_committed) and deleted after, untimed.
References without Spark, on each fabric: a consumer's poll_batch of topic 'src' from start to end, and a
producer's send_batch (acks=all) of the same records into a new topic: what the fabric itself moves on this
machine, of which a Spark path on the cluster reaches the share shown as "vs client".
Latency: spark_bench.latency on the cluster, then on file:// in the same run: a producer sends timestamped records
at `--rate`/s to lat-in while a streaming query copies lat-in -> lat-out (trigger processingTime `--trigger`); a
consumer of lat-out records receive minus send time -> p50/p99 (on the cluster both topics are RF 3 as above).
Real-time mode (where make install built the JVM reader): the same latency on the cluster at `--realtime-rate`/s
(default 1,000), the producer sending each record at once, through a real-time query (format("fabric-jvm"), trigger
realTime `--realtime-batch`, into the foreach sink fabric.sinks.foreach_writer) and through micro-batches of
format("fabric") as its peer; goal: real-time p99 <= 50 ms.
Goals (reported, not asserted): source on the cluster >= 0.9x its file:// figure, sink >= 0.8x.
"""
from __future__ import annotations

import argparse
import os
from contextlib import ExitStack
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

import fabric
from bench.log_bench import VALUE_BYTES, make_values
from bench.report import bar_chart, cpu_seconds, latency_plot, progress, run_suite, table, timed
from bench.spark_bench import (
    PARTITIONS,
    FabricSink,
    ParquetSink,
    best_of,
    best_of_label,
    check_sizes,
    committed_records,
    fabric_read,
    latency,
    noop,
    spark_session,
    write_parquet,
    write_topic,
)
from fabric.server.local_cluster import LocalCluster, node_racks
from fabric.spark import jar

NODES, MIN_ISR = 3, 2
REPLICATED = {"replication_factor": NODES, "config": {"min.insync.replicas": str(MIN_ISR)}}
# Node liveness: long enough that a node starved of CPU by Spark on 2 cores is never declared dead mid-run
SESSION_TIMEOUT_MS, HEARTBEAT_MS = 10_000, 300
# A sink's new RF 3 topic is written once its followers know it (they learn of it at their next heartbeat; an
# acks=all write waits for them until then), as a running job's topic would be: waited for, untimed
SETTLE_S = 2 * HEARTBEAT_MS / 1000
SOURCE_GOAL, SINK_GOAL = 0.9, 0.8  # cluster over file://
FABRICS = ("cluster", "file")
TICK_S = 0.01  # psutil's CPU time resolution: the least CPU time a ratio divides by (tiny smoke-test runs)
ORDER = ("parquet", "file", "cluster")  # of the rows of a kind in the tables
# the JVM reader (format("fabric-jvm")) on the cluster, where make install built it: a source path only
READERS = (*ORDER, "jvm") if jar.path() is not None else ORDER
SOURCES = ("value", "record")
SINKS = ("batch", "stream")
LABELS = {"cluster": f"cluster (RF {NODES}, acks=all)", "file": "file://", "parquet": "parquet",
          "jvm": f"cluster (RF {NODES}), JVM reader"}
JVM_GOALS = {"vs_parquet": 1.5, "vs_python": 2.0}  # the JVM reader's, value column: over parquet, over format("fabric")
MODES = {"micro_batch": 'micro-batches (format("fabric"))', "real_time": "real-time mode (JVM reader, foreach)"}
REAL_TIME_GOAL_P99_MS = 50.0


def source_key(where: str, columns: str) -> str:
    return f"{where}_{columns}_to_noop"


def sink_key(where: str, kind: str) -> str:
    return f"parquet_to_{where}_{kind}"


def client_key(where: str, direction: str) -> str:
    """A reference path without Spark: the Python client consuming or producing the same records."""
    return f"{direction}_{where}"


class Row(NamedTuple):
    where: str  # what the path reads or writes: parquet, file or cluster
    label: str
    reference: bool = False  # the Python client without Spark


def describe() -> dict[str, Row]:
    """Every path in the order of the tables, by key."""
    out = {}
    for columns, what in (("value", "value column"), ("record", "7 record columns")):
        for where in READERS:
            out[source_key(where, columns)] = Row(where, f"{LABELS[where]}, {what} -> noop")
    for where in ORDER[1:]:
        out[client_key(where, "consume")] = Row(where, f"no Spark: consumer poll_batch from {LABELS[where]}", True)
    for kind, what in (("batch", "df.write"), ("stream", "stream, availableNow")):
        for where in ORDER:
            exactly_once = "" if where == "parquet" else ", atomic" if kind == "batch" else ", exactly-once"
            out[sink_key(where, kind)] = Row(where, f"parquet -> {LABELS[where]} ({what}{exactly_once})")
    for where in ORDER[1:]:
        out[client_key(where, "produce")] = Row(where, f"no Spark: producer send_batch to {LABELS[where]}", True)
    return out


def servers_cpu(cluster: LocalCluster) -> Callable[[], float]:
    """A function giving the CPU seconds the cluster's coordinator and nodes have used so far."""
    processes = [psutil.Process(server.process.pid) for server in (cluster.coordinator, *cluster.nodes.values())
                 if server.process is not None]

    def used() -> float:
        return sum(cpu_seconds(p) for p in processes)
    return used


class ProducerSink(FabricSink):
    """The reference for the sink: one Python producer's send_batch (acks=all) of the same records into a new topic,
    made before and checked and deleted after the timed run as the sink's."""

    def __init__(self, fab, records: pa.Table, directory: str, topic_options: Mapping[str, Any] | None) -> None:
        super().__init__(None, fab, "", "", records.num_rows, directory, stream=False, topic_options=topic_options,
                         settle_s=SETTLE_S if topic_options else 0.0)
        self.table = records

    def __call__(self) -> None:
        with self.fab.producer(acks="all") as producer:
            producer.send_batch(self.topic, self.table)


def throughput(spark, urls: dict[str, str], parquet_dir: str, records: int, directory: str, repeats: int,
               servers: Callable[[], float]) -> dict[str, dict[str, float]]:
    """rows/s and CPU s of every path (all of it, the cluster's `servers`' and the rest): source and sink on each
    fabric of `urls`, the parquet peers, and the Python client without Spark."""
    record_parquet = os.path.join(directory, "parquet-records")
    with timed("write the fabric source's rows (all 7 record columns) as parquet"):
        fabric_read(spark, urls["file"]).write.parquet(record_parquet)
    values = pq.read_table(parquet_dir)  # the producer sends them as the Spark tasks do, half to each partition
    values = values.append_column("partition", pa.array(np.arange(values.num_rows) * PARTITIONS // values.num_rows,
                                                        pa.int32()))
    with ExitStack() as stack:
        fabs = {where: stack.enter_context(fabric.connect(url)) for where, url in urls.items()}

        def topic_options(where: str) -> Mapping[str, Any] | None:
            return REPLICATED if where == "cluster" else None

        def source(where: str, columns: str) -> Callable[[], None]:
            if where == "parquet":
                return lambda: noop(spark.read.parquet(parquet_dir if columns == "value" else record_parquet))
            if where == "jvm":
                return lambda: noop(jvm_read(spark, urls["cluster"], columns == "value"))
            return lambda: noop(fabric_read(spark, urls[where], "value binary" if columns == "value" else None))

        def consume(where: str) -> Callable[[], None]:
            def run() -> None:
                if (got := committed_records(fabs[where], "src")) != records:
                    raise AssertionError(f"read {got:,} records of 'src', expected {records:,}")
            return run

        def sink(where: str, kind: str) -> Callable[[], None]:
            if where == "parquet":
                return ParquetSink(spark, parquet_dir, directory, stream=kind == "stream")
            return FabricSink(spark, fabs[where], urls[where], parquet_dir, records, directory,
                              stream=kind == "stream", topic_options=topic_options(where),
                              settle_s=SETTLE_S if where == "cluster" else 0.0)

        paths: dict[str, Callable[[], None]] = {}
        for where in ("parquet", *FABRICS):
            paths |= {source_key(where, columns): source(where, columns) for columns in SOURCES}
            paths |= {sink_key(where, kind): sink(where, kind) for kind in SINKS}
        paths |= {source_key("jvm", columns): source("jvm", columns) for columns in SOURCES}
        for where in FABRICS:
            paths[client_key(where, "consume")] = consume(where)
            paths[client_key(where, "produce")] = ProducerSink(fabs[where], values, directory, topic_options(where))
        return best_of({key: paths[key] for key in describe()}, records, repeats, servers)


def jvm_read(spark, url: str, value_only: bool):
    """The benchmark topic through the JVM reader: all record columns, or the value column alone."""
    df = spark.read.format("fabric-jvm").option("url", url).option("subscribe", "src").load()
    return df.select("value") if value_only else df


def jvm_ratios(rps: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per JVM reader path: its rows/s over the parquet peer's and over format("fabric")'s on the same cluster."""
    return {path: {"vs_parquet": rps[path]["rows_per_s"] / rps[path.replace("jvm", "parquet")]["rows_per_s"],
                   "vs_python": rps[path]["rows_per_s"] / rps[path.replace("jvm", "cluster")]["rows_per_s"]}
            for path, row in describe().items() if row.where == "jvm"}


def ratios(rps: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per cluster path: its rows/s over the file:// path's and the parquet peer's, and the same by CPU seconds
    (the peer's over the cluster's: higher is better in every column), also with the cluster servers' CPU left
    out (what the Spark side pays where the nodes run on machines of their own); for a Spark path also its share
    of the Python client's rows/s on the cluster (consume for a source, produce for a sink)."""
    def cpu(path: str, kind: str = "cpu_s") -> float:
        return max(rps[path][kind], TICK_S)

    out: dict[str, dict[str, float]] = {}
    for path, row in describe().items():
        if row.where != "cluster":
            continue
        file = path.replace("cluster", "file")
        out[path] = {"vs_file": rps[path]["rows_per_s"] / rps[file]["rows_per_s"],
                     "vs_file_by_cpu": cpu(file) / cpu(path),
                     "vs_file_by_cpu_without_servers": cpu(file) / cpu(path, "cpu_s_without_servers")}
        if not row.reference:
            parquet = path.replace("cluster", "parquet")
            client = client_key("cluster", "consume" if path.endswith("_to_noop") else "produce")
            out[path] |= {"vs_parquet": rps[path]["rows_per_s"] / rps[parquet]["rows_per_s"],
                          "vs_parquet_by_cpu": cpu(parquet) / cpu(path),
                          "vs_client": rps[path]["rows_per_s"] / rps[client]["rows_per_s"]}
    return out


def goals(vs: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Each cluster Spark path's goal (cluster over file://) and whether this run met it."""
    out = {}
    for path, ratio in vs.items():
        if describe()[path].reference:
            continue
        goal = SOURCE_GOAL if path.endswith("_to_noop") else SINK_GOAL
        out[path] = {"goal_vs_file": goal, "vs_file": ratio["vs_file"], "met": ratio["vs_file"] >= goal}
    return out


def summary(ms: list[float], phases: dict) -> dict[str, Any]:
    """p50, p99 and max of end-to-end latencies in ms, with the median micro-batch phases."""
    return {"records": len(ms), "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(max(ms)), "median_batch_phase_ms": phases}


def run(args: argparse.Namespace, directory: str) -> tuple[dict, dict[str, list[float]]]:
    """Start the cluster and Spark, load the records everywhere, measure; the results and the raw latencies."""
    with LocalCluster(os.path.join(directory, "cluster"), NODES, SESSION_TIMEOUT_MS, HEARTBEAT_MS,
                      racks=node_racks(NODES)) as cluster:
        urls = {"cluster": cluster.url, "file": f"file://{os.path.join(directory, 'fabric')}"}
        progress(f"cluster {cluster.url}: a coordinator and {NODES} data nodes")
        tbl = make_values(args.records)
        with timed(f"write {args.records:,} records as {PARTITIONS} parquet files, file:// topic 'src' and "
                   f"cluster topic 'src' (RF {NODES}, acks=all)"):
            parquet_dir = write_parquet(tbl, directory)
            for where, url in urls.items():
                write_topic(url, tbl, REPLICATED if where == "cluster" else None)
        del tbl
        spark = spark_session()
        try:
            rps = throughput(spark, urls, parquet_dir, args.records, directory, args.repeats,
                             servers_cpu(cluster))
            lat: dict[str, dict] = {}
            raw: dict[str, list[float]] = {}
            for where in FABRICS:
                progress(f"latency on {LABELS[where]}")
                raw[where], phases = latency(spark, urls[where], os.path.join(directory, f"latency-{where}"),
                                             args.rate, args.seconds, args.trigger,
                                             REPLICATED if where == "cluster" else None)
                lat[where] = summary(raw[where], phases)
            if "jvm" in READERS:
                realtime = real_time_latency(spark, cluster.url, directory, args, raw)
        finally:
            spark.stop()
        with fabric.connect(cluster.url) as fab:
            leaders = {p.partition: p.leader for p in fab.describe_topic("src").partitions}
    vs = ratios(rps)
    return {
        "records": args.records, "value_bytes": VALUE_BYTES, "key": None, "spark_master": "local[2]",
        "partitions": PARTITIONS, "repeats": args.repeats,
        "cluster": {"nodes": NODES, "replication_factor": NODES, "min_insync_replicas": MIN_ISR, "acks": "all",
                    "node_session_timeout_ms": SESSION_TIMEOUT_MS, "source_topic_leaders": leaders},
        "paths": rps, "ratios": vs, "goals": goals(vs), "jvm_reader": {"ratios": jvm_ratios(rps), "goals": JVM_GOALS},
        "latency": {"trigger": args.trigger, "rate_per_s": args.rate, "seconds": args.seconds, **lat},
        **({"real_time": realtime} if "jvm" in READERS else {}),
    }, raw


def real_time_latency(spark, url: str, directory: str, args: argparse.Namespace,
                      raw: dict[str, list[float]]) -> dict[str, Any]:
    """The cluster's end-to-end latency at `--realtime-rate` through a real-time query (the JVM reader, trigger
    realTime=`--realtime-batch`, into the foreach sink) and, as its peer in the same run, through micro-batches
    (format("fabric") both ways, processingTime `--trigger`), the producer sending each record at once; their raw
    latencies go into `raw` under MODES' keys."""
    out: dict[str, Any] = {"rate_per_s": args.realtime_rate, "seconds": args.seconds,
                           "batch_duration": args.realtime_batch, "goal_p99_ms": REAL_TIME_GOAL_P99_MS}
    for mode, label in MODES.items():
        progress(f"latency on the cluster at {args.realtime_rate:g} records/s: {label}")
        real_time = mode == "real_time"
        raw[mode], phases = latency(spark, url, os.path.join(directory, f"latency-{mode}"), args.realtime_rate,
                                    args.seconds, args.realtime_batch if real_time else args.trigger, REPLICATED,
                                    real_time=real_time, flush_each=False)
        out[mode] = summary(raw[mode], phases)
    return out


def report(results: dict, raw: dict[str, list[float]]) -> None:
    """The Markdown tables, the goals and the plots (bench/results/spark_cluster*.png)."""
    rps, vs, lat = results["paths"], results["ratios"], results["latency"]
    paths = describe()

    def label(key: str) -> str:
        return paths[key].label

    def ratio(key: str, name: str) -> str:
        return f"{vs[key][name]:.2f}x" if name in vs.get(key, {}) else ""

    def cpu(key: str) -> tuple[str, str]:
        if paths[key].where not in ("cluster", "jvm"):
            return f"{rps[key]['cpu_s']:.2f}", ""
        return f"{rps[key]['cpu_s']:.2f}", f"{rps[key]['servers_cpu_s']:.2f}"

    print(table([(label(k), f"{v['rows_per_s']:,.0f}", ratio(k, "vs_file"), ratio(k, "vs_parquet"),
                  ratio(k, "vs_client"), *cpu(k), ratio(k, "vs_file_by_cpu_without_servers"))
                 for k, v in rps.items()],
                ("path", "rows/s", "cluster vs file://", "cluster vs parquet", "cluster vs client without Spark",
                 "CPU s", "of which servers", "cluster vs file:// by CPU without servers")))
    print()
    for path, goal in results["goals"].items():
        print(f"goal {label(path)}: >= {goal['goal_vs_file']:g}x file:// -> {goal['vs_file']:.2f}x, "
              f"{'met' if goal['met'] else 'NOT met'}")
    for path, jvm in results["jvm_reader"]["ratios"].items():
        print(f"{label(path)}: {jvm['vs_parquet']:.2f}x parquet, {jvm['vs_python']:.2f}x format(\"fabric\") on the "
              f"cluster (goals for the value column: >= {JVM_GOALS['vs_parquet']:g}x and >= "
              f"{JVM_GOALS['vs_python']:g}x)")
    print()

    def delays(where: str) -> tuple[str, ...]:
        phases = lat[where]["median_batch_phase_ms"]
        return (LABELS[where], *(f"{lat[where][m]:.0f}" for m in ("p50_ms", "p99_ms", "max_ms")),
                *(f"{phases.get(p, 0):.0f}" for p in ("triggerExecution", "addBatch", "rows_per_batch")))

    print(table([delays(where) for where in FABRICS],
                ("fabric -> Spark -> fabric", "p50 ms", "p99 ms", "max ms", "median batch ms", "median addBatch ms",
                 "rows/batch")))
    print(f"\nlatency at {lat['rate_per_s']:g} records/s for {lat['seconds']:g} s, trigger processingTime="
          f"{lat['trigger']!r}")
    kinds = {"cluster": "#4C72B0", "file": "#55A868", "parquet": "#9A9A9A", "jvm": "#C44E52"}
    spark_paths = [k for k in rps if not paths[k].reference]  # the clients alone (in the table) dwarf them
    chart = bar_chart("spark_cluster", f"Spark local[2], {results['records']:,} x 100-byte records, "
                      f"{best_of_label(results['repeats'])}; {NODES}-node cluster, RF {NODES}",
                      [(label(k), rps[k]["rows_per_s"]) for k in spark_paths], "rows/s",
                      [kinds[paths[k].where] for k in spark_paths],
                      {kinds["cluster"]: LABELS["cluster"], kinds["file"]: "file:// (embedded)",
                       kinds["parquet"]: "Spark's parquet (the peer)", kinds["jvm"]: LABELS["jvm"]})
    lat_chart = latency_plot("spark_cluster_latency", f"fabric -> Spark -> fabric end to end, {lat['rate_per_s']:g} "
                             f"records/s, trigger processingTime={lat['trigger']!r}",
                             {LABELS[where]: raw[where] for where in FABRICS}, "end-to-end latency")
    plots = [chart, lat_chart]
    if "real_time" in results:
        rt = results["real_time"]
        print()
        print(table([(label, *(f"{rt[mode][m]:.1f}" for m in ("p50_ms", "p99_ms", "max_ms")))
                     for mode, label in MODES.items()], ("cluster -> Spark -> cluster", "p50 ms", "p99 ms", "max ms")))
        met = rt["real_time"]["p99_ms"] <= rt["goal_p99_ms"]
        print(f"\nat {rt['rate_per_s']:g} records/s for {rt['seconds']:g} s, real-time batches of "
              f"{rt['batch_duration']}; goal real-time p99 <= {rt['goal_p99_ms']:g} ms: "
              f"{rt['real_time']['p99_ms']:.1f} ms, {'met' if met else 'NOT met'}; micro-batch p99 / real-time p99: "
              f"{rt['micro_batch']['p99_ms'] / rt['real_time']['p99_ms']:.1f}x")
        plots.append(latency_plot("spark_cluster_real_time", f"cluster -> Spark -> cluster end to end, "
                                  f"{rt['rate_per_s']:g} records/s", {MODES[m]: raw[m] for m in MODES},
                                  "end-to-end latency"))
    progress(f"plots: {', '.join(map(str, plots))}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000, help="records per path, even (default 2,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per path after one warm-up (default 3; "
                        "0: the warm-up's cold figures, a quick check)")
    parser.add_argument("--rate", type=float, default=100.0, help="latency: records sent per second (default 100)")
    parser.add_argument("--seconds", type=float, default=15.0, help="latency: seconds of sending per fabric "
                        "(default 15)")
    parser.add_argument("--trigger", default="0 seconds", help="latency: processingTime trigger (default '0 seconds')")
    parser.add_argument("--realtime-rate", type=float, default=1000.0, help="real-time latency: records sent per "
                        "second, also through the micro-batch peer (default 1000)")
    parser.add_argument("--realtime-batch", default="10 seconds", help="real-time latency: the duration of a real-time "
                        "batch (trigger realTime; default '10 seconds': the foreach sink's Python worker gets the last "
                        "rows of a batch at its end)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    args.records -= args.records % PARTITIONS  # every path moves the same records: half in each partition
    check_sizes(parser, args)
    return run_suite("spark_cluster", args, run, report)


if __name__ == "__main__":
    main()
