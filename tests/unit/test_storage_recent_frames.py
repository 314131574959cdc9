"""A node's log answers read_frames and consumers' reads at its tail from the frames it wrote last
(fabric.storage.recent_frames): the same bytes and batches as its files, whatever the offset, size and end asked,
and never a frame the files no longer hold at that offset (a roll, a truncation, a failed write, a recovery). Its
end offset comes from memory too."""
from __future__ import annotations

import itertools
import os
import threading

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.storage import frame
from fabric.storage.watermark import HighWatermark

KEPT = 4096  # bytes of frames kept: about 20 of ReplicaKit's small frames


def _from_files(replicas, log, offset, max_bytes, end=None):
    """What a log object with nothing in memory reads at `offset`: the files' frames."""
    return replicas.open(log.directory).read_frames(offset, max_bytes, end).to_pybytes()


@pytest.fixture
def leader(tmp_path, replicas):
    log = replicas.open(str(tmp_path / "leader"), recent_bytes=KEPT, segment_bytes=1 << 20)
    replicas.lead(log, 0, 12)
    return log


@settings(max_examples=60, deadline=None)
@given(at=st.integers(0, 30), max_bytes=st.integers(1, 3000), end_back=st.integers(0, 10))
def test_reads_at_the_tail_are_the_files_bytes(tmp_path_factory, replicas, at, max_bytes, end_back):
    log = replicas.open(str(tmp_path_factory.mktemp("log")), recent_bytes=KEPT, segment_bytes=1 << 20)
    replicas.lead(log, 0, 12)
    offset, end = min(at, log.end_offset - 1), max(log.end_offset - end_back, 1)
    if offset >= end:
        return
    assert log.read_frames(offset, max_bytes, end).to_pybytes() == _from_files(replicas, log, offset, max_bytes, end)


def _batches(fetched):
    """A consumer read's batches as comparable values: offsets, rows, timestamp type, the stored message."""
    return [(f.offset, f.batch.to_pylist(), f.timestamp_type, None if f.message is None else f.message.to_pybytes())
            for f in fetched]


@settings(max_examples=60, deadline=None)
@given(at=st.integers(0, 40), max_bytes=st.integers(1, 3000), end_back=st.integers(0, 10),
       markers=st.lists(st.integers(0, 14), max_size=4))
def test_consumer_reads_at_the_tail_are_the_files_batches(tmp_path_factory, replicas, at, max_bytes, end_back,
                                                          markers):
    """Batches, sliced at both ends where the offsets asked cut a frame, with markers among them (which a read
    leaves out, or ends on with an empty batch after them), both isolations."""
    log = replicas.open(str(tmp_path_factory.mktemp("log")), recent_bytes=KEPT, segment_bytes=1 << 20)
    for b in range(15):
        replicas.lead(log, 0, 1, tag=f"{b}-")
        if b in markers:
            log.write_marker(producer_id=7, producer_epoch=0, commit=False, leader_epoch=0)
    offset, end = min(at, log.end_offset - 1), max(log.end_offset - end_back, 1)
    if offset >= end:
        return
    for isolation in ("read_committed", "read_uncommitted"):
        assert _batches(log.fetch(offset, max_bytes, end, isolation)) == _batches(
            replicas.open(log.directory).fetch(offset, max_bytes, end, isolation))


def test_a_consumers_read_at_the_tail_is_served_from_memory(leader, replicas, storage):
    """A byte flipped in the last frame's payload on disk (its CRC no longer holds there): the kept frame is still
    decoded and served."""
    path, pos, header, _ = storage.committed_frames(leader.directory, leader.end_offset)[-1]
    with open(path, "r+b") as f:
        f.seek(pos + frame.HEADER_SIZE + 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open(path, "rb") as f:
        assert not frame.verify(pa.py_buffer(f.read()), pos, header)
    served = leader.fetch(header.base_offset, 1 << 20)
    assert [f.offset for f in served] == [header.base_offset] and served[0].batch.num_rows == header.record_count


def test_the_tail_is_served_from_memory(leader, replicas, storage):
    """A byte flipped in the file after the write: the kept frame is still served whole (its CRC holds), where
    a read of the file refuses it; what is not kept is read from the file."""
    frames = storage.committed_frames(leader.directory, leader.end_offset)
    path, pos, header, _ = frames[-1]
    with open(path, "r+b") as f:
        f.seek(pos + frame.HEADER_SIZE + 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    served = frame.split_frames(leader.read_frames(header.base_offset, 1 << 20))
    assert [h.base_offset for h, _ in served] == [header.base_offset]
    assert frame.split_frames(leader.read_frames(0, 1 << 20))[0][0].base_offset == 0


def test_only_the_last_frames_are_kept_and_older_ones_come_from_the_files(tmp_path, replicas):
    log = replicas.open(str(tmp_path), recent_bytes=2000, segment_bytes=1 << 20)
    bases = replicas.lead(log, 0, 30)
    assert log.recent is not None and log.recent.read(log.active_base, bases[-1], log.end_offset, 1) is not None
    assert log.recent.read(log.active_base, 0, log.end_offset, 1) is None
    assert log.read_frames(0, 1 << 20).to_pybytes() == _from_files(replicas, log, 0, 1 << 20)


def test_a_roll_keeps_only_the_new_segments_frames(tmp_path, replicas):
    log = replicas.open(str(tmp_path), recent_bytes=KEPT)  # ReplicaKit's segments hold a frame or two
    bases = replicas.lead(log, 0, 8)
    assert log.recent is not None and log.recent.segment_base == log.active_base
    for offset in bases:
        assert log.read_frames(offset, 1 << 20).to_pybytes() == _from_files(replicas, log, offset, 1 << 20)


def test_a_truncation_forgets_the_kept_frames(leader, replicas):
    """The new frames written at the truncated offsets are served, not the ones they replaced."""
    bases = [h.base_offset for h, _ in frame.split_frames(leader.read_frames(0, 1 << 20))]
    cut = bases[-4]
    assert leader.truncate_to(cut)
    assert leader.read_frames(cut, 1 << 20).size == 0
    replicas.lead(leader, 1, 3, tag="after")
    served = leader.read_frames(cut, 1 << 20)
    assert served.to_pybytes() == _from_files(replicas, leader, cut, 1 << 20)
    assert {h.leader_epoch for h, _ in frame.split_frames(served)} == {1}


def test_a_failed_write_forgets_the_kept_frames(leader):
    assert leader.recent is not None and leader.recent.segment_base >= 0
    leader.forget_tail()  # what a write that failed part-way does (Log._recover_on_failure)
    assert leader.recent.segment_base == -1 and leader.recent.read(leader.active_base or 0, 0, 1, 1) is None


def test_an_owned_log_knows_its_end_without_reading_the_watermark(leader, replicas, count_calls):
    """The end offset comes from the log's view of the tail, the same as its files give, after appends and a
    truncation; once that view is dropped (a failed write), from the watermark file again."""
    def on_disk() -> int | None:
        return HighWatermark(leader.hw.path).read().value  # the file, read by another object
    end = leader.end_offset
    assert end == on_disk()
    reads = count_calls(leader.hw, "read")
    replicas.lead(leader, 0, 3)
    grown = leader.end_offset
    assert grown == on_disk() == end + 6
    assert leader.truncate_to(end)
    truncated = leader.end_offset
    assert truncated == on_disk() == end and reads() == 0
    leader.forget_tail()
    assert leader.end_offset == end and reads() == 1


def test_an_embedded_log_keeps_nothing(tmp_path, storage):
    """Other processes may write a `file://` log: it reads its files every time."""
    log = storage.open_log(str(tmp_path))
    storage.fill(log, 3)
    assert log.recent is None


def test_reads_beside_a_writer_get_whole_frames_from_the_one_asked(tmp_path, replicas):
    """A follower's fetch runs on the event loop while a produce appends on a worker thread: every read gives
    whole frames, contiguous, from the frame holding its offset, never a mix of two writes' states."""
    log = replicas.open(str(tmp_path), recent_bytes=1500, segment_bytes=1 << 20)
    replicas.lead(log, 0, 5)
    done = threading.Event()

    def write() -> None:
        try:
            replicas.lead(log, 0, 300)
        finally:
            done.set()
    writer = threading.Thread(target=write)
    writer.start()
    reads = 0
    while not done.is_set() or reads < 50:
        end = log.end_offset
        offset = max(end - 4, 0)
        frames = frame.split_frames(log.read_frames(offset, 1 << 20))
        assert frames and frames[0][0].base_offset <= offset < frames[0][0].next_offset
        assert all(a.next_offset == b.base_offset for (a, _), (b, _) in itertools.pairwise(frames))
        reads += 1
    writer.join()
    assert log.end_offset > 300  # the writer wrote every batch
