"""Descriptors kept open between a partition's appends (fabric.storage.kept_files): reused while the writer's view
of the tail holds, never once another holder of the lock may have replaced the files, and bounded per process."""
from __future__ import annotations

import fcntl
import os
import shutil
import threading

import pytest

from fabric.storage import kept_files
from fabric.storage import lock as lock_module
from fabric.storage.kept_files import KeptFile, KeptFiles
from fabric.storage.lock import PartitionLock


def _open_fds() -> set[str]:
    """The paths this process has open now."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return found


def test_appends_reuse_kept_descriptors_and_read_back_whole(storage, tmp_path):
    directory = str(tmp_path / "t" / "0")
    plog = storage.open_log(directory, **storage.KEEP)
    expected = storage.fill(plog, 3)
    seg = plog.segments()[-1]
    assert seg.path in _open_fds() and plog.hw.path in _open_fds()  # kept after the trusted appends
    expected += storage.fill(plog, 20, start=3)
    assert storage.read_all(storage.open_log(directory, **storage.KEEP)) == expected


def test_a_partition_deleted_and_recreated_between_appends_is_written_anew(storage, tmp_path):
    """The lock file of the new partition holds no token of the first writer's: its kept descriptors (of the
    deleted files) are dropped, and its next append lands in the new files, after the other writer's."""
    directory = str(tmp_path / "t" / "0")
    first = storage.open_log(directory, **storage.KEEP)
    storage.fill(first, 3)
    shutil.rmtree(directory)
    second = storage.open_log(directory, **storage.KEEP)
    expected = storage.fill(second, 2)
    expected += storage.fill(first, 2, start=10)
    assert storage.read_all(storage.open_log(directory, **storage.KEEP)) == expected
    assert not [path for path in _open_fds() if path.startswith(directory) and path.endswith(" (deleted)")]


def test_two_writers_take_turns_without_losing_a_frame(storage, tmp_path):
    directory = str(tmp_path / "t" / "0")
    writers = [storage.open_log(directory, **storage.KEEP) for _ in range(2)]
    expected = []
    for turn in range(6):
        expected += storage.fill(writers[turn % 2], 2, start=10 * turn)
    assert storage.read_all(storage.open_log(directory, **storage.KEEP)) == expected


def test_the_bound_closes_the_oldest_whose_lock_is_free(tmp_path, monkeypatch):
    kept = KeptFiles(capacity=2)
    monkeypatch.setattr(kept_files, "KEPT", kept)
    locks = [PartitionLock(str(tmp_path / f"lock-{i}")) for i in range(3)]
    files = [KeptFile(str(tmp_path / f"file-{i}"), os.O_WRONLY | os.O_CREAT) for i in range(3)]
    busy, release = threading.Event(), threading.Event()

    def hold_first() -> None:
        with locks[0]:
            files[0].fd(locks[0])
            busy.set()
            release.wait(30)

    holder = threading.Thread(target=hold_first)
    holder.start()
    try:
        assert busy.wait(30)
        with locks[1]:
            files[1].fd(locks[1])
        with locks[2]:
            files[2].fd(locks[2])  # over the bound: the oldest, file 0, is in use by the other thread
        assert files[0].path in _open_fds() and len(kept) == 3
    finally:
        release.set()
        holder.join(30)
    with locks[2]:
        fd = files[2].fd(locks[2])
    with locks[2]:
        assert files[2].fd(locks[2]) == fd  # reused: nobody else took the lock since
    extra = KeptFile(str(tmp_path / "file-3"), os.O_WRONLY | os.O_CREAT)
    with locks[1]:
        extra.fd(locks[1])  # over the bound again: the two oldest, free now, are closed
    assert {files[0].path, files[1].path}.isdisjoint(_open_fds()) and len(kept) == 2
    for kept_file in (*files, extra):
        kept_file.close()
    assert len(kept) == 0 and not {f.path for f in files}.intersection(_open_fds())


def test_a_lock_file_deleted_between_holds_is_locked_at_its_path_again(tmp_path):
    path = str(tmp_path / ".lock")
    lock = PartitionLock(path)
    with lock:
        epoch = lock.epoch
    with lock:  # the kept file: the same epoch
        assert lock.epoch == epoch
    os.unlink(path)
    with lock:
        assert lock.epoch == epoch + 1  # a new file holds no token of ours
        fd = os.open(path, os.O_RDONLY)  # the file now at the path is the one locked
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


def test_lock_files_kept_between_holds_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(lock_module, "MAX_KEPT_LOCKS", len(lock_module._KEPT_LOCKS._locks) + 1)
    locks = [PartitionLock(str(tmp_path / f"lock-{i}")) for i in range(2)]
    for _ in range(2):
        for lock in locks:
            with lock:
                pass
    assert locks[0].path in _open_fds() and locks[1].path not in _open_fds()  # the second over the bound
    assert locks[1].epoch == 1  # (opened again by path each time, its token still its own)
    locks[0].forget_kept()
    assert locks[0].path not in _open_fds()
