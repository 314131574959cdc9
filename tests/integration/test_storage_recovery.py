"""Crash recovery across processes: SIGKILLed writers and followers, interrupted publishes checked from a new
process.
(The in-process scenarios, torn tails, CRC failures and broken indexes: tests/unit/test_storage_recovery.py.)

The child processes are scripts importing only the installed package."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest

from fabric.storage import batch_encoding, frame
from fabric.storage.log import PENDING

KEEP = dict(retention_ms=-1, segment_ms=2**62)  # small fixed timestamps must not roll or expire
PYTHON = sys.executable


# -- (e) SIGKILL during appends ----------------------------------------------------------------------
# argv: partition directory, history directory, tag. Appends batches of 1..5 records for ever, recording each
# record's send in the history and printing a progress line. It runs after the test's `history.child_prelude`
# (Recorder) and `storage.CHILD_PRELUDE` (make_batch, open_log).
CHILD = r"""
import sys
directory, history_dir, tag = sys.argv[1:4]
history = Recorder(history_dir, tag)
log = open_log(directory, segment_bytes=3000, index_interval_bytes=500, retention_ms=-1, flush_messages=7)
i = 0
while True:
    values = [f"{tag}:{i}:{j}" for j in range(1 + i % 5)]
    for value in values:
        history.invoke(value, 0)
    base = log.append(make_batch([v.encode() for v in values]))
    for j, value in enumerate(values):
        history.ok(value, 0, base + j)
    print(i, flush=True)
    i += 1
"""


def test_sigkill_during_appends_loses_no_acknowledged_record(tmp_path, storage, history):
    """After each kill the partition, read by a new Log object, holds every acknowledged record once at its
    offset, densely, and nothing never sent; what an earlier read saw never changes or disappears."""
    directory = str(tmp_path / "p")
    rng = random.Random()
    reader = history.recorder("test")
    progress = 0
    for round_no in range(4):
        script = history.child_prelude + storage.CHILD_PRELUDE + CHILD
        proc = subprocess.Popen([PYTHON, "-c", script, directory, history.directory, f"r{round_no}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        target = rng.randrange(1, 120)
        try:
            for _ in range(target):
                if not proc.stdout.readline():
                    raise AssertionError(f"child died early: {proc.stderr.read()}")
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        proc.stdout.close()
        proc.stderr.close()
        progress += target

        log = storage.open_log(directory, segment_bytes=3000, index_interval_bytes=500, **KEEP)
        reader.read(0, [(o, v) for o, v, _ in storage.read_all(log)], start=log.start_offset, end=log.end_offset)
        result = history.check(dense=True).assert_valid()
        assert result.sends["ok"] >= progress  # each progress line followed an acknowledged batch
        for path, pos, _, ok in storage.committed_frames(directory, log.end_offset):
            assert ok, f"corrupt committed frame at {path}:{pos}"
    # a further append after the last kill works and lands at the end
    log = storage.open_log(directory, segment_bytes=3000, index_interval_bytes=500, **KEEP)
    end = log.end_offset
    assert log.append(storage.make_batch([b"final"])) == end
    assert storage.read_all(log, end)[0][:2] == (end, b"final")
    storage.assert_clean(directory, end + 1)


# -- (e') SIGKILL during a follower's copy -------------------------------------------------------------
# After `storage.CHILD_PRELUDE`: copies the leader's frames one at a time, printing each acknowledged end offset.
FOLLOWER_CHILD = r"""
import json, sys
leader_dir, follower_dir, config = sys.argv[1], sys.argv[2], TopicConfig(json.loads(sys.argv[3]))
leader = Log(leader_dir, SCHEMA, config, replica=True)
follower = Log(follower_dir, SCHEMA, config, replica=True)
end = leader.end_offset
while follower.end_offset < end:
    print(follower.append_frames(leader.read_frames(follower.end_offset, 1, end)), flush=True)
"""


def test_sigkill_during_a_followers_copy_keeps_every_copied_frame(tmp_path, replicas, storage):
    """A follower copying its leader's frames one at a time is SIGKILLed, several times: each restart keeps
    every frame append_frames acknowledged (and any whole one after it), its log is a prefix of the leader's,
    and once it has copied the rest it holds the leader's bytes."""
    leader, follower_dir = replicas.open(str(tmp_path / "leader")), str(tmp_path / "follower")
    for epoch in range(4):
        replicas.lead(leader, epoch, 60)
    config = json.dumps({k.replace("_", "."): str(v) for k, v in replicas.CONFIG.items()})
    rng = random.Random()
    for _ in range(4):
        proc = subprocess.Popen([PYTHON, "-c", storage.CHILD_PRELUDE + FOLLOWER_CHILD, leader.directory,
                                 follower_dir, config], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        acked, target = 0, rng.randrange(1, 60)
        try:
            for _ in range(target):
                line = proc.stdout.readline()
                if not line.endswith("\n"):
                    break  # done copying, or a half-printed line: not an acknowledgement
                acked = int(line)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            proc.stdout.close()
            assert proc.returncode in (0, -signal.SIGKILL), proc.stderr.read()
            proc.stderr.close()
        follower = replicas.open(follower_dir)
        assert follower.end_offset >= acked
        assert storage.read_all(follower) == storage.read_all(leader)[:follower.end_offset]
        assert follower.leader_epochs.entries == [e for e in leader.leader_epochs.entries
                                                  if e.start_offset < follower.end_offset]
    replicas.copy(leader, replicas.open(follower_dir))
    assert replicas.files(follower_dir) == replicas.files(leader.directory)


# -- (f) an interrupted publish ---------------------------------------------------------------------
CHECK_CHILD = r"""
import json, sys
from fabric.client.embedded import EmbeddedCluster
cluster = EmbeddedCluster(sys.argv[1])
log = cluster.log("events", 0)
log.sync_tail_locked()
out = []
offset = log.start_offset
while offset < log.end_offset:
    for fetched in log.read(offset, 1 << 20):
        out.extend(v.decode() for v in fetched.batch.column(3).to_pylist())
        offset = fetched.offset + fetched.batch.num_rows
print(json.dumps({"end": log.end_offset, "values": out}))
"""


def _interrupted_publish(cluster, txn, batches):
    """What a publisher that died before finishing leaves: the marker and its frames, watermark unmoved."""
    log = cluster.log("events", 0)
    with log.lock:
        log.sync_tail()
        base = log.end_offset
        end = base + sum(b.num_rows for b in batches)
        log.begin_publish(txn, end)
        for batch in batches:
            template, payload = batch_encoding.encode(batch)
            log.write_frame(frame.seal(template.rebased(base), payload), payload)
            base += batch.num_rows
    return end


def _check_in_new_process(root):
    """The partition's end offset and values as a new process opening the fabric sees them."""
    out = subprocess.run([PYTHON, "-c", CHECK_CHILD, root], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("committed", [False, True])
@pytest.mark.parametrize("segment_bytes", [1 << 20, 1024])
def test_interrupted_publish(tmp_path, committed, segment_bytes, storage):
    root = str(tmp_path)
    cluster = storage.cluster(root, segment_bytes=segment_bytes, retention_ms=-1)
    assert cluster.append("events", 0, storage.make_batch([b"c0", b"c1"])) == 0
    assert cluster.publish("t-ok", {("events", 0): [storage.make_batch([b"ok0"]), storage.make_batch([b"ok1"])]})
    batches = [storage.make_batch([f"p{b}-{i}".encode() for i in range(3)]) for b in range(4)]
    end = _interrupted_publish(cluster, "t-dead", batches)
    assert end == 4 + 12
    log = cluster.log("events", 0)
    assert log.end_offset == 4  # not visible yet
    assert os.path.exists(os.path.join(log.directory, PENDING))
    if committed:
        cluster.coordinator.commit_transaction("t-dead")

    state = _check_in_new_process(root)
    before = ["c0", "c1", "ok0", "ok1"]
    published = [f"p{b}-{i}" for b in range(4) for i in range(3)]
    if committed:
        assert state == {"end": 16, "values": before + published}
    else:
        assert state == {"end": 4, "values": before}
    assert not os.path.exists(os.path.join(log.directory, PENDING))
    # the publishing process's own Log object catches up and keeps appending at the right place
    assert cluster.append("events", 0, storage.make_batch([b"next"])) == state["end"]
    assert _check_in_new_process(root)["values"] == state["values"] + ["next"]
    # a retried publish of the committed transaction is a no-op; of the dead one, it lands once
    if committed:
        assert cluster.publish("t-dead", {("events", 0): batches}) is False
    else:
        assert cluster.publish("t-dead", {("events", 0): batches}) is True
        assert _check_in_new_process(root)["values"] == before + ["next"] + published
    storage.assert_clean(log.directory, cluster.log("events", 0).end_offset)


def test_publish_that_rolls_segments(tmp_path, storage):
    """A multi-batch publish into a small segment.bytes rolls mid-publish; all of it must land once."""
    root = str(tmp_path)
    segment_bytes = 1024
    cluster = storage.cluster(root, segment_bytes=segment_bytes, retention_ms=-1)
    cluster.append("events", 0, storage.make_batch([b"first"]))
    batches = [storage.make_batch([f"q{b}-{i}".encode() for i in range(4)]) for b in range(6)]
    assert cluster.publish("t-roll", {("events", 0): batches}) is True
    log = cluster.log("events", 0)
    assert len(log.segments()) > 2
    want = ["first"] + [f"q{b}-{i}" for b in range(6) for i in range(4)]
    assert log.end_offset == len(want)
    assert [v.decode() for _, v, _ in storage.read_all(log)] == want
    assert _check_in_new_process(root) == {"end": len(want), "values": want}
    assert not os.path.exists(os.path.join(log.directory, PENDING))
