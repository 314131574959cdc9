"""delete_records killed with SIGKILL once its log-start-offset checkpoint is written, and after it deleted one of
the segments below it: a new process opening the partition starts the log at the offset asked for, refuses reads
below it, reads every record from it on, and the next retention pass removes the segments left below it.

The child process is a script importing only the installed package."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from fabric.common.config import TopicConfig
from fabric.common.errors import OffsetOutOfRangeError
from fabric.common.records import storage_schema
from fabric.storage import log_start
from fabric.storage.log import Log

CONFIG = {"segment.bytes": "1500", "index.interval.bytes": "300", "retention.ms": "-1", "segment.ms": str(2**62)}

# argv: directory, config, step. Appends 40 batches of 2 records (several segments), writes what it wrote and the
# segment bases to state.json, then deletes the records below the third segment's base + 1 and SIGKILLs itself
# at `step`.
CHILD = r"""
import json, os, signal, sys, time
import pyarrow as pa
from fabric.common.config import TopicConfig
from fabric.common.records import TIMESTAMP, storage_schema
from fabric.storage.log import Log
SCHEMA = storage_schema()
log = Log(sys.argv[1], SCHEMA, TopicConfig(json.loads(sys.argv[2])))
written = []
for i in range(40):
    values = [f"r{i}-{j}".encode() for j in range(2)]
    batch = pa.RecordBatch.from_arrays(
        [pa.array([time.time_ns() // 1000] * 2, TIMESTAMP), pa.nulls(2, pa.binary()),
         pa.nulls(2, SCHEMA.field("headers").type), pa.array(values, pa.binary())], schema=SCHEMA)
    base = log.append(batch)
    written += [(base + j, v.decode()) for j, v in enumerate(values)]
bases = [s.base_offset for s in log.segments()]
target = bases[2] + 1
with open(os.path.join(sys.argv[1], "..", "state.json"), "w") as f:
    json.dump({"written": written, "bases": bases, "target": target}, f)

def crash(step):
    if step == sys.argv[3]:
        os.kill(os.getpid(), signal.SIGKILL)

log.delete_records(target, crash=crash)
sys.exit("the step was never reached")
"""


@pytest.mark.parametrize("step, left_below", [("checkpointed", 2), ("deleted", 1)])
def test_killed_delete_records_leaves_a_consistent_log(tmp_path, step, left_below):
    directory = tmp_path / "t" / "0"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(directory), json.dumps(CONFIG), step],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with open(tmp_path / "t" / "state.json") as f:
        state = json.load(f)
    target, bases = state["target"], state["bases"]
    assert log_start.read(str(directory)) == target  # the checkpoint is durable before any segment goes

    log = Log(str(directory), storage_schema(), TopicConfig(CONFIG))
    assert [s.base_offset for s in log.segments()] == bases[2 - left_below:]  # killed before these went
    assert log.start_offset == target
    with pytest.raises(OffsetOutOfRangeError):
        log.fetch(target - 1, 1 << 20)
    got, offset = [], log.start_offset
    while offset < log.end_offset:
        for fetched in log.fetch(offset, 1 << 20):
            got += [(fetched.offset + i, v.decode()) for i, v in enumerate(fetched.batch.column(3).to_pylist())]
            offset = fetched.offset + fetched.batch.num_rows
    assert got == [tuple(r) for r in state["written"] if r[0] >= target]

    assert log.enforce_retention() == left_below  # the segments left below the log start go now
    assert [s.base_offset for s in log.segments()] == bases[2:]
    assert log.start_offset == target
    assert os.path.exists(directory / log_start.CHECKPOINT)
