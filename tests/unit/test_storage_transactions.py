"""Transactions in a partition log (fabric/storage/transactions.py): transactional frames stay below no reader's
bound until a marker ends them; read_committed readers skip aborted ones and markers, read_uncommitted ones
only markers; an abort marker's bumped epoch fences the zombie; the state is rebuilt from frame headers after a
reopen, a copy to a follower and a truncation; aborted transactions below the log start are forgotten."""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidProducerEpochError
from fabric.common.types import ProducerBatch
from fabric.storage.reader import READ_UNCOMMITTED


def read(plog, end: int, isolation: str = "read_committed") -> list[bytes]:
    out, offset = [], plog.start_offset
    while offset < end:
        fetched = plog.fetch(offset, 1 << 30, end, isolation)
        assert fetched, f"no progress at offset {offset}"
        out += [v for f in fetched for v in f.batch.column("value").to_pylist()]
        offset = fetched[-1].offset + fetched[-1].batch.num_rows
    return out


def txn(pid: int, seq: int = 0, epoch: int = 0) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq)


def test_committed_readers_stop_at_the_oldest_open_transaction_and_skip_aborted_ones(tmp_path, replicas,
                                                                                      storage) -> None:
    plog = replicas.open(str(tmp_path / "p"))
    plog.append(storage.make_batch([b"plain"]))
    assert plog.append(storage.make_batch([b"a1", b"a2"]), producer=txn(10), transactional=True) == 1
    assert plog.append(storage.make_batch([b"b1"]), producer=txn(11), transactional=True) == 3
    plog.append(storage.make_batch([b"after"]))
    assert plog.last_stable_offset(plog.end_offset) == 1  # producer 10's transaction is open from offset 1
    assert read(plog, plog.last_stable_offset(plog.end_offset)) == [b"plain"]
    assert plog.write_marker(10, 0, commit=True) == 5
    assert plog.last_stable_offset(plog.end_offset) == 3  # now producer 11's is the oldest open one
    plog.write_marker(11, 1, commit=False)  # aborted, with a bumped epoch
    end = plog.end_offset
    assert plog.last_stable_offset(end) == end == 7
    assert read(plog, end) == [b"plain", b"a1", b"a2", b"after"]  # neither markers nor aborted records
    assert read(plog, end, READ_UNCOMMITTED) == [b"plain", b"a1", b"a2", b"b1", b"after"]
    # a read that ends on skipped frames still moves the reader past them
    tail = plog.fetch(5, 1 << 30, end)
    assert [(f.offset, f.batch.num_rows) for f in tail] == [(7, 0)]
    # the aborted producer is fenced: its zombie's next write is refused, nothing written
    with pytest.raises(InvalidProducerEpochError, match="epoch 0 is older than the producer's latest 1"):
        plog.append(storage.make_batch([b"zombie"]), producer=txn(11, 1), transactional=True)
    assert plog.end_offset == end


def test_the_state_is_rebuilt_from_the_frames_of_a_reopened_copied_or_truncated_log(tmp_path, replicas,
                                                                                    storage) -> None:
    leader = replicas.open(str(tmp_path / "leader"))
    leader.append(storage.make_batch([b"x"]), leader_epoch=0, producer=txn(20), transactional=True)
    leader.append(storage.make_batch([b"y"]), leader_epoch=0, producer=txn(21), transactional=True)
    leader.write_marker(20, 1, commit=False, leader_epoch=0)
    follower = replicas.open(str(tmp_path / "follower"))
    replicas.copy(leader, follower)
    reopened = replicas.open(str(tmp_path / "leader"))
    for plog in (follower, reopened):
        assert plog.last_stable_offset(plog.end_offset) == 1  # producer 21 is still open
        assert plog.transactions.open_transactions() == {21: 1}
    reopened.write_marker(21, 0, commit=True)
    assert read(reopened, reopened.end_offset) == [b"y"]
    reopened.truncate_to(3)  # the commit marker is gone: producer 21's transaction is open again
    assert reopened.last_stable_offset(reopened.end_offset) == 1
    assert read(reopened, reopened.end_offset, READ_UNCOMMITTED) == [b"x", b"y"]


def test_aborted_transactions_below_the_log_start_are_forgotten_and_the_rest_still_skipped(tmp_path,
                                                                                           storage) -> None:
    plog = storage.open_log(str(tmp_path / "p"))
    for round_, commit in enumerate((False, True, False, False, True)):  # one producer, epoch by epoch
        plog.append(storage.make_batch([b"t%d" % round_]), producer=txn(12, 0, round_), transactional=True)
        plog.write_marker(12, round_, commit=commit)
    assert plog.transactions.aborted_count() == 3
    assert read(plog, plog.end_offset) == [b"t1", b"t4"]
    plog.delete_records(5)  # past the second abort's marker (offset 5): the third's frame (6) is still there
    assert plog.transactions.aborted_count() == 1
    assert read(plog, plog.end_offset) == [b"t4"]


def test_a_transactional_append_needs_a_producer(tmp_path, replicas, storage) -> None:
    plog = replicas.open(str(tmp_path / "p"))
    with pytest.raises(ValueError, match="needs its producer"):
        plog.append(storage.make_batch([b"a"]), transactional=True)
    assert plog.end_offset == 0
