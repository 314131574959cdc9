"""Publishing staged segment files by adopting them (rename, no copy): the data, the indexes, and crash
recovery when the publishing process is SIGKILLed at each step (before the rename, between the data and
index renames, before the transaction commit, before the watermarks advance)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from storage_helpers import PYTHON, child_env, make_batch, read_all, scan_frames, storage_cluster  # noqa: E402

from fabric.storage import frame  # noqa: E402
from fabric.storage.segment import DATA_SUFFIX  # noqa: E402

ADOPT = 20_000  # staged files of at least this many bytes are adopted in these tests; smaller ones copied
KEEP = dict(retention_ms=-1, segment_ms=2**62)


def _values(tag: str, count: int) -> list[bytes]:
    return [f"{tag}-{i}".encode().ljust(100, b".") for i in range(count)]


def _stage(cluster, name: str, frames: list[list[bytes]]) -> tuple[str, list[bytes]]:
    """A staged segment file as the Spark sink writes it: the schema frame, then frames based from 0."""
    directory = os.path.join(cluster.root, "__fabric", "staging", "test")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    records = 0
    with open(path, "wb") as f:
        encoder = cluster.frame_encoder("events")
        f.write(encoder.schema_frame())
        for values in frames:
            header, payload = encoder.encode(make_batch(values, [1_000 + records] * len(values)), records)
            f.write(header)
            f.write(payload)
            records += len(values)
    return path, [v for values in frames for v in values]



SHAPES = {("events", 0): [[("a", 100), ("a2", 150)], [("b", 300)]], ("events", 1): [[("c", 200)], [("d", 3)]]}


def _stage_all(cluster, suffix: str = "") -> dict:
    """The staged files of one publish: two large ones for partition 0, a large and a small one for 1."""
    return {key: [_stage(cluster, f"p{key[1]}-{i}{suffix}.segment", [_values(t, n) for t, n in shape])[0]
                  for i, shape in enumerate(shapes)] for key, shapes in SHAPES.items()}


def _setup(root: str):
    """Partition 0 holds 5 records (a non-empty active segment), partition 1 none; the staged files."""
    cluster = storage_cluster(root, partitions=2, **KEEP)
    cluster.append("events", 0, make_batch(_values("old", 5), [500] * 5))
    parts = _stage_all(cluster)
    sizes = [os.path.getsize(p) for paths in parts.values() for p in paths]
    assert min(sizes[:3]) >= ADOPT > sizes[3]
    expected = {p: [v for shape in SHAPES[("events", p)] for t, n in shape for v in _values(t, n)] for p in (0, 1)}
    expected[0] = _values("old", 5) + expected[0]
    return cluster, parts, expected


def _values_of(cluster, partition: int) -> list[bytes]:
    return [v for _, v, _ in read_all(cluster.log("events", partition))]


def _assert_whole(directory: str) -> None:
    """Every segment is a schema frame then whole, CRC-valid frames whose base offsets run on from its name."""
    for name in sorted(n for n in os.listdir(directory) if n.endswith(DATA_SUFFIX)):
        frames = scan_frames(os.path.join(directory, name))
        assert frames[0][1].is_schema and all(ok for _, _, ok in frames)
        assert frames[0][1].base_offset == int(name[:-len(DATA_SUFFIX)])
        assert sum(h.size for _, h, _ in frames) == os.path.getsize(os.path.join(directory, name))


def test_adopted_files_become_segments(tmp_path):
    cluster, parts, expected = _setup(str(tmp_path))
    assert cluster.publish_files("txn-1", parts, adopt_bytes=ADOPT) is True
    assert all(not os.path.exists(p) for p in parts[("events", 0)] + parts[("events", 1)][:1])  # renamed
    assert os.path.exists(parts[("events", 1)][1])  # the small one was copied
    for p in (0, 1):
        assert _values_of(cluster, p) == expected[p]
    log0, log1 = cluster.log("events", 0), cluster.log("events", 1)
    assert [s.base_offset for s in log0.segments()] == [0, 5, 255]
    assert [s.base_offset for s in log1.segments()] == [0]  # the empty active segment was replaced
    for seg in log0.segments() + log1.segments():
        seg._indexes_checked = False
        assert seg.check_indexes() is False  # the indexes written at adoption are already right
    assert log0.offset_for_time(1_000 + 100) == 5 + 100  # the time index of an adopted segment works
    assert cluster.publish_files("txn-1", parts, adopt_bytes=ADOPT) is False
    assert cluster.append("events", 1, make_batch([b"after"], [9])) == 203
    reopened = storage_cluster(str(tmp_path))
    assert _values_of(reopened, 0) == expected[0]
    assert _values_of(reopened, 1) == expected[1] + [b"after"]
    _assert_whole(log0.directory)
    _assert_whole(log1.directory)


def test_a_staged_file_of_another_schema_is_copied(tmp_path):
    cluster, parts, expected = _setup(str(tmp_path))
    path = parts[("events", 0)][0]
    with open(path, "rb") as f:
        data = f.read()
    sealed, payload = frame.schema_frame(make_batch([b"x"]).schema.append(pa.field("extra", pa.int32())))
    with open(path, "wb") as f:  # the same frames after the schema frame of another schema
        f.write(sealed.pack() + payload.to_pybytes() + data[frame.unpack_header(data).size:])
    assert cluster.publish_files("txn-1", parts, adopt_bytes=ADOPT) is True
    assert os.path.exists(path)  # copied, not adopted
    assert _values_of(cluster, 0) == expected[0]


CHILD = r"""
import os, signal, sys
sys.path.insert(0, {tests!r})
from storage_helpers import storage_cluster
from fabric.storage.log import Log
root, step, parts = sys.argv[1], sys.argv[2], eval(sys.argv[3])
cluster = storage_cluster(root)
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
real_rename = os.rename
def rename(src, dst):
    if dst.endswith({{"before-rename": ".arrows", "before-index-rename": ".index"}}.get(step, "-")):
        die()
    real_rename(src, dst)
os.rename = rename
if step == "before-commit":
    cluster.coordinator.commit_transaction = lambda txn: die()
if step == "before-watermark":
    Log.finish_publish = lambda self, end: die()
cluster.publish_files("txn-1", parts, adopt_bytes={adopt})
"""


@pytest.mark.parametrize("step", ["before-rename", "before-index-rename", "before-commit", "before-watermark"])
def test_sigkill_during_an_adopting_publish(tmp_path, step):
    root = str(tmp_path)
    cluster, parts, expected = _setup(root)
    child = subprocess.run([PYTHON, "-c", CHILD.format(tests=os.path.dirname(__file__), adopt=ADOPT), root, step,
                            repr(parts)], env=child_env(), capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    p0 = os.path.join(root, "events", "0")
    names = set(os.listdir(p0))
    assert "pending-publish" in names
    if step == "before-rename":  # died at the first rename, in whichever partition's thread got there
        assert not {f"{5:020d}.arrows", f"{255:020d}.arrows"} & names
    elif step == "before-index-rename":  # a data file was renamed in but its offset index was not
        dirs = [p0, os.path.join(root, "events", "1")]
        assert any(n.endswith(".arrows") and n[:-7] + ".index" not in os.listdir(d)
                   for d in dirs for n in os.listdir(d))
    else:
        assert {f"{5:020d}.arrows", f"{255:020d}.arrows", f"{255:020d}.index"} <= names
    reopened = storage_cluster(root)
    for p in (0, 1):
        reopened.log("events", p).sync_tail_locked()  # what the next writer or topic open does
    committed = step == "before-watermark"
    assert reopened.coordinator.transaction_committed("txn-1") is committed
    if committed:  # rolled forward: every record once
        for p in (0, 1):
            assert _values_of(reopened, p) == expected[p]
        assert reopened.publish_files("txn-1", parts, adopt_bytes=ADOPT) is False
    else:  # rolled back: only what was there before; the replayed publish then lands once
        assert _values_of(reopened, 0) == _values("old", 5)
        assert _values_of(reopened, 1) == []
        again = _stage_all(reopened, suffix="-replay")  # Spark replays the batch: the tasks stage again
        assert reopened.publish_files("txn-1", again, adopt_bytes=ADOPT) is True
        for p in (0, 1):
            assert _values_of(reopened, p) == expected[p]
    for p in (0, 1):
        log = reopened.log("events", p)
        for seg in log.segments():
            seg._indexes_checked = False
            seg.check_indexes()
        if committed:
            assert log.offset_for_time(1_000) is not None
        _assert_whole(log.directory)
        assert _values_of(storage_cluster(root), p) == expected[p]



def test_a_replay_on_other_partitions_truncates_the_dead_attempt(tmp_path):
    """Spark's replay of a batch places null-key records on sticky partitions chosen anew, so it may not write
    the partitions where a dead attempt of the same transaction left frames: committing it must not roll
    those frames forward (that would publish the batch's records twice)."""
    root = str(tmp_path)
    cluster, parts, expected = _setup(root)
    dead = {("events", 0): parts[("events", 0)]}  # the dead attempt wrote partition 0 only
    child = subprocess.run([PYTHON, "-c", CHILD.format(tests=os.path.dirname(__file__), adopt=ADOPT), root,
                            "before-commit", repr(dead)], env=child_env(), capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert "pending-publish" in os.listdir(os.path.join(root, "events", "0"))
    reopened = storage_cluster(root)
    replay = {("events", 1): _stage_all(reopened, suffix="-replay")[("events", 1)]}  # the replay: partition 1
    assert reopened.publish_files("txn-1", replay, adopt_bytes=ADOPT) is True
    reopened.log("events", 0).sync_tail_locked()  # what the next writer of partition 0 does
    assert _values_of(reopened, 0) == _values("old", 5)
    assert _values_of(reopened, 1) == expected[1]
