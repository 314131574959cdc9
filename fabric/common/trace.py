"""The steps of a write through the processes of a cluster, as timestamped events (`python -m bench.latency_trace`
turns them into the latency budget of docs/performance.md).

A process started with $FABRIC_TRACE_FILE set (or after `start(path)`) appends one JSON line per `event` to that
file: {"step", "topic", "partition", "start", "end", "node", "pid", "ns"}, where start..end is the offset range the
step concerns (-1 where the step knows none) and ns is time.time_ns(), one clock for every process of a machine.
Each line is one os.write on a file opened with O_APPEND, so the processes of a local cluster share one file
without mixing their lines. Unset, tracing costs one check of `ON` at each call site:

    if trace.ON:
        trace.event("leader_append", topic, partition, base, end)
"""
from __future__ import annotations

import os
import time

import msgspec

ENV = "FABRIC_TRACE_FILE"
ON = False  # whether events are written; call sites check it first, so tracing off costs one attribute read
_fd = -1
_encoder = msgspec.json.Encoder()


class Event(msgspec.Struct, frozen=True):
    """One step of one process: what it did (`step`) to which partition and offsets, on which node, when."""

    step: str
    topic: str
    partition: int
    start: int
    end: int
    node: int
    pid: int
    ns: int


def start(path: str) -> None:
    """Append events to `path` (created if missing) from now on, instead of any file written so far."""
    global ON, _fd
    stop()
    _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    ON = True


def stop() -> None:
    """Write no more events (and close the file)."""
    global ON, _fd
    ON = False
    if _fd >= 0:
        os.close(_fd)
    _fd = -1


def event(step: str, topic: object, partition: object, start: int = -1, end: int = -1, node: int = -1) -> None:
    """Record `step` now, for offsets start..end of `topic`-`partition` (-1: unknown, or not an int: a request's
    arguments are traced as they came, before they are checked) at `node` (-1: none named); nothing unless tracing
    is on."""
    fd = _fd
    if fd < 0:
        return
    line = _encoder.encode(Event(step, str(topic), partition if type(partition) is int else -1, start, end, node,
                                 os.getpid(), time.time_ns()))
    os.write(fd, line + b"\n")


def read(path: str) -> list[Event]:
    """The events of a trace file, in the order they were written."""
    with open(path, "rb") as f:
        return [msgspec.json.decode(line, type=Event) for line in f if line.strip()]


if os.environ.get(ENV):
    start(os.environ[ENV])
