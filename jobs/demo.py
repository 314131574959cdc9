"""`make demo`: the main job end to end on the embedded default fabric (no server).

Creates a typed `clicks` topic, produces sample events with the Python producer, then runs two streaming
queries until caught up: clicks -> SQL filter -> `big-clicks` (exactly-once fabric sink) and clicks -> a Delta
table (exactly-once archive). Prints the counts and each query's consumer-group lag. Run it again: new events
are processed from the checkpoints and every count still adds up.

With `--replication-factor` (as jobs/demo_cluster.py runs it on a local cluster) both topics are replicated
(min.insync.replicas 2) on the data nodes, and the Spark sink writes `big-clicks` as transactions on its
partition leaders.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

import fabric

CLICKS = pa.schema([("user", pa.string()), ("page", pa.string()), ("amount", pa.float64())])
THRESHOLD = 50.0
READ_S = 120  # the report's reads of a topic to its end (a killed leader is replaced within seconds)


def sample_events(n: int, seed: int) -> pa.Table:
    """n random click events: a user, a page and an amount."""
    rng = np.random.default_rng(seed)
    users = pa.array([f"user-{i}" for i in rng.integers(0, 1000, n)])
    pages = pa.array(np.array(["/home", "/search", "/cart", "/checkout", "/help"])[rng.integers(0, 5, n)])
    return pa.table({"key": pa.compute.cast(users, pa.binary()), "user": users, "page": pages,
                     "amount": pa.array(np.round(rng.exponential(30.0, n), 2))})


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("FABRIC_URL", "./fabric-data"), help="fabric URL")
    p.add_argument("--work", default="./demo-data", help="where checkpoints and the Delta table go")
    p.add_argument("--events", type=int, default=100_000, help="events to produce in this run")
    p.add_argument("--replication-factor", type=int, default=None,
                   help="create clicks with this replication factor (a cluster with data nodes)")
    p.add_argument("--max-offsets-per-trigger", default=None,
                   help="cap on records per micro-batch of both queries (default: the whole backlog in one)")
    args = p.parse_args(argv)
    work = os.path.abspath(args.work)
    fab = fabric.connect(args.url)
    print(f"fabric: {fab.url}")
    if "clicks" not in fab.list_topics():
        factor = args.replication_factor
        for topic in ("clicks", "big-clicks"):
            fab.create_topic(topic, partitions=3, schema=CLICKS, replication_factor=factor,
                             config={"min.insync.replicas": str(min(2, factor))} if factor else None)
    events = sample_events(args.events, seed=time.time_ns() % 2**32)
    start = time.perf_counter()
    with fab.producer() as producer:
        producer.send_batch("clicks", events)
    print(f"produced {args.events:,} events in {time.perf_counter() - start:.2f} s")

    import archive  # the sibling jobs (this script's directory is first on sys.path); imported here, so that
    import transform  # tests can load this module by its path for sample_events without them

    common = ["--url", fab.url, "--trigger", "available-now"]
    if args.max_offsets_per_trigger:
        common += ["--max-offsets-per-trigger", args.max_offsets_per_trigger]
    transform.main(common + ["--checkpoint", f"{work}/checkpoints/transform", "--input", "clicks",
                             "--output", "big-clicks", "--group-id", "demo-transform", "--sql",
                             f"SELECT key, user, page, amount FROM input WHERE amount > {THRESHOLD}"])
    archive.main(common + ["--checkpoint", f"{work}/checkpoints/archive", "--topic", "clicks",
                           "--table", f"{work}/clicks-delta", "--group-id", "demo-archive"])
    report(fab, f"{work}/clicks-delta")
    fab.close()


def report(fab: fabric.Fabric, table_path: str) -> None:
    """Counts that must agree if every record was processed exactly once, and the groups' lag."""
    def read_all(topic: str) -> pa.Table:
        """Every committed record of `topic`, read until the consumer's position reaches each partition's end: an
        empty poll proves nothing (a partition whose leader was just killed answers nothing until another is
        elected)."""
        partitions = [(topic, p) for p in range(len(fab.describe_topic(topic).partitions))]
        consumer = fab.consumer(auto_offset_reset="earliest")
        consumer.assign(partitions)
        ends, parts = consumer.end_offsets(partitions), []
        deadline = time.monotonic() + READ_S
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                raise SystemExit(f"could not read {topic} to its end within {READ_S} s")
            parts.append(consumer.poll_batch(0.5, columns=["amount"]))
        consumer.close()
        return pa.concat_tables(parts) if parts else pa.table({"amount": pa.array([], pa.float64())})
    clicks = read_all("clicks")
    big = read_all("big-clicks")
    expected = pa.compute.sum(pa.compute.greater(clicks.column("amount"), THRESHOLD)).as_py() or 0
    archived = DeltaTable(table_path).to_pyarrow_table(columns=["offset"]).num_rows
    print(f"\nclicks: {clicks.num_rows:,} records; big-clicks: {big.num_rows:,} "
          f"(expected {expected:,}); Delta archive: {archived:,} rows")
    lags = {group: sum(row.lag or 0 for row in fab.describe_group(group)) for group in ("demo-transform",
                                                                                      "demo-archive")}
    for group, lag in lags.items():
        print(f"group {group}: lag {lag:,}")
    if big.num_rows != expected or archived != clicks.num_rows:
        raise SystemExit("exactly once: NO, counts disagree")
    print(f"exactly once: yes. Proved: Spark read each of the {clicks.num_rows:,} clicks once in each query, "
          f"wrote the {expected:,} over {THRESHOLD} to big-clicks and archived all of them to Delta, nothing lost "
          f"and nothing twice" + (" (both groups caught up: lag 0)" if not any(lags.values()) else ""))


if __name__ == "__main__":
    main()
