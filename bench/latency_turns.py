"""A latency turn: records sent one after another on a schedule to a one-partition topic while a consumer
long-polls it, each record's produce latency (to its ack) and end-to-end latency (to its poll) counted from the
time the schedule said to send it (no coordinated omission). The consumer polls in this process or (`apart`) in a
process of its own; `perf_counter` is CLOCK_MONOTONIC, one clock for every process of the machine. Used by the
cluster, append and Spark benchmarks; `Path` is one way of producing and consuming (a fabric, its acks, how its
topics are created)."""
from __future__ import annotations

import contextlib
import multiprocessing
import queue
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator

import numpy as np

import fabric
from bench.log_bench import VALUE_BYTES

MIN_ISR = 2
STAMP = struct.Struct("<qq")  # a latency record's value starts with when it was due (perf_counter ns), its number
PAD = bytes(VALUE_BYTES - STAMP.size)
SETTLE_S = 60.0  # longest wait for the cluster to settle (a node back in the ISR, records to arrive)


@dataclass(frozen=True)
class Path:
    """One way of producing and consuming: a fabric, the producer's acks, how its topics are created."""

    key: str
    label: str
    fab: fabric.Fabric
    acks: str
    replication_factor: int | None = None
    url: str = ""  # what a process of its own connects to (a latency turn's consumer apart)

    def create_topic(self, topic: str, partitions: int) -> str:
        """Create `topic` as this path stores it; return its name."""
        config = {"min.insync.replicas": str(MIN_ISR)} if (self.replication_factor or 1) > 1 else None
        self.fab.create_topic(topic, partitions, config=config, replication_factor=self.replication_factor)
        return topic


def schedule(total: int, rate: float, stop: threading.Event | None = None) -> Iterator[tuple[int, int]]:
    """(i, when record i is due: perf_counter ns) for `total` records at `rate`/s, each yielded once it is due
    (at once when behind), until `stop` is set. Latencies count from the due time: a send that blocks holds up
    the records behind it, and measuring from their late sending would hide that (coordinated omission)."""
    stop = stop or threading.Event()
    start = time.perf_counter_ns()
    for i in range(total):
        due = start + round(i * 1e9 / rate)
        delay = (due - time.perf_counter_ns()) / 1e9
        if stop.wait(delay) if delay > 0 else stop.is_set():
            return
        yield i, due


def latency_turn(path: Path, topic: str, rate: float, warmup_s: float, seconds: float, apart: bool = False
                 ) -> dict[str, list[float]]:
    """One turn of a path: records sent at `rate`/s for warmup_s + seconds while this thread long-polls them
    (with `apart`, a consumer in a process of its own: how a consumer runs beside a producer in practice, sharing
    no interpreter lock with it); the produce and end-to-end latencies (ms) of the records after the warm-up."""
    total, warm = round(rate * (warmup_s + seconds)), round(rate * warmup_s)
    produce_ms = np.full(total, np.nan)
    if apart:
        end_to_end_ms = consumed_apart(path.url, topic, total, warmup_s + seconds,
                                       lambda: producing(path, topic, rate, produce_ms))
    else:
        end_to_end_ms = np.full(total, np.nan)
        with path.fab.consumer(auto_offset_reset="latest") as consumer:
            consumer.assign([(topic, 0)])
            consumer.position(topic, 0)  # "latest" is resolved now, before the first record is sent
            with producing(path, topic, rate, produce_ms) as failed:
                polled(consumer, end_to_end_ms, warmup_s + seconds, failed)
    if np.isnan(produce_ms).any() or np.isnan(end_to_end_ms).any():
        raise RuntimeError(f"{path.key}: {int(np.isnan(end_to_end_ms).sum())} of {total} records never arrived "
                           f"(others more than once) or {int(np.isnan(produce_ms).sum())} were not acknowledged")
    return {"produce": produce_ms[warm:].tolist(), "end_to_end": end_to_end_ms[warm:].tolist()}


@contextlib.contextmanager
def producing(path: Path, topic: str, rate: float, produce_ms: np.ndarray) -> Iterator[Callable[[], bool]]:
    """Within the block, len(produce_ms) records go to `topic` at `rate`/s (linger_ms=0) from a thread that sends
    them on schedule, and a second thread waits for each ack, its latency into produce_ms; the block gets
    failed(), True once either thread failed (whose error the block's end raises, once both are done)."""
    total = len(produce_ms)
    sent: queue.Queue = queue.Queue()
    stop, failed = threading.Event(), []

    def guarded(body: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except BaseException as exc:  # noqa: BLE001 (raised again when the block ends)
                failed.append(exc)
                stop.set()
        return threading.Thread(target=run, daemon=True)

    with path.fab.producer(acks=path.acks, linger_ms=0) as producer:
        def send_paced() -> None:
            for i, at in schedule(total, rate, stop):
                sent.put((i, at, producer.send(topic, STAMP.pack(at, i) + PAD)))

        def await_acks() -> None:  # result() sends what is buffered (linger_ms=0) and waits for its ack
            done = 0
            while done < total and not stop.is_set():
                try:
                    i, at, future = sent.get(timeout=0.1)
                except queue.Empty:
                    continue
                future.result(SETTLE_S)
                produce_ms[i] = (time.perf_counter_ns() - at) / 1e6
                done += 1

        threads = [guarded(send_paced), guarded(await_acks)]
        for thread in threads:
            thread.start()
        try:
            yield lambda: bool(failed)
        except BaseException:
            stop.set()
            raise
        finally:
            for thread in threads:
                thread.join(SETTLE_S)
    if failed:
        raise failed[0]


def polled(consumer: Any, end_to_end_ms: np.ndarray, seconds: float, failed: Callable[[], bool] = lambda: False
           ) -> None:
    """Poll until every record of a latency turn of `seconds` arrived (each one's latency into end_to_end_ms, from
    the time its value says it was due: perf_counter, CLOCK_MONOTONIC, one clock for every process of the
    machine), `failed()`, or SETTLE_S past the turn's end."""
    total, got = len(end_to_end_ms), 0
    deadline = time.monotonic() + seconds + SETTLE_S
    while got < total and not failed():
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {got} of {total} records arrived in time")
        records = consumer.poll(1.0)
        received = time.perf_counter_ns()
        for record in records:
            at, i = STAMP.unpack_from(record.value)
            end_to_end_ms[i] = (received - at) / 1e6
        got += len(records)


def consumed_apart(url: str, topic: str, total: int, seconds: float,
                   produce: Callable[[], ContextManager[Callable[[], bool]]]) -> np.ndarray:
    """The end-to-end latencies of a turn whose consumer (partition 0 of `topic`, from its end) long-polls in a
    process of its own (spawned: it shares nothing with this one), ready before produce()'s block starts."""
    context = multiprocessing.get_context("spawn")
    ready, results = context.Event(), context.Queue()
    child = context.Process(target=_consume_apart, args=(url, topic, total, seconds, ready, results), daemon=True)
    child.start()
    outcome: Any = None
    try:
        if not ready.wait(SETTLE_S):
            raise RuntimeError(f"the consumer process of {url} was not ready within {SETTLE_S:g} s")
        with produce():
            pass
        outcome = results.get(timeout=seconds + 2 * SETTLE_S)
    finally:
        child.join(SETTLE_S if outcome is not None else 0)  # (a turn cut short, or stopped, ends its consumer now)
        if child.is_alive():
            child.kill()
    if isinstance(outcome, BaseException):
        raise outcome
    return np.asarray(outcome)


def _consume_apart(url: str, topic: str, total: int, seconds: float, ready: Any, results: Any) -> None:
    """The consumer process of consumed_apart: its latencies (or its error) put on `results`."""
    try:
        end_to_end_ms = np.full(total, np.nan)
        with fabric.connect(url) as fab, fab.consumer(auto_offset_reset="latest") as consumer:
            consumer.assign([(topic, 0)])
            consumer.position(topic, 0)
            ready.set()
            polled(consumer, end_to_end_ms, seconds)
        results.put(end_to_end_ms.tolist())
    except BaseException as exc:  # noqa: BLE001 (raised in the benchmark's process)
        results.put(RuntimeError(f"the consumer process failed: {exc!r}"))


def summary(ms: list[float]) -> dict[str, float]:
    """Count, p50, p99 and max of latencies in ms."""
    data = np.asarray(ms)
    return {"records": len(data), "p50_ms": float(np.percentile(data, 50)), "p99_ms": float(np.percentile(data, 99)),
            "max_ms": float(data.max())}
