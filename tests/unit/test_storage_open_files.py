"""Files kept open between appends (fabric.storage.open_files) and lock files kept open between holds
(PartitionLock keep_file): kept only while nothing else touched the partition, opened again by path otherwise, and
bounded per process."""
from __future__ import annotations

import fcntl
import os
import shutil

import pytest

from fabric.common.config import TopicConfig
from fabric.storage import lock as lock_module
from fabric.storage import open_files
from fabric.storage.lock import PartitionBusy, PartitionLock, without_waiting
from fabric.storage.log import Log


def open_fds() -> set[str]:
    """The paths this process has open (its descriptors' targets)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return out


def under(directory: str) -> set[str]:
    return {path for path in open_fds() if path.startswith(directory)}


def test_an_embedded_logs_appends_keep_its_tail_files_open_and_read_back(tmp_path, storage):
    log = storage.open_log(str(tmp_path / "t" / "0"), **storage.KEEP)
    for i in range(3):
        log.append(storage.make_batch([b"v%d" % i]))
    kept = under(str(tmp_path))
    assert {os.path.basename(p) for p in kept} == {".lock", "high-watermark", "00000000000000000000.arrows",
                                                   "00000000000000000000.index", "00000000000000000000.timeindex"}
    for i in range(3, 50):
        log.append(storage.make_batch([b"v%d" % i]))
    assert under(str(tmp_path)) == kept
    fresh = storage.open_log(log.directory, **storage.KEEP)
    assert [v for _, v, _ in storage.read_all(fresh)] == [b"v%d" % i for i in range(50)]
    assert all(seg.indexes_consistent() for seg in fresh.segments())


def _opened(monkeypatch, directory: str) -> list[str]:
    """The files under `directory` that open_files opens from here on, by name."""
    opened: list[str] = []
    real = os.open

    def counted(path, flags, mode=0o777, *, dir_fd=None):
        if str(path).startswith(directory):
            opened.append(os.path.basename(path))
        return real(path, flags, mode, dir_fd=dir_fd)
    monkeypatch.setattr(open_files.os, "open", counted)
    return opened


def test_appends_in_a_hold_that_only_appends_keep_the_tail_files_open(tmp_path, storage, monkeypatch):
    """An append within a larger hold opens its files each time (what else the hold does is not known); within
    a hold its holder said only appends (Log.appending, as the offsets topic's commits take), it keeps them as
    a bare append does, and what it wrote reads back."""
    log = storage.open_log(str(tmp_path / "t" / "0"), **storage.KEEP)
    log.append(storage.make_batch([b"first"]))
    opened = _opened(monkeypatch, str(tmp_path))
    for i in range(3):
        with log.lock:
            log.append(storage.make_batch([b"held%d" % i]))
    assert opened.count("00000000000000000000.arrows") == 3
    opened.clear()
    for i in range(5):
        with log.appending():
            log.append(storage.make_batch([b"appending%d" % i]))
    assert opened.count("00000000000000000000.arrows") == 1 and opened.count("high-watermark") == 1
    with log.lock:  # a hold that may do anything: what it writes goes through the paths again
        log.append(storage.make_batch([b"last"]))
    assert opened.count("00000000000000000000.arrows") == 2
    fresh = storage.open_log(log.directory, **storage.KEEP)
    assert [v for _, v, _ in storage.read_all(fresh)] == (
        [b"first"] + [b"held%d" % i for i in range(3)] + [b"appending%d" % i for i in range(5)] + [b"last"])
    assert all(seg.indexes_consistent() for seg in fresh.segments())


def test_a_replica_log_keeps_nothing_open(tmp_path, storage):
    log = Log(str(tmp_path / "t" / "0"), storage.SCHEMA, TopicConfig({"retention.ms": -1}), replica=True)
    for i in range(5):
        log.append(storage.make_batch([b"v%d" % i]))
    assert under(str(tmp_path)) == set()


def test_a_file_replaced_under_the_lock_between_two_appends_is_written_through_its_path(tmp_path, storage):
    """An index rebuilt (replaced by a new file) in a hold of its own between two appends: the next append's entry
    lands in the new file, not in the one the descriptor kept from the previous append still names."""
    log = storage.open_log(str(tmp_path / "t" / "0"), **storage.KEEP)
    log.append(storage.make_batch([b"a"], [1_000]))
    seg = log.segments()[-1]
    with log.lock:
        seg.rebuild_indexes(log.config["index.interval.bytes"])
    log.append(storage.make_batch([b"b"], [2_000]))
    assert [entry[0] for entry in seg.timeindex.entries] == [1_000, 2_000]
    assert seg.indexes_consistent()


def test_two_writers_taking_turns_lose_nothing(tmp_path, storage):
    """Two Log objects over one partition (as two processes are): each notices the other's appends (a new lock
    epoch) and writes through the files as they are now."""
    directory = str(tmp_path / "t" / "0")
    first, second = storage.open_log(directory, **storage.KEEP), storage.open_log(directory, **storage.KEEP)
    offsets = [(first if i % 3 else second).append(storage.make_batch([b"v%d" % i])) for i in range(30)]
    assert offsets == list(range(30))
    fresh = storage.open_log(directory, **storage.KEEP)
    assert [v for _, v, _ in storage.read_all(fresh)] == [b"v%d" % i for i in range(30)]
    assert all(seg.indexes_consistent() for seg in fresh.segments())
    fresh.sync_tail_locked()
    assert fresh.last_recovery is not None and not fresh.last_recovery.changed, fresh.last_recovery.describe()


def test_open_files_are_bounded_per_process(tmp_path, storage, monkeypatch):
    monkeypatch.setattr(open_files, "CAPACITY", 3)
    monkeypatch.setattr(lock_module, "KEPT_FILES", 5)
    before = len(open_fds())
    logs = [storage.open_log(str(tmp_path / "t" / str(p)), **storage.KEEP) for p in range(12)]
    for _ in range(2):
        for log in logs:
            log.append(storage.make_batch([b"x"]))
    kept = under(str(tmp_path))
    assert len([p for p in kept if p.endswith(".lock")]) <= 5
    assert len([p for p in kept if not p.endswith(".lock")]) <= 3 * 4
    assert len(open_fds()) - before <= 5 + 3 * 4
    assert [log.end_offset for log in logs] == [2] * 12


def test_a_kept_lock_file_is_read_only_and_the_token_is_written_only_when_another_took_the_lock(tmp_path):
    path = str(tmp_path / ".lock")
    mine, other = PartitionLock(path, keep_file=True), PartitionLock(path)
    with mine:
        pass
    assert mine._fd is not None and fcntl.fcntl(mine._fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    token, epoch = open(path, "rb").read(), mine.epoch
    with mine:
        pass
    assert (open(path, "rb").read(), mine.epoch) == (token, epoch)  # no one else held it: nothing written
    with other:
        pass
    assert open(path, "rb").read() != token
    with mine:
        pass
    assert mine.epoch == epoch + 1 and open(path, "rb").read() != token


def test_a_lock_file_removed_and_made_again_is_the_one_locked(tmp_path):
    """A partition deleted and created again while a lock kept its old file open: the next hold locks the file
    that is there now, so it still excludes the new file's holders."""
    directory = tmp_path / "p"
    directory.mkdir()
    path = str(directory / ".lock")
    mine = PartitionLock(path, keep_file=True)
    with mine:
        pass
    shutil.rmtree(directory)
    directory.mkdir()
    with mine:
        with pytest.raises(PartitionBusy), without_waiting(), PartitionLock(path):
            pass


def test_a_forked_child_locks_through_a_descriptor_of_its_own(tmp_path):
    """A descriptor shared with a forked child would share its flock: parent and child would both hold the lock."""
    path = str(tmp_path / ".lock")
    lock = PartitionLock(path, keep_file=True)
    with lock:
        pass
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: hold the lock until the parent has tried it
        try:
            with lock:
                os.write(ready_w, b"1")
                os.read(done_r, 1)
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"1"
        with pytest.raises(PartitionBusy), without_waiting(), lock:
            pass
    finally:
        os.write(done_w, b"1")
        assert os.waitpid(pid, 0)[1] == 0
    with lock:  # the child let go: the parent takes it again
        pass
