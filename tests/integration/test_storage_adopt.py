"""Crash recovery of a publish that adopts staged segment files (rename, no copy), when the publishing process
is SIGKILLed at each step: before the rename, between the data and index renames, before the transaction
commit, before the watermarks advance. (The adoption itself: tests/unit/test_storage_adopt.py.)

The publishing child is a script importing only the installed package."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

PYTHON = sys.executable

CHILD = r"""
import os, signal, sys
from fabric.client.embedded import EmbeddedCluster
from fabric.storage.log import Log
root, step, parts, adopt = sys.argv[1], sys.argv[2], eval(sys.argv[3]), int(sys.argv[4])
cluster = EmbeddedCluster(root)
die = lambda: os.kill(os.getpid(), signal.SIGKILL)
real_rename = os.rename
def rename(src, dst):
    if dst.endswith({"before-rename": ".arrows", "before-index-rename": ".index"}.get(step, "-")):
        die()
    real_rename(src, dst)
os.rename = rename
if step == "before-commit":
    cluster.coordinator.commit_transaction = lambda txn: die()
if step == "before-watermark":
    Log.finish_publish = lambda self, end: die()
cluster.publish_files("txn-1", parts, adopt_bytes=adopt)
"""


def _publish_and_die(root: str, step: str, parts: dict, adopt: int) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", CHILD, root, step, repr(parts), str(adopt)], capture_output=True,
                          timeout=60)


@pytest.mark.parametrize("step", ["before-rename", "before-index-rename", "before-commit", "before-watermark"])
def test_sigkill_during_an_adopting_publish(tmp_path, step, storage, adoption):
    root = str(tmp_path)
    cluster, parts, expected = adoption.setup(root)
    child = _publish_and_die(root, step, parts, adoption.ADOPT)
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
    reopened = storage.cluster(root)
    for p in (0, 1):
        reopened.log("events", p).sync_tail_locked()  # what the next writer or topic open does
    committed = step == "before-watermark"
    assert reopened.coordinator.transaction_committed("txn-1") is committed
    if committed:  # rolled forward: every record once
        for p in (0, 1):
            assert adoption.values_of(reopened, p) == expected[p]
        assert reopened.publish_files("txn-1", parts, adopt_bytes=adoption.ADOPT) is False
    else:  # rolled back: only what was there before; the replayed publish then lands once
        assert adoption.values_of(reopened, 0) == adoption.values("old", 5)
        assert adoption.values_of(reopened, 1) == []
        again = adoption.stage_all(reopened, suffix="-replay")  # Spark replays the batch: the tasks stage again
        assert reopened.publish_files("txn-1", again, adopt_bytes=adoption.ADOPT) is True
        for p in (0, 1):
            assert adoption.values_of(reopened, p) == expected[p]
    for p in (0, 1):
        log = reopened.log("events", p)
        for seg in log.segments():
            seg._indexes_checked = False
            seg.check_indexes()
        if committed:
            assert log.offset_for_time(1_000) is not None
        adoption.assert_whole(log.directory)
        assert adoption.values_of(storage.cluster(root), p) == expected[p]


def test_a_replay_on_other_partitions_truncates_the_dead_attempt(tmp_path, storage, adoption):
    """Spark's replay of a batch places null-key records on sticky partitions chosen anew, so it may not write
    the partitions where a dead attempt of the same transaction left frames: committing it must not roll
    those frames forward (that would publish the batch's records twice)."""
    root = str(tmp_path)
    cluster, parts, expected = adoption.setup(root)
    dead = {("events", 0): parts[("events", 0)]}  # the dead attempt wrote partition 0 only
    child = _publish_and_die(root, "before-commit", dead, adoption.ADOPT)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert "pending-publish" in os.listdir(os.path.join(root, "events", "0"))
    reopened = storage.cluster(root)
    replay = {("events", 1): adoption.stage_all(reopened, suffix="-replay")[("events", 1)]}  # the replay: partition 1
    assert reopened.publish_files("txn-1", replay, adopt_bytes=adoption.ADOPT) is True
    reopened.log("events", 0).sync_tail_locked()  # what the next writer of partition 0 does
    assert adoption.values_of(reopened, 0) == adoption.values("old", 5)
    assert adoption.values_of(reopened, 1) == expected[1]
