"""The leader-epoch cache and its checkpoint file (fabric.storage.leader_epochs, epoch_checkpoint): the file's
round trip and self-check, monotonic assign, the OffsetsForLeaderEpoch answers, truncation from either end,
and a partition's cache rebuilt from its frame headers when the file is damaged, missing or behind."""
from __future__ import annotations

import logging
import os

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common.errors import InvalidLeaderEpochError
from fabric.common.types import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEndOffset
from fabric.storage import epoch_checkpoint
from fabric.storage.epoch_checkpoint import CHECKPOINT, CorruptCheckpointError, EpochEntry
from fabric.storage.leader_epochs import LeaderEpochCache

# strictly increasing epochs and start offsets, as a valid file holds them
ENTRIES = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 10**12)), max_size=20).map(
    lambda steps: [EpochEntry(sum(e for e, _ in steps[:i + 1]) - 1, sum(o for _, o in steps[:i + 1]) - 1)
                   for i in range(len(steps))])


def _cache(tmp_path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(str(tmp_path), "events-0")
    for epoch, start in entries:
        assert cache.assign(epoch, start)
    return cache


# -- the checkpoint file ---------------------------------------------------------------------------
def test_checkpoint_file_is_text_lines_of_epoch_and_start_offset(tmp_path):
    cache = _cache(tmp_path, (0, 0), (3, 120), (4, 500))
    with open(tmp_path / CHECKPOINT) as f:
        lines = f.read().splitlines()
    assert lines[:5] == ["1", "3", "0 0", "3 120", "4 500"]
    assert len(lines) == 6 and len(lines[5]) == 8 and int(lines[5], 16) >= 0  # the checksum line
    assert LeaderEpochCache(str(tmp_path), "events-0", epoch_checkpoint.read(str(tmp_path / CHECKPOINT))).entries \
        == cache.entries
    assert not os.path.exists(str(tmp_path / CHECKPOINT) + ".tmp")


@settings(max_examples=60, deadline=None)
@given(ENTRIES)
def test_checkpoint_round_trip(entries):
    assert epoch_checkpoint.decode(epoch_checkpoint.encode(entries), "f") == entries


@settings(max_examples=100, deadline=None)
@given(ENTRIES.filter(bool), st.data())
def test_any_damage_to_the_checkpoint_is_detected(entries, data):
    raw = bytearray(epoch_checkpoint.encode(entries))
    how = data.draw(st.sampled_from(["flip", "cut", "append"]))
    if how == "flip":
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        raw = raw[:data.draw(st.integers(0, len(raw) - 2))]  # at least the final newline's byte before it
    else:
        raw += data.draw(st.binary(min_size=1, max_size=20).filter(lambda b: b.strip(b"\n")))
    with pytest.raises(CorruptCheckpointError, match="is damaged"):
        epoch_checkpoint.decode(bytes(raw), "events-0/leader-epoch-checkpoint")


def test_a_valid_checksum_over_entries_that_do_not_increase_is_still_refused(tmp_path):
    body = b"1\n2\n3 100\n2 200\n"
    raw = body + f"{crc32c.crc32c(body):08x}\n".encode()
    with pytest.raises(CorruptCheckpointError, match="does not increase"):
        epoch_checkpoint.decode(raw, "f")
    with pytest.raises(InvalidLeaderEpochError, match="does not increase"):
        epoch_checkpoint.write(str(tmp_path / CHECKPOINT), [EpochEntry(3, 100), EpochEntry(2, 200)])
    assert not os.path.exists(tmp_path / CHECKPOINT)


# -- assign --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("epoch, start, message", [
    (2, 600, "leader epoch 2 from offset 600 is refused: the latest epoch is 4 .from offset 500. and epochs only "
             "increase"),
    (5, 499, "leader epoch 5 from offset 499 is refused: the latest epoch 4 starts at offset 500 and start offsets "
             "only increase"),
    (4, 499, "leader epoch 4 from offset 499 is refused: the latest epoch 4 starts at offset 500"),
    (-1, 600, "never negative"),
    (6, -1, "never negative"),
])
def test_assign_refuses_what_goes_backwards_naming_the_values(tmp_path, epoch, start, message):
    cache = _cache(tmp_path, (0, 0), (4, 500))
    before = (tmp_path / CHECKPOINT).read_bytes()
    with pytest.raises(InvalidLeaderEpochError, match=message):
        cache.assign(epoch, start)
    assert cache.entries == [(0, 0), (4, 500)]
    assert (tmp_path / CHECKPOINT).read_bytes() == before


def test_assign_of_the_latest_epoch_again_changes_nothing_and_a_new_epoch_at_the_same_offset_replaces(tmp_path):
    cache = _cache(tmp_path, (0, 0), (4, 500))
    assert not cache.assign(4, 700)
    assert cache.assign(6, 500)  # epoch 4 wrote no records: epoch 6 takes its place
    assert cache.entries == [(0, 0), (6, 500)]
    assert cache.latest_epoch == 6
    assert epoch_checkpoint.read(str(tmp_path / CHECKPOINT)) == cache.entries
    assert LeaderEpochCache(str(tmp_path), "p").latest_epoch == UNDEFINED_EPOCH


# -- OffsetsForLeaderEpoch -------------------------------------------------------------------------
@pytest.mark.parametrize("asked, answer", [
    (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),  # a follower with no epoch
    (7, (7, 900)),  # the latest epoch: the log end
    (9, (7, 900)),  # past the latest (docs/replication.md: the leader answers with its own end)
    (5, (5, 700)),  # an older epoch: where the next one starts
    (3, (2, 300)),  # an epoch this log never had: the largest before it, ending where the next one starts
    (6, (5, 700)),
    (1, (1, 100)),  # below the first known epoch: Kafka's answer, the first epoch's start offset
])
def test_end_offset_for(tmp_path, asked, answer):
    cache = _cache(tmp_path, (2, 100), (5, 300), (7, 700))
    assert cache.end_offset_for(asked, 900) == EpochEndOffset(*answer)


def test_a_log_without_epochs_answers_its_end_with_an_undefined_epoch(tmp_path):
    cache = LeaderEpochCache(str(tmp_path), "p")
    assert cache.end_offset_for(3, 50) == EpochEndOffset(UNDEFINED_EPOCH, 50)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 50) == EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


# -- truncation ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("method, steps", [
    # the epochs starting at or past the offset are forgotten
    ("truncate_from_end", [(701, [(2, 100), (5, 300), (7, 700)]), (700, [(2, 100), (5, 300)]), (0, [])]),
    # the epochs wholly before the offset are dropped; the one holding it now starts there
    ("truncate_from_start", [(100, [(2, 100), (5, 300), (7, 700)]), (450, [(5, 450), (7, 700)]),
                             (700, [(7, 700)])]),
])
def test_truncation_from_either_end(tmp_path, method, steps):
    cache = _cache(tmp_path, (2, 100), (5, 300), (7, 700))
    for offset, expected in steps:
        getattr(cache, method)(offset)
        assert cache.entries == expected
        assert epoch_checkpoint.read(str(tmp_path / CHECKPOINT)) == (expected or None)  # no epochs, no file


# -- a partition's cache, checked against its frames -----------------------------------------------------
def _leader(replicas, directory):
    log = replicas.open(directory)
    for epoch, batches in ((0, 4), (2, 3), (5, 5)):
        replicas.lead(log, epoch, batches)
    return log


@pytest.mark.parametrize("damage", ["flipped byte", "emptied", "garbage", "missing", "behind the log"])
def test_a_damaged_missing_or_stale_checkpoint_is_rebuilt_from_the_frame_headers(tmp_path, replicas, damage, caplog):
    directory = str(tmp_path / "events" / "0")
    expected = _leader(replicas, directory).leader_epochs.entries
    assert [e.epoch for e in expected] == [0, 2, 5] and expected[0].start_offset == 0
    path = os.path.join(directory, CHECKPOINT)
    raw = open(path, "rb").read()
    if damage == "flipped byte":
        open(path, "wb").write(raw[:5] + bytes([raw[5] ^ 1]) + raw[6:])
    elif damage == "emptied":
        open(path, "wb").close()
    elif damage == "garbage":
        open(path, "wb").write(b"\x00\xffnot a checkpoint")
    elif damage == "missing":
        os.unlink(path)
    else:
        epoch_checkpoint.write(path, expected[:2])
    with caplog.at_level(logging.WARNING, logger="fabric.storage.leader_epochs"):
        reopened = replicas.open(directory)
        assert reopened.leader_epochs.entries == expected
    assert epoch_checkpoint.read(path) == expected
    assert any("events-0" in r.getMessage() and "rebuilt from the frame headers" in r.getMessage()
               for r in caplog.records)


def test_an_embedded_log_writes_no_checkpoint_and_stamps_no_epoch(tmp_path, storage):
    log = storage.open_log(str(tmp_path))
    storage.fill(log, 3)
    assert log.leader_epochs.entries == []
    assert not os.path.exists(tmp_path / CHECKPOINT)
    assert {h.leader_epoch for _, _, h, _ in storage.committed_frames(str(tmp_path), log.end_offset)} == {-1}
