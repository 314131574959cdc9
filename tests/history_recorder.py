"""Recording a Jepsen-style history of producers and consumers, one append-only JSON-lines file per process.

A history is what clients saw, not what the fabric says it did: each producer records a send before it calls
the fabric ("invoke") and its outcome after ("ok" with the acknowledged partition and offset, "fail" when it
certainly did not happen, "info" when nobody knows); consumers record what each poll returned and their seeks;
at the end the test records full reads of each partition. A process SIGKILLed mid-send leaves an invoke
without an outcome, which the checker treats as "info": present or absent, but at most once.

Why files and one per process: producers and consumers run in processes that may be killed at any moment,
so each writes its own file, line by line (a kill loses at most a half-written last line, which `load`
ignores), and the test merges them. Every op carries `time`, CLOCK_MONOTONIC in ns, which is one clock for
every process of the machine: the checker uses it to know which acknowledgements a read must contain.

This module uses the standard library only: child scripts, which import nothing from tests/, get its source
prepended (the `history` fixture's `child_prelude`). Values are text; bytes are decoded as latin-1
(lossless). Values must be unique across the whole history: the checker identifies a send by its value.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Iterable


def history_text(value: bytes | str) -> str:
    """A value as the history stores it: text, bytes decoded as latin-1 so that no byte is lost."""
    return value.decode("latin-1") if isinstance(value, bytes) else value


class Recorder:
    """Appends the ops of one process to `<directory>/<process>.jsonl` (kept in `ops` too); thread-safe.
    With `directory=None` it only keeps them in `ops` (hand-made histories)."""

    def __init__(self, directory: str | None, process: str) -> None:
        self.process = process
        self.ops: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._file = None
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
            self._file = open(os.path.join(directory, f"{process}.jsonl"), "a", buffering=1)

    @staticmethod
    def clock() -> int:
        """Now, on the clock every op of every process of this machine is stamped with."""
        return time.monotonic_ns()

    def _record(self, f: str, type_: str, time_ns: int | None = None, **fields: Any) -> None:
        stamp = self.clock() if time_ns is None else time_ns
        op = {"process": self.process, "f": f, "type": type_, "time": stamp, **fields}
        with self._lock:
            self.ops.append(op)
            if self._file is not None:
                self._file.write(json.dumps(op) + "\n")  # one write per line, flushed (line-buffered)

    # -- producers -------------------------------------------------------------------------------------------
    def invoke(self, value: bytes | str, partition: int | None = None, topic: str = "") -> None:
        """About to send `value` (to `partition`, if the producer chose one)."""
        self._record("send", "invoke", value=history_text(value), topic=topic, partition=partition)

    def ok(self, value: bytes | str, partition: int, offset: int | None, topic: str = "") -> None:
        """`value` was acknowledged at `offset` of `partition` (None: acknowledged without an offset)."""
        self._record("send", "ok", value=history_text(value), topic=topic, partition=partition, offset=offset)

    def fail(self, value: bytes | str, error: object = "") -> None:
        """The send of `value` certainly did not happen (it must never be seen)."""
        self._record("send", "fail", value=history_text(value), error=str(error))

    def info(self, value: bytes | str, error: object = "") -> None:
        """The send of `value` has an unknown outcome (a timeout, a lost reply): seen once or never."""
        self._record("send", "info", value=history_text(value), error=str(error))

    # -- consumers -------------------------------------------------------------------------------------------
    def poll(self, consumer: str, records: Iterable[tuple[int, int, bytes | str]], topic: str = "") -> None:
        """What one poll of `consumer` returned, as (partition, offset, value) in the order returned."""
        self._record("poll", "ok", consumer=consumer, topic=topic,
                     records=[[p, o, history_text(v)] for p, o, v in records])

    def seek(self, consumer: str, partition: int, offset: int | None = None, topic: str = "") -> None:
        """`consumer` moved its position in `partition` (a seek, a new assignment): offsets may go back."""
        self._record("seek", "ok", consumer=consumer, topic=topic, partition=partition, offset=offset)

    # -- final reads -----------------------------------------------------------------------------------------
    def read(self, partition: int, records: Iterable[tuple[int, bytes | str]], start: int = 0,
             end: int | None = None, topic: str = "", began: int | None = None, source: str = "") -> None:
        """A full read of `partition`: its (offset, value) records from `start` (the log start offset) to `end`
        (its end offset, if known). It must hold every write acknowledged or seen before it `began` (a
        `clock()` reading taken before reading; default now, right for reads after the writers stopped).
        `source` names what was read (a replica, say) in the checker's messages."""
        self._record("read", "ok", time_ns=began, topic=topic, partition=partition, start=start, end=end,
                     source=source, records=[[o, history_text(v)] for o, v in records])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def load(directory: str) -> list[dict[str, Any]]:
    """Every op recorded in `directory`, merged: each process's ops in their order, processes by name. A last
    line without its newline (its writer was killed while writing it) is ignored."""
    ops: list[dict[str, Any]] = []
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".jsonl")):
        with open(os.path.join(directory, name)) as lines:
            ops.extend(json.loads(line) for line in lines if line.endswith("\n"))
    return ops
