"""Latency budget of one acks=all write: a local cluster (a coordinator and 3 data nodes, no ZooKeeper, real
processes on 127.0.0.1), every process tracing (fabric.common.trace, $FABRIC_TRACE_FILE), and one producer in this
process sending --records records of 100 bytes at --rate/s to a 1-partition topic (replication factor 3,
min.insync.replicas=2), each with send().get() (linger_ms=0), after --warmup records that are not counted.

Each write is followed through the trace, step by step:
  send              client: producer.send() called
  request           client: the produce request goes to the leader
  produce_read      leader: the produce request is read (on the fabric protocol's event loop)
  produce_received  leader: the produce request is served (on the event loop; on a worker if it may wait)
  append_started    leader: the request is checked and its rows decoded; the partition's append starts
  leader_append     leader: the rows are in its log
  fetch_answered    leader: the follower's fetch that gets the rows is read
  fetch_received    follower: the leader's answer with the rows is back
  follower_append   follower: the rows are in its log
  next_fetch        leader: the follower's next fetch (from past the rows: it has them) is read
  high_watermark    leader: the high watermark moves past the rows
  produce_answered  leader: the produce is answered
  ack               client: the answer is back (send().get() returns right after)
The follower steps are those of the follower whose next fetch came last: with the whole ISR in sync, the high
watermark waits for it. Per step: the median and p99 of the time since send, and of the time since the previous
step.
"""
from __future__ import annotations

import argparse
import os
from contextlib import ExitStack
from typing import Any, Iterable

import numpy as np

import fabric
from bench.cluster_bench import NODES
from bench.latency_turns import MIN_ISR, PAD, SETTLE_S, Path, schedule
from bench.report import bar_chart, progress, run_suite, table, timed
from fabric.common import trace
from fabric.common.trace import Event
from fabric.common.waiting import wait_for
from fabric.server.local_cluster import LocalCluster, node_racks

TOPIC = "latency-trace"
SESSION_TIMEOUT_MS, HEARTBEAT_MS = 10_000, 1000  # nothing is killed here: the node defaults' pace of heartbeats
STEPS = {
    "send": "client: send() called",
    "request": "client: produce request sent",
    "produce_read": "leader: produce request read (event loop)",
    "produce_received": "leader: produce request served",
    "append_started": "leader: checked, decoded; append starts",
    "leader_append": "leader: appended",
    "fetch_answered": "leader: a follower's fetch gets the record",
    "fetch_received": "follower: the answer is back",
    "follower_append": "follower: appended",
    "next_fetch": "leader: that follower fetches past it",
    "high_watermark": "leader: high watermark past it",
    "produce_answered": "leader: produce answered",
    "ack": "client: ack received",
}


# -- the writes -----------------------------------------------------------------------------------------------
def send_paced(fab: fabric.Fabric, count: int, rate: float) -> None:
    """`count` records at `rate`/s, each sent and waited for (send().get()) before the next; progress shown."""
    with fab.producer(acks="all", linger_ms=0) as producer:
        for i, _ in schedule(count, rate):
            producer.send(TOPIC, PAD).get(SETTLE_S)
            if (i + 1) % max(count // 5, 1) == 0:
                progress(f"  {i + 1} of {count} records acknowledged")


def traced_writes(fab: fabric.Fabric, path: str, records: int, warmup: int, rate: float) -> None:
    """The writes, traced to `path` by this process (the cluster's processes trace there already)."""
    trace.start(path)
    try:
        send_paced(fab, warmup + records, rate)
    finally:
        trace.stop()


# -- the trace ----------------------------------------------------------------------------------------------
def _first(events: Iterable[Event], after: int, **want: Any) -> Event | None:
    """The first of `events` (in time order) at or after `after` (ns) whose fields are as `want` says: a value,
    or a predicate."""
    for e in events:
        if e.ns >= after and all(w(getattr(e, k)) if callable(w) else getattr(e, k) == w for k, w in want.items()):
            return e
    return None


def _by_step(events: list[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for e in sorted(events, key=lambda e: e.ns):
        out.setdefault(e.step, []).append(e)
    return out


def client_writes(events: list[Event], pid: int) -> list[dict[str, int]]:
    """The writes of the client `pid`, one per ack: its offsets, and when it was sent, requested and acked (the
    first send and request since the previous ack: sends one at a time)."""
    writes: list[dict[str, int]] = []
    pending: dict[str, int] = {}
    for e in sorted((e for e in events if e.pid == pid), key=lambda e: e.ns):
        if e.step in ("send", "request"):
            pending.setdefault(e.step, e.ns)
        elif e.step == "ack":
            if len(pending) == 2:
                writes.append({"start": e.start, "end": e.end, **pending, "ack": e.ns})
            pending = {}
    return writes


def write_steps(write: dict[str, int], steps: dict[str, list[Event]]) -> dict[str, int] | None:
    """When each step of `write` (client_writes) happened, in ns; None if a step is missing from the trace."""
    start, end, sent = write["start"], write["end"], write["send"]
    appended = _first(steps.get("leader_append", []), sent, start=start)
    if appended is None:
        return None
    at = {"send": sent, "request": write["request"]}
    for step in ("produce_read", "produce_received", "append_started"):  # the leader's last before its append
        before = [e.ns for e in steps.get(step, []) if sent <= e.ns <= appended.ns and e.pid == appended.pid]
        if not before:
            return None
        at[step] = before[-1]
    at["leader_append"] = appended.ns
    fetches = steps.get("follower_fetch", [])
    chains = []
    for follower in {e.node for e in fetches if e.pid == appended.pid}:
        got = _first(fetches, sent, node=follower, start=lambda s: s <= start, end=lambda e: e > start)
        back, copied = (_first(steps.get(step, []), sent, node=follower, start=lambda s: s <= start,
                               end=lambda e: e > start) for step in ("fetch_received", "follower_append"))
        proved = _first(fetches, sent, node=follower, start=lambda s: s >= end)
        if got and back and copied and proved:
            chains.append((proved.ns, got.ns, back.ns, copied.ns))
    hw = _first(steps.get("high_watermark", []), sent, end=lambda hw: hw >= end, pid=appended.pid)
    answered = _first(steps.get("produce_answered", []), sent, start=start, pid=appended.pid)
    if not (chains and hw and answered):
        return None
    # the follower the high watermark waited for: the one whose next fetch came last
    at["next_fetch"], at["fetch_answered"], at["fetch_received"], at["follower_append"] = max(chains)
    return at | {"high_watermark": hw.ns, "produce_answered": answered.ns, "ack": write["ack"]}


def budget(events: list[Event], pid: int, skip: int) -> dict[str, Any]:
    """The latency budget of the client `pid`'s writes after the first `skip`: per step the median and p99 (ms)
    of the time since send and since the previous step; how many writes were traced whole, and how many had a
    step before the one ahead of it (clocks are one: only a race of two threads of one process can do that)."""
    ours = [e for e in events if e.topic == TOPIC]
    steps, writes = _by_step(ours), client_writes(ours, pid)[skip:]
    traced = [t for t in (write_steps(w, steps) for w in writes) if t is not None]
    if not traced:
        raise RuntimeError(f"none of {len(writes)} writes was traced whole: is $FABRIC_TRACE_FILE reaching the nodes?")
    times = np.array([[t[s] for s in STEPS] for t in traced], dtype=np.int64)
    since = (times - times[:, :1]) / 1e6
    delta = np.diff(times, axis=1, prepend=times[:, :1]) / 1e6
    return {"writes": len(writes), "traced": len(traced), "out_of_order": int((delta < 0).any(axis=1).sum()),
            "steps": {step: {"since_send_p50_ms": float(np.percentile(since[:, i], 50)),
                             "since_send_p99_ms": float(np.percentile(since[:, i], 99)),
                             "delta_p50_ms": float(np.percentile(delta[:, i], 50)),
                             "delta_p99_ms": float(np.percentile(delta[:, i], 99))}
                      for i, step in enumerate(STEPS)}}


# -- the run ------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace, directory: str) -> tuple[dict[str, Any], None]:
    """Start the traced cluster, write, stop it (also on Ctrl-C or an error); the budget."""
    path = os.path.join(directory, "trace.jsonl")
    saved = os.environ.get(trace.ENV)
    os.environ[trace.ENV] = path  # the cluster's processes inherit it
    try:
        with ExitStack() as stack:
            with timed(f"starting a coordinator and {NODES} data nodes, tracing to {path}"):
                cluster = stack.enter_context(LocalCluster(os.path.join(directory, "cluster"), NODES,
                                                           SESSION_TIMEOUT_MS, HEARTBEAT_MS,
                                                           racks=node_racks(NODES)))
            fab = stack.enter_context(fabric.connect(cluster.url))
            Path("rf3", "", fab, "all", NODES).create_topic(TOPIC, 1)
            wait_for(lambda: len(fab.describe_topic(TOPIC).partitions[0].isr) == NODES, SETTLE_S,
                     f"every replica of {TOPIC}-0 in sync")
            with timed(f"{args.warmup} + {args.records} acks=all writes at {args.rate:g}/s, one at a time"):
                traced_writes(fab, path, args.records, args.warmup, args.rate)
    finally:
        if saved is None:
            os.environ.pop(trace.ENV, None)
        else:
            os.environ[trace.ENV] = saved
    out = budget(trace.read(path), os.getpid(), args.warmup)
    return {"records": args.records, "warmup": args.warmup, "rate_per_s": args.rate, "nodes": NODES,
            "min_insync_replicas": MIN_ISR, "cpus": os.cpu_count(), "load_average_1m": os.getloadavg()[0],
            **out}, None


def report(results: dict[str, Any], raw: None) -> None:
    """The table (Markdown) and a bar chart of each step's median share (bench/results/latency_trace.png)."""
    steps = results["steps"]
    print(table([(STEPS[s], f"{f['since_send_p50_ms']:.3f}", f"{f['since_send_p99_ms']:.3f}",
                  f"{f['delta_p50_ms']:.3f}", f"{f['delta_p99_ms']:.3f}") for s, f in steps.items()],
                ("step", "since send p50 ms", "p99", "since previous step p50 ms", "p99")))
    print(f"\n{results['traced']} of {results['writes']} writes traced whole ({results['out_of_order']} with a step "
          f"before the one ahead of it), at {results['rate_per_s']:g} records/s, RF {results['nodes']}, "
          f"min.insync.replicas={results['min_insync_replicas']}")
    chart = bar_chart("latency_trace", f"one acks=all write, RF {results['nodes']}: median ms since the previous "
                      "step", [(STEPS[s], f["delta_p50_ms"] * 1000) for s, f in steps.items()], "µs (median)")
    progress(f"plot: {chart}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind, default, text in (("--records", int, 200, "writes measured"),
                                      ("--rate", float, 100.0, "writes per second, at most"),
                                      ("--warmup", int, 20, "writes sent first and not counted")):
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default {default:g})")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    if args.records < 1 or args.rate <= 0 or args.warmup < 0:
        parser.error("--records must be at least 1, --rate positive and --warmup at least 0")
    return run_suite("latency_trace", args, run, report)


if __name__ == "__main__":
    main()
