"""Crash recovery: torn and garbage tails, CRC failures, broken indexes, SIGKILLed writers, interrupted
publishes. Every scenario reopens the partition with a new Log object (or a new process)."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from storage_helpers import (PYTHON, child_env, committed_frames, data_files, make_batch,  # noqa: E402
                             open_log, read_all, scan_frames, storage_cluster)

from fabric.errors import CorruptRecordError  # noqa: E402
from fabric.records import storage_schema  # noqa: E402
from fabric.storage import frame  # noqa: E402
from fabric.storage.log import PENDING, Log  # noqa: E402
from fabric.storage.segment import Segment  # noqa: E402

KEEP = dict(retention_ms=-1, segment_ms=2**62)  # small fixed timestamps must not roll or expire


def _fill(log, batches: int, start: int = 0, width: int = 3):
    expected = []
    n = log.end_offset
    for b in range(batches):
        values = [f"b{start + b}-{i}".encode() for i in range(1 + (b % width))]
        stamps = [1_000 + n + i for i in range(len(values))]
        assert log.append(make_batch(values, stamps)) == n
        expected.extend((n + i, v, s) for i, (v, s) in enumerate(zip(values, stamps)))
        n += len(values)
    return expected


def _assert_clean(directory: str, hw: int):
    """Every frame on disk is whole and CRC-valid, and the segment files end exactly at a frame boundary."""
    for path in data_files(directory):
        frames = scan_frames(path)
        assert frames and frames[0][1].is_schema
        assert all(ok for _, _, ok in frames), path
        last_pos, last, _ = frames[-1]
        assert last_pos + last.size == os.path.getsize(path), f"trailing bytes in {path}"
    offsets = [h.next_offset for _, _, h, _ in committed_frames(directory, hw)]
    assert not offsets or offsets[-1] == hw


# -- (a) torn batch / (b) garbage tail --------------------------------------------------------------
def _last_frame(path):
    with open(path, "rb") as f:
        data = f.read()
    pos, header, ok = scan_frames(path)[-1]
    assert ok
    return data, pos, header


def _torn_tails(path, hw):
    data, pos, header = _last_frame(path)
    whole = data[pos:pos + header.size]
    rebased = frame.seal(frame.unpack_header(whole).rebased(hw), whole[frame.HEADER_SIZE:]).pack() \
        + whole[frame.HEADER_SIZE:]
    rng = random.Random(hash(path) & 0xFFFF)
    return {
        "truncated copy of a frame": whole[:len(whole) // 2],
        "header only": whole[:frame.HEADER_SIZE],
        "half a header": whole[:frame.HEADER_SIZE // 2],
        "unacknowledged whole frame at the watermark": rebased,
        "torn frame at the watermark": rebased[:-7],
        "stale whole copy of an earlier frame": whole,
        "random garbage": bytes(rng.randrange(256) for _ in range(333)),
        "zeros": bytes(100),
        "magic then garbage": frame.MAGIC + bytes(rng.randrange(256) for _ in range(200)),
    }


@pytest.mark.parametrize("kind", [
    "truncated copy of a frame", "header only", "half a header", "unacknowledged whole frame at the watermark",
    "torn frame at the watermark", "stale whole copy of an earlier frame", "random garbage", "zeros",
    "magic then garbage"])
def test_torn_or_garbage_tail_is_removed(tmp_path, kind):
    directory = str(tmp_path)
    log = open_log(directory, segment_bytes=2048, **KEEP)
    expected = _fill(log, 12)
    hw = log.end_offset
    active = data_files(directory)[-1]
    committed_size = os.path.getsize(active)
    with open(active, "ab") as f:
        f.write(_torn_tails(active, hw)[kind])
    assert os.path.getsize(active) > committed_size

    reopened = open_log(directory, segment_bytes=2048, **KEEP)
    assert reopened.end_offset == hw
    assert read_all(reopened) == expected  # readers never see past the watermark
    assert read_all(reopened, hw - 1) == expected[-1:]

    new = reopened.append(make_batch([b"after-1", b"after-2"], [5, 6]))
    assert new == hw
    assert reopened.end_offset == hw + 2
    want = expected + [(hw, b"after-1", 5), (hw + 1, b"after-2", 6)]
    assert read_all(reopened) == want
    assert read_all(open_log(directory, **KEEP)) == want
    for offset in range(0, hw + 2, 3):
        assert read_all(reopened, offset) == want[offset:]
    _assert_clean(directory, hw + 2)


def test_empty_rolled_segment_left_by_a_crash(tmp_path):
    """A writer that died right after rolling leaves a segment holding only its schema frame."""
    directory = str(tmp_path)
    log = open_log(directory, **KEEP)
    expected = _fill(log, 5)
    Segment.create(directory, log.end_offset, storage_schema())
    # and a torn temp file of another roll
    with open(os.path.join(directory, f"{log.end_offset + 50:020d}.arrows.tmp"), "wb") as f:
        f.write(b"FBAT")
    reopened = open_log(directory, **KEEP)
    assert read_all(reopened) == expected
    assert reopened.append(make_batch([b"x"], [1])) == len(expected)
    assert read_all(reopened)[-1] == (len(expected), b"x", 1)
    _assert_clean(directory, reopened.end_offset)


def test_segment_past_the_watermark_is_deleted(tmp_path):
    """A roll made for frames that were never committed: the whole segment goes."""
    directory = str(tmp_path)
    log = open_log(directory, **KEEP)
    expected = _fill(log, 4)
    hw = log.end_offset
    with log.lock:
        log.begin_publish("never-committed", hw + 3)
        template, payload = log.encode(make_batch([b"p1", b"p2"]))
        log.write_frame(frame.seal(template.rebased(hw), payload), payload)
    seg = Segment.create(directory, hw + 2, storage_schema())
    template, payload = Log.encode(make_batch([b"p3"]))
    seg.append(frame.seal(template.rebased(hw + 2), payload), payload, 0)
    assert len(data_files(directory)) == 2
    reopened = open_log(directory, **KEEP)
    assert reopened.append(make_batch([b"z"], [7])) == hw
    assert len(data_files(directory)) == 1
    assert read_all(reopened) == expected + [(hw, b"z", 7)]
    assert not os.path.exists(os.path.join(directory, PENDING))
    _assert_clean(directory, hw + 1)


# -- (c) a corrupt frame below the watermark ---------------------------------------------------------
@pytest.mark.parametrize("where", ["payload", "max timestamp", "record count"])
def test_corrupt_committed_frame_is_never_served(tmp_path, where):
    directory = str(tmp_path)
    log = open_log(directory, index_interval_bytes=0, **KEEP)
    expected = _fill(log, 10, width=4)
    frames = committed_frames(directory, log.end_offset)
    path, pos, header, _ = frames[5]
    byte = {"payload": pos + frame.HEADER_SIZE + header.length // 2, "max timestamp": pos + 41,
            "record count": pos + 28}[where]
    with open(path, "r+b") as f:
        f.seek(byte)
        old = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([old ^ (0x01 if where == "record count" else 0x5A)]))
    bad = set(range(header.base_offset, header.next_offset))

    for reader in (log, open_log(directory, **KEEP)):
        # reading the frame itself
        with pytest.raises(CorruptRecordError):
            list(reader.read(header.base_offset, 1 << 20))
        # reading from before it: the good records come, then the error; nothing from the bad frame
        served = []
        with pytest.raises(CorruptRecordError):
            for base, batch, _ in reader.read(0, 1 << 20):
                served.extend(range(base, base + batch.num_rows))
        assert not bad & set(served)
        assert served == list(range(len(served)))  # whatever came before the error was good and in order
        # every good record before it can still be fetched, one batch at a time
        for offset in range(header.base_offset):
            got = list(reader.read(offset, 1))
            assert got[0][0] == offset and got[0][1].column(3)[0].as_py() == expected[offset][1]
        # reading past it still works
        after = header.next_offset if where != "record count" else frames[6][2].base_offset
        assert read_all(reader, after) == expected[after:]

    # appends continue at the right offset despite the damaged frame below the watermark
    reopened = open_log(directory, **KEEP)
    end = reopened.end_offset
    assert reopened.append(make_batch([b"new"], [1])) == end
    assert read_all(reopened, end) == [(end, b"new", 1)]


# -- (d) corrupt / missing indexes ------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["random odd size", "missing", "truncated odd", "stale entries",
                                    "stale time entry only"])
@pytest.mark.parametrize("which", ["active", "oldest", "all"])
def test_broken_index_is_rebuilt(tmp_path, damage, which):
    directory = str(tmp_path)
    log = open_log(directory, segment_bytes=1500, index_interval_bytes=0, **KEEP)
    stamps_rng = random.Random(7)
    expected = []
    for b in range(40):
        n = log.end_offset
        values = [f"i{b}-{i}".encode() for i in range(1 + b % 3)]
        stamps = [stamps_rng.randrange(0, 500) for _ in values]  # non-monotonic CreateTime
        assert log.append(make_batch(values, stamps)) == n
        expected.extend((n + i, v, s) for i, (v, s) in enumerate(zip(values, stamps)))
    segs = log.segments()
    assert len(segs) >= 4
    targets = {"active": segs[-1:], "oldest": segs[:1], "all": segs}[which]
    rng = random.Random(len(damage) * 31 + len(which))
    for seg in targets:
        for idx in (seg.index, seg.timeindex):
            size = os.path.getsize(idx.path)
            if damage == "missing":
                os.unlink(idx.path)
            elif damage == "random odd size":
                with open(idx.path, "wb") as f:
                    f.write(bytes(rng.randrange(256) for _ in range(size | 1 if size else 13)))
            elif damage == "truncated odd":
                with open(idx.path, "r+b") as f:
                    f.truncate(max(size - 3, 1) | 1)
            elif damage == "stale time entry only":  # offset index fine, time index names a lost batch
                if idx is seg.timeindex:
                    last = int(idx.entries["ts"][-1]) if len(idx) else 0
                    with open(idx.path, "ab") as f:
                        f.write(np.array([(last + 10**9, 2**31)], idx.DTYPE).tobytes())
            else:  # entries pointing past the data (a data file truncated behind the index's back)
                entry = (2**31, 2**31) if idx is seg.index else (2**40, 2**31)
                with open(idx.path, "ab") as f:
                    f.write(np.array([entry], idx.DTYPE).tobytes())

    reopened = open_log(directory, segment_bytes=1500, index_interval_bytes=0, **KEEP)
    reopened.sync_tail_locked()
    assert read_all(reopened) == expected
    for offset in range(len(expected)):
        got = list(reopened.read(offset, 1))
        assert got and got[0][0] == offset
        assert got[0][1].column(3)[0].as_py() == expected[offset][1]
    for t in range(-1, 502, 7):
        model = next((o for o, _, ts in expected if ts >= t), None)
        assert reopened.offset_for_time(t) == model, t
    for seg in reopened.segments():
        assert seg.index.is_consistent(seg.size)
    assert reopened.append(make_batch([b"tail"], [600])) == len(expected)
    assert reopened.offset_for_time(600) == len(expected)


# -- (e) SIGKILL during appends ----------------------------------------------------------------------
CHILD = r"""
import sys
sys.path.insert(0, sys.argv[3])
from storage_helpers import make_batch, open_log
directory, tag = sys.argv[1], sys.argv[2]
log = open_log(directory, segment_bytes=3000, index_interval_bytes=500, retention_ms=-1, flush_messages=7)
i = 0
while True:
    k = 1 + i % 5
    base = log.append(make_batch([f"{tag}:{i}:{j}".encode() for j in range(k)]))
    print(base, k, i, flush=True)
    i += 1
"""


def test_sigkill_during_appends_loses_no_acknowledged_record(tmp_path):
    directory = str(tmp_path / "p")
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    rng = random.Random()
    acked: dict[int, bytes] = {}
    for round_no in range(4):
        tag = f"r{round_no}"
        proc = subprocess.Popen([PYTHON, "-c", CHILD, directory, tag, tests_dir], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=child_env(), text=True)
        lines = []
        target = rng.randrange(1, 120)
        try:
            while len(lines) < target:
                line = proc.stdout.readline()
                if not line:
                    raise AssertionError(f"child died early: {proc.stderr.read()}")
                lines.append(line)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        lines += proc.stdout.read().splitlines(keepends=True)
        proc.stdout.close()
        proc.stderr.close()
        for line in lines:
            if not line.endswith("\n"):
                continue  # a half-printed line is not an acknowledgement
            base, k, i = map(int, line.split())
            for j in range(k):
                assert base + j not in acked
                acked[base + j] = f"{tag}:{i}:{j}".encode()

        log = open_log(directory, segment_bytes=3000, index_interval_bytes=500, **KEEP)
        records = read_all(log)
        offsets = [o for o, _, _ in records]
        assert offsets == list(range(log.start_offset, log.end_offset))  # dense
        got = {o: v for o, v, _ in records}
        missing = [o for o in acked if got.get(o) != acked[o]]
        assert not missing, f"round {round_no}: acknowledged offsets lost or changed: {missing[:5]}"
        for o, v in got.items():  # unacknowledged but committed records are whole and well formed
            t, i, j = v.decode().split(":")
            assert t.startswith("r") and int(i) >= 0 and int(j) >= 0
        for path, pos, header, ok in committed_frames(directory, log.end_offset):
            assert ok, f"corrupt committed frame at {path}:{pos}"
    # a further append after the last kill works and lands at the end
    log = open_log(directory, segment_bytes=3000, index_interval_bytes=500, **KEEP)
    end = log.end_offset
    assert log.append(make_batch([b"final"])) == end
    assert read_all(log, end)[0][:2] == (end, b"final")
    _assert_clean(directory, end + 1)


# -- (f) an interrupted publish ---------------------------------------------------------------------
CHECK_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[2])
from storage_helpers import storage_cluster
cluster = storage_cluster(sys.argv[1], segment_bytes=int(sys.argv[3]), retention_ms=-1)
log = cluster.log("events", 0)
log.sync_tail_locked()
out = []
offset = log.start_offset
while offset < log.end_offset:
    for base, batch, _ in log.read(offset, 1 << 20):
        out.extend(v.decode() for v in batch.column(3).to_pylist())
        offset = base + batch.num_rows
print(json.dumps({"end": log.end_offset, "values": out}))
"""


def _cluster(root, **config):
    return storage_cluster(root, **config)


def _interrupted_publish(cluster, txn, batches):
    """What a publisher that died before finishing leaves: the marker and its frames, watermark unmoved."""
    log = cluster.log("events", 0)
    with log.lock:
        log.sync_tail()
        base = log.end_offset
        end = base + sum(b.num_rows for b in batches)
        log.begin_publish(txn, end)
        for batch in batches:
            template, payload = log.encode(batch)
            log.write_frame(frame.seal(template.rebased(base), payload), payload)
            base += batch.num_rows
    return end


def _check_in_new_process(root, segment_bytes):
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([PYTHON, "-c", CHECK_CHILD, root, tests_dir, str(segment_bytes)], capture_output=True, text=True, env=child_env(),
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("committed", [False, True])
@pytest.mark.parametrize("segment_bytes", [1 << 20, 1024])
def test_interrupted_publish(tmp_path, committed, segment_bytes):
    root = str(tmp_path)
    cluster = _cluster(root, segment_bytes=segment_bytes, retention_ms=-1)
    assert cluster.append("events", 0, make_batch([b"c0", b"c1"])) == 0
    assert cluster.publish("t-ok", {("events", 0): [make_batch([b"ok0"]), make_batch([b"ok1"])]})
    batches = [make_batch([f"p{b}-{i}".encode() for i in range(3)]) for b in range(4)]
    end = _interrupted_publish(cluster, "t-dead", batches)
    assert end == 4 + 12
    log = cluster.log("events", 0)
    assert log.end_offset == 4  # not visible yet
    assert os.path.exists(os.path.join(log.directory, PENDING))
    if committed:
        cluster.coordinator.commit_transaction("t-dead")

    state = _check_in_new_process(root, segment_bytes)
    before = ["c0", "c1", "ok0", "ok1"]
    published = [f"p{b}-{i}" for b in range(4) for i in range(3)]
    if committed:
        assert state == {"end": 16, "values": before + published}
    else:
        assert state == {"end": 4, "values": before}
    assert not os.path.exists(os.path.join(log.directory, PENDING))
    # the publishing process's own Log object catches up and keeps appending at the right place
    assert cluster.append("events", 0, make_batch([b"next"])) == state["end"]
    assert _check_in_new_process(root, segment_bytes)["values"] == state["values"] + ["next"]
    # a retried publish of the committed transaction is a no-op; of the dead one, it lands once
    if committed:
        assert cluster.publish("t-dead", {("events", 0): batches}) is False
    else:
        assert cluster.publish("t-dead", {("events", 0): batches}) is True
        assert _check_in_new_process(root, segment_bytes)["values"] == before + ["next"] + published
    _assert_clean(log.directory, cluster.log("events", 0).end_offset)


def test_publish_that_rolls_segments(tmp_path):
    """A multi-batch publish into a small segment.bytes rolls mid-publish; all of it must land once."""
    root = str(tmp_path)
    segment_bytes = 1024
    cluster = _cluster(root, segment_bytes=segment_bytes, retention_ms=-1)
    cluster.append("events", 0, make_batch([b"first"]))
    batches = [make_batch([f"q{b}-{i}".encode() for i in range(4)]) for b in range(6)]
    assert cluster.publish("t-roll", {("events", 0): batches}) is True
    log = cluster.log("events", 0)
    assert len(log.segments()) > 2
    want = ["first"] + [f"q{b}-{i}" for b in range(6) for i in range(4)]
    assert log.end_offset == len(want)
    assert [v.decode() for _, v, _ in read_all(log)] == want
    assert _check_in_new_process(root, segment_bytes) == {"end": len(want), "values": want}
    assert not os.path.exists(os.path.join(log.directory, PENDING))
