"""Several processes appending to one partition at once (with rolls), while this process reads.

The writers are scripts importing only the installed package (and the history recorder's source and the storage
kit's CHILD_PRELUDE, which the `history` and `storage` fixtures give them); each records its sends in the history,
and this process its reads."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fabric.common.waiting import wait_for

PYTHON = sys.executable

# After the test's `history.child_prelude` (Recorder) and `storage.CHILD_PRELUDE` (make_batch, open_log).
WRITER = r"""
import os, random, sys, time
directory, wid, batches, segment_bytes, history_dir = sys.argv[1:6]
batches, segment_bytes, history = int(batches), int(segment_bytes), Recorder(history_dir, wid)
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
    values = [f"{wid}:{i}:{j}:" + "p" * rng.randint(0, 40) for j in range(k)]
    for value in values:
        history.invoke(value, 0)
    base = log.append(make_batch([v.encode() for v in values]))
    for j, value in enumerate(values):
        history.ok(value, 0, base + j)
"""

WRITERS, BATCHES = 3, 60


@pytest.mark.parametrize("segment_bytes", [1 << 20, 4096])
def test_concurrent_appenders(tmp_path, segment_bytes, storage, history):
    directory = str(tmp_path / "part")
    os.makedirs(directory)
    storage.open_log(directory, retention_ms=-1).sync_tail_locked()
    script = history.child_prelude + storage.CHILD_PRELUDE + WRITER
    procs = [subprocess.Popen([PYTHON, "-c", script, directory, f"w{w}", str(BATCHES), str(segment_bytes),
                               history.directory],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(WRITERS)]
    test = history.recorder("test")
    try:
        wait_for(lambda: all(os.path.exists(tmp_path / f"ready-w{w}") for w in range(WRITERS))
                 or any(p.poll() is not None for p in procs), timeout=30, what="writers ready")
        (tmp_path / "go").touch()
        # read while they write (as a consumer's polls): what we see grows densely and never changes
        reader = storage.open_log(directory, retention_ms=-1)
        seen = 0
        while any(p.poll() is None for p in procs):
            fresh = storage.read_all(reader, seen)
            test.poll("reader", [(0, o, v) for o, v, _ in fresh])
            seen += len(fresh)
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
    test.read(0, [(o, v) for o, v, _ in records], log.start_offset, log.end_offset)
    # every acknowledged record once, at its offset, densely, nothing else; the concurrent reads were final
    result = history.check(dense=True).assert_valid()
    assert result.sends == {"ok": log.end_offset}
    for w in range(WRITERS):  # one writer's records keep their order, and it sent all its batches
        mine = [op for op in history.ops() if op["process"] == f"w{w}" and op["type"] == "ok"]
        assert [op["offset"] for op in mine] == sorted(op["offset"] for op in mine)
        assert int(mine[-1]["value"].split(":")[1]) == BATCHES - 1
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
