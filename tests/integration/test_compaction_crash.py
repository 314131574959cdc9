"""Compaction killed with SIGKILL: at each step of a swap (fabric/storage/segment_swap.py), at random moments
of a process that appends and compacts in turn, and while the background maintenance of an embedded writer
(fabric/storage/log_maintenance.py) is cleaning. A new process opening the partition finishes or abandons the
swap; every record it reads is one that was written, at its offset, and each key reads back as its latest
acknowledged value.

The child processes are scripts importing only the installed package."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from fabric.common.config import TopicConfig
from fabric.common.waiting import wait_for
from fabric.storage.log import Log
from fabric.storage.segment_swap import CLEANED_SUFFIX, MARKER
from fabric.storage.watermark import HighWatermark

PYTHON = sys.executable
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1500", "index.interval.bytes": "300",
          "segment.ms": str(2**62), "min.cleanable.dirty.ratio": "0.01"}

CHILD_BATCHES = r"""
import json, os, signal, sys, time
import pyarrow as pa
from fabric.common.config import TopicConfig
from fabric.common.records import TIMESTAMP, storage_schema
from fabric.storage.log import Log
SCHEMA = storage_schema()
CONFIG = json.loads(sys.argv[2])

def stored(pairs):
    n = len(pairs)
    return pa.RecordBatch.from_arrays(
        [pa.array([time.time_ns() // 1000] * n, TIMESTAMP), pa.array([k.encode() for k, _ in pairs], pa.binary()),
         pa.nulls(n, SCHEMA.field("headers").type), pa.array([v.encode() for _, v in pairs], pa.binary())],
        schema=SCHEMA)

def append(log, pairs):
    return log.append(stored(pairs))
"""
CHILD_PRELUDE = CHILD_BATCHES + r"""
log = Log(sys.argv[1], SCHEMA, TopicConfig(CONFIG))
"""

# argv: directory, config, step. Writes rounds of updates of 6 keys, compacts, writes more (so the next pass
# merges the small cleaned segments), records them all in written.json, then compacts again and SIGKILLs itself
# at `step` of the swap.
STEP_CHILD = CHILD_PRELUDE + r"""
written = []
for r in range(12):
    for k in range(0, 6, 2):
        pairs = [(f"k{j}", f"r{r}-k{j}-" + "x" * 40) for j in (k, k + 1)]
        base = append(log, pairs)
        written += [(base + i, key, value) for i, (key, value) in enumerate(pairs)]
    if r == 7:
        log.clean(force=True)
with open(os.path.join(sys.argv[1], "..", "written.json"), "w") as f:
    json.dump(written, f)

def crash(step):
    if step == sys.argv[3]:
        os.kill(os.getpid(), signal.SIGKILL)

log.clean(force=True, crash=crash)
sys.exit("the step was never reached")
"""

# argv: directory, config, tag. Appends a batch of two keys at a time, printing each acknowledged one as JSON,
# and runs a cleaner pass after each.
LOOP_CHILD = CHILD_PRELUDE + r"""
tag, i = sys.argv[3], 0
while True:
    pairs = [(f"k{(i * 2 + j) % 9}", f"{tag}:{i}:{j}") for j in range(2)]
    print(json.dumps({"sending": pairs}), flush=True)
    base = append(log, pairs)
    print(json.dumps({"ok": [[base + j, k, v] for j, (k, v) in enumerate(pairs)]}), flush=True)
    log.clean()
    i += 1
"""


# argv: fabric directory, config, tag, events file. An embedded writer whose background maintenance runs every
# millisecond: it appends a batch of two keys at a time to topic t, writing each acknowledged one to the events
# file as JSON; it never cleans by itself, its maintenance thread does.
MAINTAINED_CHILD = CHILD_BATCHES + r"""
from fabric.client.embedded import EmbeddedCluster
cluster = EmbeddedCluster(sys.argv[1], retention_check_interval_ms=1)
if "t" not in cluster.coordinator.list_topics():
    cluster.create_topic("t", 1, CONFIG, None)
tag, i = sys.argv[3], 0
with open(sys.argv[4], "a") as events:
    while True:
        pairs = [(f"k{(i * 2 + j) % 9}", f"{tag}:{i}:{j}") for j in range(2)]
        print(json.dumps({"sending": pairs}), file=events, flush=True)
        base = cluster.append("t", 0, stored(pairs))
        print(json.dumps({"ok": [[base + j, k, v] for j, (k, v) in enumerate(pairs)]}), file=events, flush=True)
        i += 1
"""


def _open(directory: str) -> Log:
    from fabric.common.records import storage_schema

    return Log(directory, storage_schema(), TopicConfig(CONFIG))


def _records(storage, plog: Log) -> list[tuple[int, str, str]]:
    return [(o, k.decode(), v.decode()) for o, k, v in storage.keyed_records(plog)]


def _latest(records: list[tuple[int, str, str]]) -> dict[str, tuple[int, str]]:
    return {key: (offset, value) for offset, key, value in sorted(records)}


def _leftovers(directory: str) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith(CLEANED_SUFFIX) or n == MARKER]


def _committed(directory: str) -> int:
    """The partition's high watermark as its file says (0 before there is one)."""
    if not os.path.isdir(directory):
        return 0
    return HighWatermark(os.path.join(directory, "high-watermark")).read().value or 0


def _reopened_after_kill(storage, directory: str, written: dict[int, tuple[str, str]],
                         acknowledged: list[tuple[int, str, str]], in_flight: list[tuple[str, str]]
                         ) -> tuple[Log, list[tuple[int, str, str]]]:
    """Open the partition a killed writer left (as a new process would) and check it: every record read was
    written, at its offset (the batch in flight, `in_flight`, may have landed at the end), and every key's latest
    acknowledged value is there. Records of the batch in flight that landed join `written` and `acknowledged`."""
    plog = _open(directory)
    got = _records(storage, plog)
    end = acknowledged[-1][0] + 1
    for i, (k, v) in enumerate(in_flight):
        written.setdefault(end + i, (k, v))
    for offset, key, value in got:
        assert written.get(offset) == (key, value), f"offset {offset} holds {key}={value}, never written there"
    latest_read, latest_acked = _latest(got), _latest(acknowledged)
    for key, (offset, _) in latest_acked.items():
        assert latest_read[key][0] >= offset, f"key {key}: its latest acknowledged value was lost"
    storage.assert_clean(directory, plog.end_offset)
    acknowledged += [(o, *written[o]) for o, _, _ in got if o >= end]
    return plog, got


@pytest.mark.parametrize("step", ["marker", "indexes", "renamed", "deleted"])
def test_sigkill_at_each_step_of_a_swap_loses_nothing(tmp_path, step, storage) -> None:
    directory = str(tmp_path / "p")
    proc = subprocess.run([PYTHON, "-c", STEP_CHILD, directory, json.dumps(CONFIG), step], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _leftovers(directory), "the kill left no swap to finish"
    with open(tmp_path / "written.json") as f:
        written = [(o, k, v) for o, k, v in json.load(f)]
    plog = _open(directory)  # a new process's view: recovery finishes or abandons the swap first
    got = _records(storage, plog)
    report = plog.last_recovery
    assert report is not None
    finished = step in ("renamed", "deleted")
    assert any(("was finished" if finished else "was abandoned") in a for a in report.actions), report.actions
    assert not _leftovers(directory)
    assert set(got) <= set(written)  # every record read was written, at its offset
    assert _latest(got) == _latest(written)  # and every key reads back as its latest value
    assert plog.end_offset == written[-1][0] + 1
    storage.assert_clean(directory, plog.end_offset)
    # the next pass compacts what is left: only the latest of each key
    plog.clean(force=True)
    assert sorted(_records(storage, plog)) == sorted((o, k, v) for k, (o, v) in _latest(written).items())


def test_sigkill_at_random_moments_of_appends_and_passes_keeps_every_latest_value(tmp_path, storage) -> None:
    directory = str(tmp_path / "p")
    rng = random.Random()
    written: dict[int, tuple[str, str]] = {}
    acknowledged: list[tuple[int, str, str]] = []
    for round_no in range(3):
        proc = subprocess.Popen([PYTHON, "-c", LOOP_CHILD, directory, json.dumps(CONFIG), f"r{round_no}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        in_flight: list[tuple[str, str]] = []
        try:
            for _ in range(rng.randrange(20, 80)):
                line = proc.stdout.readline()
                if not line:
                    raise AssertionError(f"child died early: {proc.stderr.read()}")
                in_flight = _record_event(json.loads(line), written, acknowledged)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            proc.stdout.close()
            proc.stderr.close()
        plog, got = _reopened_after_kill(storage, directory, written, acknowledged, in_flight)
    assert len(got) < plog.end_offset - plog.start_offset, "the passes between the kills compacted nothing"


def _record_event(event: dict, written: dict[int, tuple[str, str]], acknowledged: list[tuple[int, str, str]]
                  ) -> list[tuple[str, str]]:
    """Note one line a writing child reported: records acknowledged at their offsets ("ok"), or a batch it is
    sending ("sending"); the records in flight after it."""
    if "ok" in event:
        acknowledged += [(o, k, v) for o, k, v in event["ok"]]
        written.update({o: (k, v) for o, k, v in event["ok"]})
        return []
    return [(k, v) for k, v in event["sending"]]


def test_sigkill_while_the_background_maintenance_cleans_keeps_every_latest_value(tmp_path, storage) -> None:
    """Kill an embedded writer (past 100 more records each round) the moment its maintenance thread has a cleaned
    copy or a swap marker on disk, until a kill leaves one behind (it was cleaning); every kill must leave a log
    with each key's latest value."""
    root, directory = str(tmp_path / "fabric"), str(tmp_path / "fabric" / "t" / "0")
    written: dict[int, tuple[str, str]] = {}
    acknowledged: list[tuple[int, str, str]] = []
    caught, deadline = 0, time.monotonic() + 240
    round_no = 0
    while not caught:
        assert time.monotonic() < deadline, f"no kill in {round_no} rounds came while the maintenance was cleaning"
        events = tmp_path / f"events-{round_no}.jsonl"
        proc = subprocess.Popen([PYTHON, "-c", MAINTAINED_CHILD, root, json.dumps(CONFIG), f"r{round_no}",
                                 str(events)], stderr=subprocess.PIPE, text=True)
        try:
            past = 100 * (round_no + 1)
            wait_for(lambda proc=proc, past=past: proc.poll() is not None or (_committed(directory) >= past
                                                                              and _leftovers(directory)),
                     timeout=120, what="the maintenance thread to clean", interval=0.0005)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
        proc.stderr.close()
        caught += bool(_leftovers(directory))
        in_flight: list[tuple[str, str]] = []
        for line in events.read_text().splitlines():
            in_flight = _record_event(json.loads(line), written, acknowledged)
        plog, _ = _reopened_after_kill(storage, directory, written, acknowledged, in_flight)
        round_no += 1
    plog.clean(force=True)  # the next pass removes a copy the dead one left and compacts the rest
    assert not _leftovers(directory)
    assert sorted(_records(storage, plog)) == sorted((o, k, v) for k, (o, v) in _latest(acknowledged).items())
