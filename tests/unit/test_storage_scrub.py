"""Scrubbing a replica's log and repairing it from another replica's copy (fabric/storage/scrub.py): damage below
the high watermark anywhere in the log is found (recovery checks only the tail), repaired byte for byte from a
copy that is checked whole first, and a copy cut into other frames (a compacted replica's) is spliced in too."""
from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from fabric.common.errors import CorruptRecordError, InvalidFramesError
from fabric.storage import frame, scrub


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        old = f.read(1)[0]
        f.seek(position)
        f.write(bytes([old ^ 0x40]))


def _pair(tmp_path, replicas):
    """A leader's log of several segments in two epochs and a follower's byte-for-byte copy of it."""
    leader, follower = replicas.open(str(tmp_path / "leader")), replicas.open(str(tmp_path / "follower"))
    replicas.lead(leader, 0, 6)
    replicas.lead(leader, 2, 6)
    replicas.copy(leader, follower)
    return leader, follower


def _damage_frame(storage, log, index: int) -> frame.FrameHeader:
    """Flip a byte in the payload of the log's `index`th data frame; its header."""
    path, pos, header, _ = storage.committed_frames(log.directory, log.end_offset)[index]
    _flip(path, pos + frame.HEADER_SIZE + header.length // 2)
    return header


def test_scrub_finds_damage_in_every_segment_and_walks_every_byte_below_the_end(tmp_path, replicas,
                                                                                storage) -> None:
    leader, follower = _pair(tmp_path, replicas)
    walked: list[int] = []
    assert scrub.scrub(follower, follower.end_offset, walked.append) == []
    frames = storage.committed_frames(follower.directory, follower.end_offset)
    assert sum(walked) == sum(h.size for _, _, h, _ in frames)  # every frame's bytes, CRC-checked
    first, last = _damage_frame(storage, follower, 1), _damage_frame(storage, follower, len(frames) - 1)
    found = scrub.scrub(follower, follower.end_offset)
    assert [(d.first_offset, d.next_offset, d.reason) for d in found] == [
        (h.base_offset, h.next_offset, "its CRC check failed") for h in (first, last)]
    assert scrub.scrub(follower, last.base_offset) == found[:1]  # nothing at or past `end` is looked at
    with pytest.raises(CorruptRecordError):
        scrub.copy_range(follower, first.base_offset, follower.end_offset, 1 << 20)  # never served as a copy


def test_a_damaged_range_is_repaired_byte_for_byte_from_a_replicas_copy(tmp_path, replicas, storage,
                                                                         caplog) -> None:
    leader, follower = _pair(tmp_path, replicas)
    header = _damage_frame(storage, follower, 4)
    [damage] = scrub.scrub(follower, follower.end_offset)
    copy = scrub.copy_range(leader, damage.first_offset, damage.next_offset, 1 << 20)
    with caplog.at_level(logging.WARNING, logger="fabric.storage.scrub"):
        assert scrub.repair(follower, damage, copy, "node 1") is True
    assert f"repaired offsets {header.base_offset}..{header.next_offset - 1}" in caplog.text and "node 1" in caplog.text
    assert replicas.files(follower.directory) == replicas.files(leader.directory)
    assert scrub.scrub(follower, follower.end_offset) == []
    assert storage.read_all(follower) == storage.read_all(leader)
    assert scrub.repair(follower, damage, copy, "node 1") is False  # no longer there: nothing written


@pytest.mark.parametrize("case", ["short", "long", "crc", "epoch", "other offsets"])
def test_a_copy_that_is_not_a_whole_valid_copy_of_the_range_writes_nothing(tmp_path, replicas, storage,
                                                                            case) -> None:
    leader, follower = _pair(tmp_path, replicas)
    _damage_frame(storage, follower, 7)  # in epoch 2
    [damage] = scrub.scrub(follower, follower.end_offset)
    copy = scrub.copy_range(leader, damage.first_offset, damage.next_offset, 1 << 20)
    if case == "short":
        copy = copy.slice(0, copy.size - 1)
    elif case == "long":
        copy = scrub.copy_range(leader, damage.first_offset, leader.end_offset, 1 << 20)
        assert frame.unpack_header(copy, 0).size < copy.size  # more frames than the damaged one
    elif case == "crc":
        raw = bytearray(copy.to_pybytes())
        raw[-1] ^= 1
        copy = pa.py_buffer(bytes(raw))
    elif case == "other offsets":
        copy = scrub.copy_range(leader, damage.next_offset, leader.end_offset, 1 << 20)
    if case == "epoch":  # the same offsets written under another leadership (after an unclean election)
        other = replicas.open(str(tmp_path / "other"))
        replicas.lead(other, 0, 6)
        replicas.lead(other, 3, 6)
        copy = scrub.copy_range(other, damage.first_offset, damage.next_offset, 1 << 20)
    before = replicas.files(follower.directory)
    with pytest.raises(InvalidFramesError, match="nothing was written"):
        scrub.repair(follower, damage, copy, "node 1")
    assert replicas.files(follower.directory) == before


def test_a_copy_cut_into_other_frames_is_spliced_in_and_the_segment_reindexed(tmp_path, replicas, storage) -> None:
    """Each replica compacts its own copy, so another replica may hold the same records in frames cut
    differently: the segment is rewritten around them."""
    leader, other = replicas.open(str(tmp_path / "leader")), replicas.open(str(tmp_path / "other"))
    follower = replicas.open(str(tmp_path / "follower"))
    values = [b"a" * 50, b"b" * 50, b"c" * 50]
    leader.append(storage.make_batch(values[:2], [1_000, 1_001]), leader_epoch=0)  # one frame of offsets 0..1
    leader.append(storage.make_batch(values[2:], [1_002]), leader_epoch=0)
    for i, value in enumerate(values):  # the same offsets, one frame each
        other.append(storage.make_batch([value], [1_000 + i]), leader_epoch=0)
    replicas.copy(leader, follower)
    _damage_frame(storage, follower, 0)
    [damage] = scrub.scrub(follower, follower.end_offset)
    assert (damage.first_offset, damage.next_offset) == (0, 2)
    copy = scrub.copy_range(other, 0, 2, 1 << 20)
    assert copy.size != damage.end - damage.position
    assert scrub.repair(follower, damage, copy, "node 3") is True
    assert scrub.scrub(follower, follower.end_offset) == []
    reopened = replicas.open(follower.directory)
    assert [(o, v) for o, v, _ in storage.read_all(reopened)] == list(enumerate(values))
    assert [(o, v) for o, v, _ in storage.read_all(reopened, 1)] == [(1, values[1]), (2, values[2])]
    assert reopened.append(storage.make_batch([b"d"]), leader_epoch=0) == 3
