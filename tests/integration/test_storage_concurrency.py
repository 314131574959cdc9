"""Several processes appending to one partition at once (with rolls), while this process reads.

The writers are scripts importing only the installed package."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fabric.common.waiting import wait_for

PYTHON = sys.executable

WRITER = r"""
import os, random, sys, time
import pyarrow as pa
from fabric.common.config import TopicConfig
from fabric.common.records import TIMESTAMP, storage_schema
from fabric.storage.log import Log
SCHEMA = storage_schema()

def make_batch(values):
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([time.time_ns() // 1000] * n, TIMESTAMP), pa.array([None] * n, pa.binary()),
         pa.nulls(n, SCHEMA.field("headers").type), pa.array(values, pa.binary())], schema=SCHEMA)

def open_log(directory, **config):
    return Log(directory, SCHEMA, TopicConfig({k.replace("_", "."): v for k, v in config.items()}))

directory, wid, batches, segment_bytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
log = open_log(directory, segment_bytes=segment_bytes, index_interval_bytes=256, retention_ms=-1)
open(os.path.join(directory, "..", f"ready-{wid}"), "w").close()
go = os.path.join(directory, "..", "go")
deadline = time.monotonic() + 30
while not os.path.exists(go):          # start together
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.002)
rng = random.Random(wid)
for i in range(batches):
    k = rng.randint(1, 6)
    values = [f"{wid}:{i}:{j}:".encode() + b"p" * rng.randint(0, 40) for j in range(k)]
    base = log.append(make_batch(values))
    print(base, k, i, flush=True)
"""

WRITERS, BATCHES = 3, 60


@pytest.mark.parametrize("segment_bytes", [1 << 20, 4096])
def test_concurrent_appenders(tmp_path, segment_bytes, storage):
    directory = str(tmp_path / "part")
    os.makedirs(directory)
    storage.open_log(directory, retention_ms=-1).sync_tail_locked()
    procs = [subprocess.Popen([PYTHON, "-c", WRITER, directory, f"w{w}", str(BATCHES), str(segment_bytes)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(WRITERS)]
    try:
        wait_for(lambda: all(os.path.exists(tmp_path / f"ready-w{w}") for w in range(WRITERS))
                 or any(p.poll() is not None for p in procs), timeout=30, what="writers ready")
        (tmp_path / "go").touch()
        # read while they write: what we see grows densely, record by record, and never changes
        reader = storage.open_log(directory, retention_ms=-1)
        seen: list = []
        while any(p.poll() is None for p in procs):
            fresh = storage.read_all(reader, len(seen))
            assert [o for o, _, _ in fresh] == list(range(len(seen), len(seen) + len(fresh)))
            seen += fresh
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err

    log = storage.open_log(directory, retention_ms=-1)
    records = storage.read_all(log)
    assert records[:len(seen)] == seen  # what the concurrent reader saw was final
    acked = {}
    for w, (out, _) in enumerate(outs):
        lines = out.splitlines()
        assert len(lines) == BATCHES
        last_base = -1
        for line in lines:
            base, k, i = map(int, line.split())
            assert base > last_base  # one writer's batches keep their order
            last_base = base
            for j in range(k):
                acked[base + j] = f"w{w}:{i}:{j}:"
    assert log.end_offset == len(acked) == len(records)
    offsets = [o for o, _, _ in records]
    assert offsets == list(range(len(records)))  # dense and unique
    values = [v for _, v, _ in records]
    assert len(set(values)) == len(values)  # every record exactly once
    for o, v, _ in records:
        assert v.decode().startswith(acked[o]), (o, v, acked[o])
    # no interleaved bytes: frames are whole, CRC-valid, contiguous, and files end on a frame boundary
    expected_next = 0
    for path, pos, header, ok in storage.committed_frames(directory, log.end_offset):
        assert ok, f"bad CRC at {path}:{pos}"
        assert header.base_offset == expected_next
        expected_next = header.next_offset
    assert expected_next == log.end_offset
    for path in storage.data_files(directory):
        last_pos, last, _ = storage.scan_frames(path)[-1]
        assert last_pos + last.size == os.path.getsize(path)
    if segment_bytes == 4096:
        assert len(log.segments()) > 3
    # and the partition keeps working
    assert log.append(storage.make_batch([b"after"])) == len(records)
