"""A writer trusts what it remembers of a partition's tail only while the partition lock says nothing else took it
since the writer checked it (PartitionLock.epoch): whatever another process (or another Log object, or a writer
that died holding the lock) did to the partition in between, the writer's next append sees it and lands where it
must.

The other process is a peer script fed commands on its stdin, one per line, answering each with a line."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from fabric.storage.lock import PartitionLock

# After `storage.CHILD_PRELUDE` (make_batch, open_log).
PEER = r"""
import os, signal, sys
directory = sys.argv[1]
log = None
print("ready", flush=True)
for line in sys.stdin:
    op, *args = line.split()
    if op == "open":
        log = open_log(directory, retention_ms="-1", segment_ms=str(2**62))
        out = log.end_offset
    elif op == "append":
        out = log.append(make_batch([a.encode() for a in args]))
    elif op == "roll":
        out = log.roll()
    elif op == "delete_records":
        out = log.delete_records(int(args[0]))
    elif op == "die_mid_append":  # a frame half written under the lock, then SIGKILL
        with log.lock:
            active = log.sync_tail()
            with open(active.path, "ab") as f:
                f.write(b"FBAT" + bytes(40))
                f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    print(out, flush=True)
"""


class Peer:
    """Another process with a Log over the same partition directory; `prelude` is the storage kit's CHILD_PRELUDE."""

    def __init__(self, directory: str, prelude: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", prelude + PEER, directory], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.ask_line() == "ready"

    def ask_line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line, f"the peer exited ({self.process.wait()})"
        return line

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.ask_line()

    def die_mid_append(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("die_mid_append\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=60) == -signal.SIGKILL

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def peer(tmp_path, storage):
    directory = tmp_path / "t" / "0"
    directory.mkdir(parents=True)
    started = Peer(str(directory), storage.CHILD_PRELUDE)
    yield started
    started.close()


def values(log, storage) -> list[bytes]:
    return [v for _, v, _ in storage.read_all(log)]


def test_appends_of_another_process_between_two_of_ours_are_kept(tmp_path, storage, peer) -> None:
    log = storage.open_log(str(tmp_path / "t" / "0"), **storage.KEEP)
    assert log.append(storage.make_batch([b"a"])) == 0
    assert log.append(storage.make_batch([b"b"])) == 1  # a trusted append
    assert peer.ask("open") == "2"
    assert peer.ask("append c d") == "2"
    assert log.append(storage.make_batch([b"e"])) == 4
    assert peer.ask("append f") == "5"
    assert log.append(storage.make_batch([b"g"])) == 6
    assert values(log, storage) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g"]
    storage.assert_clean(log.directory, 7)


def test_a_roll_and_deleted_records_of_another_process_move_our_next_append(tmp_path, storage, peer) -> None:
    log = storage.open_log(str(tmp_path / "t" / "0"), **storage.KEEP)
    storage.fill(log, 3)
    peer.ask("open")
    assert peer.ask("roll") == "True"
    assert log.append(storage.make_batch([b"after roll"])) == 6
    assert [os.path.basename(p) for p in storage.data_files(log.directory)][-1].startswith("00000000000000000006")
    assert peer.ask("roll") == "True"
    assert peer.ask("delete_records 7") == "7"
    assert log.append(storage.make_batch([b"after delete"])) == 7
    assert log.start_offset == 7 and values(log, storage) == [b"after delete"]
    storage.assert_clean(log.directory, 8)


def test_a_writer_killed_mid_append_is_recovered_by_our_next_append(tmp_path, storage, peer) -> None:
    log = storage.open_log(str(tmp_path / "t" / "0"), **storage.KEEP)
    assert log.append(storage.make_batch([b"a", b"b"])) == 0
    peer.ask("open")
    peer.die_mid_append()
    assert log.append(storage.make_batch([b"c"])) == 2  # not after the torn bytes: they are cut first
    assert values(log, storage) == [b"a", b"b", b"c"]
    storage.assert_clean(log.directory, 3)
    assert log.last_recovery is not None and log.last_recovery.truncated


def test_a_partition_deleted_and_made_again_elsewhere_is_not_mistaken_for_ours(tmp_path, storage, peer) -> None:
    directory = str(tmp_path / "t" / "0")
    log = storage.open_log(directory, **storage.KEEP)
    storage.fill(log, 4)
    shutil.rmtree(directory)
    os.makedirs(directory)
    assert peer.ask("open") == "0"
    assert peer.ask("append x") == "0"
    assert log.append(storage.make_batch([b"y"])) == 1
    assert values(log, storage) == [b"x", b"y"]
    storage.assert_clean(directory, 2)


def test_another_log_object_in_this_process_disturbs_the_lock_too(tmp_path, storage) -> None:
    directory = str(tmp_path / "t" / "0")
    first, second = storage.open_log(directory, **storage.KEEP), storage.open_log(directory, **storage.KEEP)
    for i in range(3):
        assert first.append(storage.make_batch([b"1"])) == 2 * i
        assert second.append(storage.make_batch([b"2"])) == 2 * i + 1
    second.roll()
    assert first.append(storage.make_batch([b"1"])) == 6
    assert values(first, storage) == [b"1", b"2"] * 3 + [b"1"]
    storage.assert_clean(directory, 7)


def test_the_lock_moves_to_a_new_epoch_whenever_something_else_may_have_held_it(tmp_path) -> None:
    path = str(tmp_path / ".lock")
    mine, other = PartitionLock(path), PartitionLock(path)
    epochs = []
    for _ in range(2):
        with mine:
            assert mine.held
            with mine:
                epochs.append(mine.epoch)  # re-entered: the same hold
    assert not mine.held
    with other:
        pass
    with mine:
        epochs.append(mine.epoch)
    with pytest.raises(RuntimeError), mine:
        epochs.append(mine.epoch)
        raise RuntimeError("a hold that failed part-way")
    with mine:
        epochs.append(mine.epoch)
    os.unlink(path)
    with mine:
        epochs.append(mine.epoch)  # a new file: not ours
    assert epochs == [1, 1, 2, 2, 4, 5]  # (the failed hold ends its epoch at once)


def test_a_hold_that_looks_at_nothing_after_another_writer_leaves_our_view_untrusted(tmp_path, storage) -> None:
    """Another writer appended, then our Log took the lock for something that never looks at the tail (an index
    check that finds nothing to repair): the holds after it are undisturbed, but our view of the tail is still
    from before the other writer's appends, so our next append reads the files first."""
    directory = str(tmp_path / "t" / "0")
    first, second = storage.open_log(directory, **storage.KEEP), storage.open_log(directory, **storage.KEEP)
    assert first.append(storage.make_batch([b"a"])) == 0
    assert second.append(storage.make_batch([b"b", b"c"])) == 1
    assert not first.indexes.repair(first.segments()[-1], "checked", lambda: False)
    assert first.append(storage.make_batch([b"d"])) == 3
    assert values(first, storage) == [b"a", b"b", b"c", b"d"]
    storage.assert_clean(directory, 4)
