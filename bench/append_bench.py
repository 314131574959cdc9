"""The embedded append path: a one-record send().get() on file://, and end-to-end latency on file://, each beside
a bare pyarrow peer measured in the same run.

  send().get()  one record of 100 bytes sent and waited for, one after another (producer defaults): wall p50 and
                p99 in microseconds, and this process's CPU microseconds per record; the same waited for as
                kafka-python's users write it, get(timeout=10). Peer: the same record built
                from Python values into a one-row Arrow batch of the stored columns and appended to an open file
                by a pyarrow IPC stream writer. The two take turns --rounds times, --records each turn.
  tail reads    a consumer at the log's end in the same process: each one-record send().get() followed by a
                poll() of it, beside a poll() of the same record again (nothing appended since): what a read
                of a log that grew since the last read adds.
  end to end    cluster_bench's latency turn on the embedded fabric alone: a producer sends one record after
                another at --rate/s (linger_ms=0) while a consumer in this process long-polls them; from when
                each was due to be sent (latency_turns.schedule) to the poll. Peer: a thread appends one-record
                IPC messages to a file at the same rate and wakes this thread, which reads and decodes each (the
                least an in-process handoff through a file costs).
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any, Callable

import numpy as np
import pyarrow as pa

import fabric
from bench.latency_turns import PAD, SETTLE_S, STAMP, Path, latency_turn, schedule, summary
from bench.log_bench import VALUE_BYTES
from bench.report import latency_plot, progress, run_suite, table, timed
from fabric.common.records import HEADERS, TIMESTAMP, storage_schema

SEND_P50_GOAL_US, E2E_P99_GOAL_MS = 100.0, 5.0
SCHEMA = storage_schema(None)
VALUE = PAD + bytes(STAMP.size)  # the record both one-record measurements send


def one_record(value: bytes) -> pa.RecordBatch:
    """The stored columns of one record (now, no key, no headers, `value`), built from Python values."""
    return pa.record_batch([pa.array([time.time_ns() // 1000], TIMESTAMP), pa.array([None], pa.binary()),
                            pa.nulls(1, HEADERS), pa.array([value], pa.binary())], schema=SCHEMA)


def timings(count: int, once: Callable[[], object]) -> tuple[list[float], float]:
    """once() `count` times: the wall microseconds of each, and the CPU seconds of the whole."""
    out, cpu = [], time.process_time()
    for _ in range(count):
        began = time.perf_counter_ns()
        once()
        out.append((time.perf_counter_ns() - began) / 1000)
    return out, time.process_time() - cpu


def send_get(fab: fabric.Fabric, directory: str, records: int, rounds: int) -> dict[str, dict[str, float]]:
    """One-record send().get() on `fab`, the same with get(timeout=10), and the IPC peer, taking turns `rounds`
    times: p50, p99 (µs) and CPU µs per record of each."""
    topic = "append-latency"
    fab.create_topic(topic)
    walls: dict[str, list[float]] = {"fabric": [], "fabric_timeout": [], "ipc": []}
    cpu = dict.fromkeys(walls, 0.0)
    with fab.producer() as producer, pa.OSFile(os.path.join(directory, "peer.arrows"), "wb") as sink, \
            pa.ipc.new_stream(sink, SCHEMA) as writer:
        runs: dict[str, Callable[[], object]] = {
            "fabric": lambda: producer.send(topic, VALUE).get(),
            "fabric_timeout": lambda: producer.send(topic, VALUE).get(timeout=10),
            "ipc": lambda: writer.write_batch(one_record(VALUE))}
        for run in runs.values():  # warm up: the first appends load code and open files
            timings(min(records, 200), run)
        for r in range(rounds):
            for key, run in runs.items():
                with timed(f"send().get(), {key}, round {r + 1} of {rounds}: {records:,} records"):
                    wall, seconds = timings(records, run)
                walls[key] += wall
                cpu[key] += seconds
    total = records * rounds
    return {key: {"p50_us": float(np.percentile(wall, 50)), "p99_us": float(np.percentile(wall, 99)),
                  "cpu_us": cpu[key] / total * 1e6} for key, wall in walls.items()}


def tail_reads(fab: fabric.Fabric, records: int, rounds: int) -> dict[str, dict[str, float]]:
    """A consumer at the log's end in the same process: each one-record send().get() followed by a poll() of that
    record (the segment and its indexes grew since the last read), beside a poll() of the same record again with
    nothing appended since (the same read, the files as the last read saw them). p50 and p99 (µs) of each, and of
    the send().get() calls made with the reader behind them."""
    topic = "tail-reads"
    fab.create_topic(topic)
    walls: dict[str, list[float]] = {"send_get": [], "poll_grown": [], "poll_again": []}
    with fab.producer() as producer, fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])

        def once() -> None:
            began = time.perf_counter_ns()
            meta = producer.send(topic, VALUE).get()
            sent = time.perf_counter_ns()
            grown = consumer.poll(SETTLE_S)
            polled = time.perf_counter_ns()
            consumer.seek((topic, 0), meta.offset)
            again = time.perf_counter_ns()
            assert len(grown) == len(consumer.poll(SETTLE_S)) == 1, "a poll at the tail missed its record"
            walls["send_get"].append((sent - began) / 1000)
            walls["poll_grown"].append((polled - sent) / 1000)
            walls["poll_again"].append((time.perf_counter_ns() - again) / 1000)
        for _ in range(min(records, 200)):  # warm up
            once()
        for wall in walls.values():
            wall.clear()
        for r in range(rounds):
            with timed(f"reads at the tail, round {r + 1} of {rounds}: {records:,} records"):
                for _ in range(records):
                    once()
    return {key: {"p50_us": float(np.percentile(wall, 50)), "p99_us": float(np.percentile(wall, 99))}
            for key, wall in walls.items()}


def handoff_turn(directory: str, rate: float, warmup_s: float, seconds: float) -> list[float]:
    """The end-to-end peer: a thread appends a one-record IPC message to a file every 1/`rate` s and notifies;
    this thread wakes, reads the new bytes and decodes the records. Latencies (ms) after the warm-up."""
    total, warm = round(rate * (warmup_s + seconds)), round(rate * warmup_s)
    latencies = np.full(total, np.nan)
    path = os.path.join(directory, "handoff.arrows")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    written, wrote = [0], threading.Condition()

    def send_paced() -> None:
        for i, at in schedule(total, rate):
            message = one_record(STAMP.pack(at, i) + PAD).serialize()
            os.write(fd, message)
            with wrote:
                written[0] += message.size
                wrote.notify_all()

    sender = threading.Thread(target=send_paced, daemon=True)
    sender.start()
    position, got, deadline = 0, 0, time.monotonic() + warmup_s + seconds + SETTLE_S
    try:
        while got < total:
            with wrote:
                while written[0] <= position:
                    if not wrote.wait(max(deadline - time.monotonic(), 0)):
                        raise TimeoutError(f"handoff: only {got} of {total} records arrived in time")
                end = written[0]
            data = pa.py_buffer(os.pread(fd, end - position, position))
            position = end
            for message in pa.ipc.MessageReader.open_stream(data):
                batch = pa.ipc.read_record_batch(message, SCHEMA)
                received = time.perf_counter_ns()
                for value in batch.column("value").to_pylist():
                    at, i = STAMP.unpack_from(value)
                    latencies[i] = (received - at) / 1e6
                got += batch.num_rows
    finally:
        sender.join(SETTLE_S)
        os.close(fd)
    return latencies[warm:].tolist()


def end_to_end(fab: fabric.Fabric, directory: str, rate: float, warmup_s: float, seconds: float, rounds: int
               ) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """End-to-end latency on file:// and of the handoff peer, taking turns `rounds` times: their summaries (ms)
    and the raw latencies for the plot."""
    path = Path("file", "embedded (file://, in process)", fab, "all")
    topic = path.create_topic("append-end-to-end", 1)
    raw: dict[str, list[float]] = {"file": [], "handoff": []}
    for r in range(rounds):
        with timed(f"end to end, round {r + 1} of {rounds}: {rate:g} records/s for {warmup_s:g} + {seconds:g} s"):
            raw["file"] += latency_turn(path, topic, rate, warmup_s, seconds)["end_to_end"]
            raw["handoff"] += handoff_turn(directory, rate, warmup_s, seconds)
        progress(f"  p99: file {np.percentile(raw['file'], 99):.2f} ms, handoff "
                 f"{np.percentile(raw['handoff'], 99):.2f} ms")
    return {key: summary(values) for key, values in raw.items()}, raw


def run(args: argparse.Namespace, directory: str) -> tuple[dict[str, Any], dict[str, list[float]]]:
    load_before = os.getloadavg()
    with fabric.connect(os.path.join(directory, "fabric")) as fab:
        sends = send_get(fab, directory, args.records, args.rounds)
        tail = tail_reads(fab, args.records, args.rounds)
        e2e, raw = end_to_end(fab, directory, args.rate, args.warmup, args.seconds, args.rounds)
    return {
        "records": args.records * args.rounds, "value_bytes": VALUE_BYTES, "cpus": os.cpu_count(),
        "load_average_1m": [load_before[0], os.getloadavg()[0]],
        "send_get": {**sends, "p50_vs_ipc": sends["fabric"]["p50_us"] / sends["ipc"]["p50_us"],
                     "cpu_vs_ipc": sends["fabric"]["cpu_us"] / sends["ipc"]["cpu_us"],
                     "timeout_vs_get": sends["fabric_timeout"]["p50_us"] / sends["fabric"]["p50_us"],
                     "goal_p50_us": SEND_P50_GOAL_US},
        "tail_reads": {**tail, "grown_vs_again": tail["poll_grown"]["p50_us"] / tail["poll_again"]["p50_us"],
                       "send_get_vs_alone": tail["send_get"]["p50_us"] / sends["fabric"]["p50_us"]},
        "end_to_end": {"rate_per_s": args.rate, "warmup_s": args.warmup, "seconds": args.seconds,
                       "rounds": args.rounds, **e2e, "p99_vs_handoff": e2e["file"]["p99_ms"] / e2e["handoff"]["p99_ms"],
                       "goal_p99_ms": E2E_P99_GOAL_MS},
    }, raw


def report(results: dict[str, Any], raw: dict[str, list[float]]) -> None:
    sends, e2e = results["send_get"], results["end_to_end"]
    print(table([(label, f"{sends[key]['p50_us']:.0f}", f"{sends[key]['p99_us']:.0f}", f"{sends[key]['cpu_us']:.0f}")
                 for key, label in (("fabric", "file:// send().get(), one record"),
                                    ("fabric_timeout", "file:// send().get(timeout=10), one record"),
                                    ("ipc", "pyarrow IPC stream append of one record (peer)"))],
                ("path", "p50 µs", "p99 µs", "CPU µs/record")))
    print(f"\nsend().get() over the IPC append, same run: p50 {sends['p50_vs_ipc']:.1f}x, CPU "
          f"{sends['cpu_vs_ipc']:.1f}x (goal: p50 <= {SEND_P50_GOAL_US:g} µs); get(timeout=10) over get(): p50 "
          f"{sends['timeout_vs_get']:.2f}x\n")
    tail = results["tail_reads"]
    print(table([(label, f"{tail[key]['p50_us']:.0f}", f"{tail[key]['p99_us']:.0f}")
                 for key, label in (("send_get", "send().get(), a reader at the tail behind it"),
                                    ("poll_grown", "poll() of that record (the files grew since the last read)"),
                                    ("poll_again", "poll() of it again (nothing appended since)"))],
                ("a consumer at the tail, same process", "p50 µs", "p99 µs")))
    print(f"\npoll() after an append over the same poll() again: p50 {tail['grown_vs_again']:.1f}x; send().get() with "
          f"the reader behind it over alone: p50 {tail['send_get_vs_alone']:.1f}x\n")
    print(table([(label, f"{e2e[key]['p50_ms']:.2f}", f"{e2e[key]['p99_ms']:.2f}", f"{e2e[key]['max_ms']:.2f}")
                 for key, label in (("file", "file:// producer to consumer"),
                                    ("handoff", "IPC append and wake-up through a file (peer)"))],
                ("end to end", "p50 ms", "p99 ms", "max ms")))
    print(f"\nend to end at {e2e['rate_per_s']:g} records/s: p99 {e2e['p99_vs_handoff']:.1f}x the peer's (goal: p99 <= "
          f"{E2E_P99_GOAL_MS:g} ms)")
    plot = latency_plot("append_end_to_end", f"end-to-end latency, {e2e['rate_per_s']:g} records/s, in one process",
                        {"file://": raw["file"], "handoff peer": raw["handoff"]}, "end-to-end latency")
    progress(f"plot: {plot}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    options = (("--records", int, 5_000, "send().get(): records per turn"),
               ("--rounds", int, 3, "turns of each measurement"),
               ("--rate", float, 1000.0, "end to end: records sent per second"),
               ("--seconds", float, 3.0, "end to end: seconds measured per turn"),
               ("--warmup", float, 1.0, "end to end: seconds dropped at the start of each turn"))
    for flag, kind, default, text in options:
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default {default:g})")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    if min(args.records, args.rounds) < 1 or args.rate * args.seconds < 1 or args.warmup < 0:
        parser.error("counts must be positive, --rate x --seconds at least one record, --warmup >= 0")
    return run_suite("append", args, run, report)


if __name__ == "__main__":
    main()
