"""Two processes' Logs writing one embedded partition by turns (fabric/storage/catch_up.py): each keeps its
producer and transaction states across the other's appends, taking the frames appended since its last turn
instead of rebuilding them, and they stay what the frames say; a change other than appends (a cut tail, a
compacted topic's roll) makes it rebuild them."""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidProducerEpochError
from fabric.common.types import ProducerBatch
from fabric.storage.producer_state import ProducerStateTable


@pytest.fixture
def rebuilds(monkeypatch) -> list[str]:
    """The partitions whose producer table was rebuilt from the files (from the frame headers, or from the
    snapshot another Log wrote and the frames after it), one entry a rebuild."""
    done: list[str] = []
    for name in ("rebuild", "restore"):
        made = getattr(ProducerStateTable, name).__func__

        def counted(cls, partition, *args, _made=made):
            done.append(partition)
            return _made(cls, partition, *args)
        monkeypatch.setattr(ProducerStateTable, name, classmethod(counted))
    return done


def test_turns_take_the_other_writers_appends_and_rebuild_nothing(tmp_path, storage, rebuilds) -> None:
    """Idempotent producers of two processes, one transactional, over segments that roll: each Log rebuilds its
    producers once, knows the other's frames (a retry of its own last batch is still recognised), and its
    transaction state is that of the frames."""
    a, b = (storage.open_log(str(tmp_path / "p"), segment_bytes=2000) for _ in range(2))
    a.transactions, b.transactions  # noqa: B018 (loaded: kept from here on, as the appends go)
    offsets = {}
    for turn in range(12):  # (a Log's states are checked after its own writes: its turn brought them up to date)
        offsets[turn] = a.append(storage.make_batch([b"a%d" % turn]), producer=ProducerBatch(1, 0, turn))
        b.append(storage.make_batch([b"b%d" % turn]), producer=ProducerBatch(2, 0, turn))
        b.append(storage.make_batch([b"t%d" % turn]), producer=ProducerBatch(3, 0, turn), transactional=True)
        storage.assert_transactions_agree(b)
        if turn % 3 == 2:
            a.write_marker(3, 0, commit=turn % 2 == 0)  # a process ending the other's transaction
        assert a.append(storage.make_batch([b"a%d" % turn]), producer=ProducerBatch(1, 0, turn)) == offsets[turn]
        storage.assert_transactions_agree(a)
    assert len(a.segments()) > 3  # the turns rolled segments
    assert len(rebuilds) == 2  # one a Log, at its first idempotent append


def test_a_producer_fenced_in_another_process_is_refused_in_this_one(tmp_path, storage, rebuilds) -> None:
    """The zombie's process took the other's marker, with its bumped epoch, from the frames appended since."""
    zombie, successor = (storage.open_log(str(tmp_path / "p")) for _ in range(2))
    zombie.append(storage.make_batch([b"z"]), producer=ProducerBatch(7, 0, 0), transactional=True)
    successor.write_marker(7, 1, commit=False)
    with pytest.raises(InvalidProducerEpochError, match="epoch 0 is older than the producer's latest 1"):
        zombie.append(storage.make_batch([b"late"]), producer=ProducerBatch(7, 0, 1), transactional=True)
    assert zombie.transactions.open_transactions() == {}
    assert len(rebuilds) == 2


@pytest.mark.parametrize("change", ["a torn tail cut by recovery", "a compacted topic's roll"])
def test_a_change_other_than_appends_rebuilds_the_states(tmp_path, storage, rebuilds, change) -> None:
    config = {"segment_bytes": 1024, "cleanup_policy": "compact"} if "compacted" in change else {}
    a, b = (storage.open_log(str(tmp_path / "p"), **config) for _ in range(2))
    a.append(storage.make_batch([b"a"], keys=[b"a"]), producer=ProducerBatch(1, 0, 0), transactional=True)
    if "torn" in change:  # a writer died mid-append: half a frame past the watermark, and another took the lock
        with open(storage.data_files(str(tmp_path / "p"))[-1], "ab") as f:
            f.write(b"\x00" * 40)
        with b.lock:
            pass
    else:
        for i in range(8):
            b.append(storage.make_batch([b"k%d" % i], keys=[b"k%d" % i]), producer=ProducerBatch(2, 0, i))
        assert len(b.segments()) > 1
    before = len(rebuilds)
    a.append(storage.make_batch([b"a2"], keys=[b"a"]), producer=ProducerBatch(4, 0, 0), transactional=True)
    assert len(rebuilds) == before + 1
    storage.assert_transactions_agree(a)
