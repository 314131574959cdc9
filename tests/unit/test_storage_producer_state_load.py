"""Loading a partition's producer state without its lock (fabric/storage/producer_state_load.py): a follower that
loaded it keeps it through every frame it copies, so as leader it knows producers whose frames left its last
segments; frames written during the scan are taken under the lock after it; a truncation during the scan installs
nothing (the next idempotent append rebuilds the state, as before), and waits until the scan has left the files
(a mapped page cut under it would kill the process: SIGBUS); and a load beside a follower's copies ends with the
state they left."""
from __future__ import annotations

import threading

import pytest

from fabric.common.errors import UnknownProducerIdError
from fabric.common.types import ProducerBatch
from fabric.storage.cut_barrier import CutBarrier
from fabric.storage.producer_state_load import Scan

SMALL = dict(segment_bytes=1024)  # a frame of 600 bytes fills a segment of its own


def test_a_follower_keeps_the_state_it_loaded_through_the_frames_it_copies(tmp_path, replicas, storage) -> None:
    leader = replicas.open(str(tmp_path / "leader"), **SMALL)
    follower = replicas.open(str(tmp_path / "follower"), **SMALL)
    assert follower.load_producer_state() and follower.producer_state_loaded  # (empty: at its role's start)
    leader.append(storage.make_batch([b"a" * 600]), leader_epoch=0, producer=ProducerBatch(5, 0, 0))
    for i in range(4):  # producer 5's frame leaves the last two segments
        leader.append(storage.make_batch([b"%d" % i * 600]), leader_epoch=0)
    replicas.copy(leader, follower, max_bytes=1 << 20)
    assert len(follower.segments()) >= 4
    # elected leader, the follower knows producer 5 from the frame it copied; a rebuild from the last segments,
    # as a replica that never loaded the state makes, does not
    assert follower.append(storage.make_batch([b"b"]), leader_epoch=1, producer=ProducerBatch(5, 0, 1)) == 5
    rebuilt = replicas.open(str(tmp_path / "leader"), **SMALL)
    with pytest.raises(UnknownProducerIdError):
        rebuilt.append(storage.make_batch([b"b"]), leader_epoch=1, producer=ProducerBatch(5, 0, 1))


def lead(plog, storage, batches: range) -> dict[int, tuple[int, int]]:
    """Batch i of `batches` from producer i % 3 at sequence i // 3, as leader at epoch 0; each producer's last
    (sequence, offset)."""
    return {i % 3: (i // 3, plog.append(storage.make_batch([b"v%d" % i]), leader_epoch=0,
                                        producer=ProducerBatch(i % 3, 0, i // 3))) for i in batches}


def answers_as_leader(plog, storage, last: dict[int, tuple[int, int]]) -> None:
    """As leader at epoch 1, each producer's retry of its last batch answers that batch's offset and its next
    sequence is written."""
    for producer, (sequence, offset) in sorted(last.items()):
        retry = ProducerBatch(producer, 0, sequence)
        assert plog.append(storage.make_batch([b"again"]), leader_epoch=1, producer=retry) == offset
        end = plog.end_offset
        assert plog.append(storage.make_batch([b"next"]), leader_epoch=1,
                           producer=ProducerBatch(producer, 0, sequence + 1)) == end


def test_frames_copied_during_the_scan_are_taken_after_it(tmp_path, replicas, storage) -> None:
    leader = replicas.open(str(tmp_path / "leader"))
    follower = replicas.open(str(tmp_path / "follower"))
    lead(leader, storage, range(9))
    replicas.copy(leader, follower)
    scan = Scan(follower)
    last = lead(leader, storage, range(9, 30))
    replicas.copy(leader, follower)  # (rolling segments while the scan reads the earlier ones)
    assert not follower.producer_state_loaded
    assert scan.read().install() and follower.producer_state_loaded
    answers_as_leader(follower, storage, last)


def test_a_truncation_during_the_scan_installs_nothing(tmp_path, replicas, storage) -> None:
    plog = replicas.open(str(tmp_path / "p"))
    plog.append(storage.make_batch([b"a"]), leader_epoch=0, producer=ProducerBatch(2, 0, 0))
    plog.append(storage.make_batch([b"b"]), leader_epoch=0, producer=ProducerBatch(2, 0, 1))
    plog = replicas.open(str(tmp_path / "p"))  # (reopened: its state not loaded)
    scan = Scan(plog)
    assert plog.truncate_to(1)  # the batch from sequence 1 is gone
    assert not scan.read().install() and not plog.producer_state_loaded
    # the next idempotent append builds the state from the files: the truncated batch is new again
    assert plog.append(storage.make_batch([b"b"]), leader_epoch=1, producer=ProducerBatch(2, 0, 1)) == 1


class PausingBarrier(CutBarrier):
    """A log's cut barrier whose walk pauses at its first check until `go` is set (a scan halfway through a
    segment)."""

    def __init__(self) -> None:
        super().__init__()
        self.paused, self.go = threading.Event(), threading.Event()

    def check(self) -> None:
        if not self.paused.is_set():
            self.paused.set()
            assert self.go.wait(30)
        super().check()


def test_a_truncation_waits_for_a_scan_reading_the_files_to_leave_them(tmp_path, replicas, storage) -> None:
    plog = replicas.open(str(tmp_path / "p"), segment_bytes=1 << 20)  # one segment: no snapshot at a roll
    for i in range(6):
        plog.append(storage.make_batch([b"v%d" % i * 100]), leader_epoch=0, producer=ProducerBatch(2, 0, i))
    plog = replicas.open(str(tmp_path / "p"), segment_bytes=1 << 20)  # (reopened: its state not loaded)
    barrier = plog.cut_barrier = PausingBarrier()
    scan = Scan(plog)
    reader = threading.Thread(target=scan.read)
    reader.start()
    assert barrier.paused.wait(30)  # the scan is walking the segment, its frames past offset 2 still to read
    size = plog.segments()[-1].size
    cut = threading.Thread(target=plog.truncate_to, args=(2,))
    cut.start()
    cut.join(0.5)
    assert cut.is_alive() and plog.segments()[-1].size == size  # the cut waits: the scan still reads the file
    barrier.go.set()
    reader.join(30)
    cut.join(30)
    assert not reader.is_alive() and not cut.is_alive()
    assert plog.end_offset == 2 and plog.segments()[-1].size < size  # cut once the scan left (it stopped there)
    assert scan.table is None and not scan.install()
    assert plog.append(storage.make_batch([b"v2"]), leader_epoch=1, producer=ProducerBatch(2, 0, 2)) == 2


def test_a_load_beside_a_followers_copies_ends_with_the_state_they_left(tmp_path, replicas, storage) -> None:
    leader = replicas.open(str(tmp_path / "leader"), segment_bytes=1 << 20)  # every frame in the last segment
    follower = replicas.open(str(tmp_path / "follower"), segment_bytes=1 << 20)
    lead(leader, storage, range(60))
    replicas.copy(leader, follower)
    last = lead(leader, storage, range(60, 150))
    follower = replicas.open(str(tmp_path / "follower"), segment_bytes=1 << 20)  # (reopened: its state not loaded)
    loads: list[bool] = []
    loader = threading.Thread(target=lambda: loads.append(follower.load_producer_state()))
    loader.start()
    replicas.copy(leader, follower)
    loader.join()
    assert loads == [True]  # (segments rolled meanwhile; none was rewritten or deleted)
    answers_as_leader(follower, storage, last)
