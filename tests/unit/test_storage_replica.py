"""A replica-mode Log (a data node's partition): leader epochs stamped on appends, followers appending their
leader's raw frames byte for byte, truncation to an offset, the KIP-101/KIP-279 divergence scenarios, and
recovery that keeps every whole, valid frame past the watermark (an embedded log's recovery cuts them)."""
from __future__ import annotations

import logging
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common.errors import (
    CorruptRecordError,
    InvalidArgumentError,
    InvalidFramesError,
    InvalidLeaderEpochError,
    OffsetOutOfRangeError,
    UnexpectedOffsetError,
)
from fabric.common.types import EpochEndOffset
from fabric.storage import frame
from fabric.storage.marker import PendingPublish, write_marker


def _frames_of(log, storage):
    """(base offset, leader epoch) of every data frame below the log end, in order."""
    return [(h.base_offset, h.leader_epoch) for _, _, h, _ in storage.committed_frames(log.directory, log.end_offset)]


# -- leader epochs on appends ----------------------------------------------------------------------------
def test_a_leader_stamps_its_epoch_on_every_frame_and_records_where_each_epoch_starts(tmp_path, replicas, storage):
    log = replicas.open(str(tmp_path))
    bases = {epoch: replicas.lead(log, epoch, 3) for epoch in (0, 1, 4)}
    assert _frames_of(log, storage) == [(b, e) for e, bs in bases.items() for b in bs]
    assert log.leader_epochs.entries == [(e, bs[0]) for e, bs in bases.items()]
    assert all(ok for _, _, _, ok in storage.committed_frames(str(tmp_path), log.end_offset))  # CRCs cover the epoch


def test_an_append_in_an_older_epoch_is_refused_and_writes_nothing(tmp_path, replicas):
    log = replicas.open(str(tmp_path))
    replicas.lead(log, 3, 2)
    before, end = replicas.files(str(tmp_path)), log.end_offset
    with pytest.raises(InvalidLeaderEpochError, match="leader epoch 2 from offset 3 is refused: the latest epoch is 3"):
        replicas.lead(log, 2, 1)
    assert replicas.files(str(tmp_path)) == before and log.end_offset == end


def test_an_empty_append_writes_no_frame(tmp_path, replicas, storage):
    """Every frame holds a record, so a follower copying by offsets gets every frame the leader has."""
    log = replicas.open(str(tmp_path))
    replicas.lead(log, 0, 2)
    before, end = replicas.files(str(tmp_path)), log.end_offset
    assert log.append(storage.make_batch([b"x"]).slice(0, 0), leader_epoch=0) == end
    assert replicas.files(str(tmp_path)) == before and log.end_offset == end


# -- raw frames: the leader's read, the follower's append ----------------------------------------------
def test_a_follower_copying_raw_frames_holds_the_leaders_segments_byte_for_byte(tmp_path, replicas, storage):
    leader, follower = replicas.open(str(tmp_path / "l")), replicas.open(str(tmp_path / "f"))
    for epoch in (0, 2, 3):
        replicas.lead(leader, epoch, 6)
    assert len(storage.data_files(leader.directory)) > 3  # the copies roll segments too
    assert replicas.copy(leader, follower) == leader.end_offset
    assert replicas.files(follower.directory) == replicas.files(leader.directory)  # segments, indexes, epochs
    assert storage.read_all(replicas.open(follower.directory)) == storage.read_all(leader)
    assert follower.append_frames(b"") == leader.end_offset


def test_read_frames_serves_whole_frames_of_one_segment(tmp_path, replicas):
    log = replicas.open(str(tmp_path), segment_bytes=1 << 20)
    bases = replicas.lead(log, 0, 6)
    one = frame.split_frames(log.read_frames(bases[2], 1))  # at least one frame, whatever max_bytes says
    assert [h.base_offset for h, _ in one] == [bases[2]]
    inside = frame.split_frames(log.read_frames(bases[2] + 1, 1))  # an offset inside a frame: its frame
    assert [h.base_offset for h, _ in inside] == [bases[2]]
    every = frame.split_frames(log.read_frames(0, 1 << 20))
    assert [h.base_offset for h, _ in every] == bases
    assert [h.base_offset for h, _ in frame.split_frames(log.read_frames(0, 1 << 20, bases[3]))] == bases[:3]
    assert log.read_frames(log.end_offset, 1 << 20).size == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read_frames(log.end_offset + 1, 100)
    rolled = replicas.open(str(tmp_path / "rolled"))
    rolled_bases = replicas.lead(rolled, 0, 6)
    served = [h.base_offset for h, _ in frame.split_frames(rolled.read_frames(0, 1 << 20))]
    assert served == rolled_bases[:len(served)] and len(served) < len(rolled_bases)  # one segment at a time


def test_read_frames_refuses_to_serve_a_damaged_frame(tmp_path, replicas, storage):
    log = replicas.open(str(tmp_path), segment_bytes=1 << 20)
    bases = replicas.lead(log, 0, 4)
    path, pos, header, _ = storage.committed_frames(str(tmp_path), log.end_offset)[2]
    with open(path, "r+b") as f:
        f.seek(pos + frame.HEADER_SIZE + 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    assert [h.base_offset for h, _ in frame.split_frames(log.read_frames(0, 1 << 20))] == bases[:2]
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.read_frames(bases[2], 1 << 20)


def _batch_of(leader, start, count):
    """The raw bytes of the leader's frames from offset `start`, `count` frames (one segment)."""
    frames = frame.split_frames(leader.read_frames(start, 1 << 30))[:count]
    return b"".join(h.pack() + p.to_pybytes() for h, p in frames), [h for h, _ in frames]


def _refusals(leader, follower_end):
    """Bad batches for a follower whose log ends at `follower_end`: (name, bytes, error, message)."""
    good, headers = _batch_of(leader, follower_end, 3)
    first, second = headers[0].size, headers[1].size
    later, _ = _batch_of(leader, headers[1].base_offset, 2)
    flipped = bytearray(good)
    flipped[first + frame.HEADER_SIZE + 5] ^= 0x01  # the second frame's payload
    skipped = good[:first] + good[first + second:]  # the middle frame left out
    earlier, _ = _batch_of(leader, 0, 1)
    magic = bytearray(good)
    magic[first:first + 4] = b"XBAT"
    schema_header, schema_payload = frame.schema_frame(leader.schema)
    return [
        ("a gap before the batch", later, UnexpectedOffsetError,
         f"expected offset {follower_end}, got a frame at offset {headers[1].base_offset}"),
        ("frames already held", earlier + good, UnexpectedOffsetError,
         f"expected offset {follower_end}, got a frame at offset 0"),
        ("a frame missing inside the batch", skipped, UnexpectedOffsetError,
         f"at byte {first} of {len(skipped)} does not follow on: expected offset {headers[1].base_offset}, got a "
         f"frame at offset {headers[2].base_offset}"),
        ("a flipped payload bit", bytes(flipped), InvalidFramesError,
         f"at byte {first} of {len(good)} .offset {headers[1].base_offset}. fails its CRC check"),
        ("a torn last frame", good[:-10], InvalidFramesError, "is torn"),
        ("a bad magic", bytes(magic), InvalidFramesError, "no valid frame header"),
        ("a schema frame", schema_header.pack() + schema_payload.to_pybytes(), InvalidFramesError,
         "is a schema frame"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_bad_batch_of_raw_frames_is_refused_whole_and_writes_nothing(tmp_path, replicas, case):
    leader, follower = (replicas.open(str(tmp_path / n), segment_bytes=1 << 20) for n in ("l", "f"))
    for epoch in (1, 2):
        replicas.lead(leader, epoch, 5)
    replicas.copy(leader, follower, upto=leader.leader_epochs.entries[1].start_offset)
    end, before = follower.end_offset, replicas.files(follower.directory)
    name, data, error, message = _refusals(leader, end)[case]
    with pytest.raises(error, match=message):
        follower.append_frames(data)
    assert replicas.files(follower.directory) == before, name
    assert follower.end_offset == end and follower.leader_epochs.latest_epoch == 1
    assert replicas.copy(leader, follower) == leader.end_offset  # and the next good batch goes on from there
    assert replicas.files(follower.directory) == replicas.files(leader.directory)


def test_frames_whose_epoch_goes_backwards_are_refused(tmp_path, replicas):
    old, new, follower = (replicas.open(str(tmp_path / n)) for n in ("old", "new", "f"))
    replicas.lead(old, 1, 4)
    replicas.lead(new, 3, 2)
    replicas.copy(new, follower)
    before = replicas.files(follower.directory)
    stale_from_end = frame.split_frames(old.read_frames(follower.end_offset, 1 << 30))
    assert stale_from_end  # the old leader's frames at the follower's end offset, in epoch 1
    data = b"".join(h.pack() + p.to_pybytes() for h, p in stale_from_end)
    with pytest.raises(InvalidFramesError, match="has leader epoch 1, below epoch 3 before it"):
        follower.append_frames(data)
    assert replicas.files(follower.directory) == before


# -- truncation -----------------------------------------------------------------------------------------
def test_truncate_to_every_frame_boundary_equals_a_copy_of_that_prefix(tmp_path, replicas, storage, caplog):
    leader = replicas.open(str(tmp_path / "l"))
    for epoch in (0, 2, 5):
        replicas.lead(leader, epoch, 4)
    boundaries = [b for b, _ in _frames_of(leader, storage)] + [leader.end_offset]
    for target in boundaries[::-1]:
        copy = str(tmp_path / f"t{target}")
        shutil.copytree(leader.directory, copy)
        log = replicas.open(copy)
        with caplog.at_level(logging.WARNING, logger="fabric.storage.truncation"):
            assert log.truncate_to(target) == (target < leader.end_offset)
        prefix = replicas.open(str(tmp_path / f"p{target}"))
        replicas.copy(leader, prefix, upto=target)
        assert log.end_offset == target
        assert replicas.files(copy) == replicas.files(prefix.directory), target  # segments, indexes, epochs
        assert storage.read_all(replicas.open(copy)) == storage.read_all(leader)[:target]
        replicas.lead(log, 6, 2, tag="after")  # appends go on from the cut
        assert storage.read_all(log)[:target] == storage.read_all(leader)[:target]
    assert any(f"truncated from log end offset {leader.end_offset} to offset 0" in r.getMessage()
               and "segments deleted" in r.getMessage() for r in caplog.records)


def test_truncate_to_refuses_an_offset_inside_a_frame_or_below_the_log_start(tmp_path, replicas):
    log = replicas.open(str(tmp_path))
    bases = replicas.lead(log, 0, 4)
    before = replicas.files(str(tmp_path))
    with pytest.raises(InvalidArgumentError, match=f"offset {bases[2] + 1}, inside the frame of offsets "
                                                   f"{bases[2]}..{bases[3] - 1}"):
        log.truncate_to(bases[2] + 1)
    with pytest.raises(OffsetOutOfRangeError, match="below the log start"):
        log.truncate_to(-1)
    assert not log.truncate_to(log.end_offset + 5)
    assert replicas.files(str(tmp_path)) == before


# -- KIP-101 / KIP-279: divergent tails in different epochs ---------------------------------------------
def _diverged(tmp_path, replicas, scenario):
    """(leader, follower) after failovers that left the follower with a divergent, uncommitted tail."""
    a, b = replicas.open(str(tmp_path / "a")), replicas.open(str(tmp_path / "b"))
    replicas.lead(a, 0, 3)
    replicas.copy(a, b)
    if scenario == "KIP-101: the old leader wrote past what the new leader copied":
        replicas.lead(a, 0, 3, tag="lost")  # a (epoch 0) writes more; b never copies it
        replicas.lead(b, 1, 3)  # b leads epoch 1 from its own end
        return b, a
    if scenario == "KIP-279: two fast failovers, the follower's tail is of an epoch the leader never had":
        replicas.lead(a, 1, 2)  # a leads epoch 1; b copies part of it
        replicas.copy(a, b, upto=a.leader_epochs.entries[-1].start_offset + 1)
        replicas.lead(b, 2, 3, tag="b2")  # b leads epoch 2; a copies nothing of it
        replicas.lead(a, 3, 2, tag="a3")  # a leads epoch 3 (b is paused): b's epoch-2 tail diverges
        return a, b
    # "KIP-279: the leader copied less of an epoch than the follower holds"
    replicas.lead(a, 1, 4)  # a leads epoch 1; b copies only its first two frames
    replicas.copy(a, b, upto=a.leader_epochs.entries[-1].start_offset + 2)
    replicas.lead(b, 2, 3)  # b leads epoch 2, a pauses and returns holding more of epoch 1
    return b, a


@pytest.mark.parametrize("scenario", [
    "KIP-101: the old leader wrote past what the new leader copied",
    "KIP-279: two fast failovers, the follower's tail is of an epoch the leader never had",
    "KIP-279: the leader copied less of an epoch than the follower holds",
])
def test_truncating_to_the_leaders_end_for_the_epoch_removes_the_divergence(tmp_path, replicas, storage, scenario):
    leader, follower = _diverged(tmp_path, replicas, scenario)
    ours, theirs = storage.read_all(follower), storage.read_all(leader)
    common = next(i for i, (a, b) in enumerate(zip(ours + [None], theirs + [None], strict=False)) if a != b)
    assert common < follower.end_offset  # the follower's tail diverged
    assert replicas.reconcile(follower, leader) == common  # cut exactly there: nothing common is lost
    assert storage.read_all(follower) == theirs[:common]
    replicas.copy(leader, follower)
    assert replicas.files(follower.directory) == replicas.files(leader.directory)
    assert replicas.reconcile(follower, leader) == leader.end_offset


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.booleans(), st.integers(0, 100)),
                min_size=1, max_size=6))
def test_any_history_of_failovers_converges_byte_for_byte(tmp_path_factory, replicas, storage, rounds):
    """Each round one of two replicas leads a new epoch and appends; the other, unless it is down for that
    round, follows: it truncates where its log diverges from the leader's, then copies part of the leader's
    log. After every truncation the follower's log is a prefix of its leader's; after a final catch-up both
    hold the same bytes."""
    root = tmp_path_factory.mktemp("history")
    logs = [replicas.open(str(root / "a")), replicas.open(str(root / "b"))]
    for epoch, (pick, batches, follows, copy_pct) in enumerate(rounds):
        leader, follower = logs[pick], logs[not pick]
        replicas.lead(leader, epoch, batches, tag=f"r{epoch}")
        if follows:
            replicas.reconcile(follower, leader)
            assert storage.read_all(follower) == storage.read_all(leader)[:follower.end_offset]
            replicas.copy(leader, follower, upto=follower.end_offset
                          + (leader.end_offset - follower.end_offset) * copy_pct // 100)
    leader, follower = logs[rounds[-1][0]], logs[not rounds[-1][0]]
    replicas.follow(follower, leader)
    assert replicas.files(follower.directory) == replicas.files(leader.directory)


# -- recovery ---------------------------------------------------------------------------------------------
def _frames_past_the_watermark(tmp_path, replicas, storage):
    """A partition whose watermark file is two frames behind its whole, valid frames (a writer died between
    writing frames and the watermark, or a follower's frames await replication), then a torn frame header;
    (directory, base offsets of the frames, the partition's files before the damage)."""
    directory = str(tmp_path / "p")
    log = replicas.open(directory)
    bases = replicas.lead(log, 0, 6)
    files = replicas.files(directory)
    log.hw.write(bases[-2])
    with open(storage.data_files(directory)[-1], "ab") as f:
        f.write(frame.MAGIC + bytes(30))
    return directory, bases, files


def test_replica_recovery_keeps_every_whole_valid_frame_past_the_watermark(tmp_path, replicas, storage, caplog):
    directory, bases, original = _frames_past_the_watermark(tmp_path, replicas, storage)
    end = bases[-1] + 3
    with caplog.at_level(logging.WARNING, logger="fabric.storage.recovery"):
        log = replicas.open(directory)
        assert log.end_offset == end
    assert replicas.files(directory) == original  # only the torn tail went
    assert len(storage.read_all(log)) == end
    assert any("torn or invalid tail" in r.getMessage() for r in caplog.records)
    assert log.leader_epochs.entries == [(0, 0)]


def test_embedded_recovery_still_cuts_the_frames_past_the_watermark(tmp_path, replicas, storage):
    directory, bases, _ = _frames_past_the_watermark(tmp_path, replicas, storage)
    log = storage.open_log(directory, **replicas.CONFIG)
    assert log.end_offset == bases[-2]
    storage.assert_clean(directory, bases[-2])


def test_replica_recovery_forgets_the_epoch_of_a_torn_first_frame(tmp_path, replicas, storage):
    log = replicas.open(str(tmp_path), segment_bytes=1 << 20)
    replicas.lead(log, 0, 3)
    base = replicas.lead(log, 4, 1)[0]
    assert log.leader_epochs.latest_epoch == 4
    path, pos, header, _ = storage.committed_frames(str(tmp_path), log.end_offset)[-1]
    with open(path, "r+b") as f:
        f.truncate(pos + header.size - 3)
    reopened = replicas.open(str(tmp_path), segment_bytes=1 << 20)
    assert reopened.end_offset == base
    assert reopened.leader_epochs.entries == [(0, 0)]
    assert reopened.leader_epochs.end_offset_for(4, reopened.end_offset) == EpochEndOffset(0, base)


def test_writes_to_a_replica_log_apply_no_retention(tmp_path, replicas):
    log = replicas.open(str(tmp_path), retention_bytes=3000)
    for epoch in (0, 1, 2):
        replicas.lead(log, epoch, 6)
    assert log.start_offset == 0 and len(log.segments()) > 1  # the write path left every segment


def test_retention_moves_the_first_epoch_up_to_the_new_log_start(tmp_path, replicas):
    log = replicas.open(str(tmp_path), retention_bytes=3000)
    firsts = {epoch: replicas.lead(log, epoch, 6)[0] for epoch in (0, 1, 2)}
    assert log.enforce_retention() == 0  # a replica log deletes nothing while its node does not lead it
    log.retention.leader_high_watermark = lambda: log.end_offset  # as a leader's replica sets it, all replicated
    assert log.enforce_retention() > 0  # asked for: a replica log's writes never apply it
    start = log.start_offset
    assert start > firsts[1]  # retention deleted the segments of epoch 0 and more
    holding = max(e for e, first in firsts.items() if first <= start)
    expected = [(holding, start)] + [(e, first) for e, first in firsts.items() if e > holding]
    assert log.leader_epochs.entries == expected
    assert replicas.open(str(tmp_path)).leader_epochs.entries == expected  # as the file says


def test_replica_recovery_ignores_a_pending_publish_marker_and_says_so(tmp_path, replicas, storage, caplog):
    directory, bases, original = _frames_past_the_watermark(tmp_path, replicas, storage)
    write_marker(directory, PendingPublish("dead-txn", bases[-1], bases[-2]))
    with caplog.at_level(logging.WARNING, logger="fabric.storage.recovery"):
        assert replicas.open(directory).end_offset == bases[-1] + 3  # its frames kept all the same
    assert replicas.files(directory) == original  # the marker and the torn tail went
    assert any("marker of transaction dead-txn ignored" in r.getMessage() for r in caplog.records)
