"""Damage below the watermark: it is reported (CorruptRecordError naming the segment, the byte and the offsets),
readers skip past it, and appends never cut it. Headers, base offsets, index entries, schema frames and empty
segments, one defect at a time. (Every field of every file, systematically: test_storage_corruption.py.)"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import replace

import numpy as np
import pytest

from fabric.common.errors import CorruptRecordError
from fabric.storage import frame

KEEP = dict(retention_ms=-1, segment_ms=2**62)


def _partition(storage, tmp_path, batches: int, **config):
    directory = str(tmp_path / "t" / "0")
    log = storage.open_log(directory, **KEEP, **config)
    expected = storage.fill(log, batches)
    return directory, log, expected


def _overwrite(path: str, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def _flip(path: str, position: int, bit: int = 0x01) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        old = f.read(1)[0]
        f.seek(position)
        f.write(bytes([old ^ bit]))


def _values(fetched) -> list[tuple[int, bytes]]:
    return [(f.offset + i, v) for f in fetched for i, v in enumerate(f.batch.column(3).to_pylist())]


@pytest.mark.parametrize("interval", [0, 4096])
def test_damaged_frame_header_mid_segment_is_reported_and_skipped(tmp_path, storage, interval):
    """Defect 2: a frame whose magic was overwritten silently ended the log (a consumer saw the first batch and
    stopped); the next append cut the third, acknowledged, batch and reused its offsets."""
    directory, log, expected = _partition(storage, tmp_path, 3, index_interval_bytes=interval)
    end = log.end_offset
    frames = storage.committed_frames(directory, end)
    path, pos, second, _ = frames[1]
    _overwrite(path, pos, b"XXXX")
    size = os.path.getsize(path)

    reopened = storage.open_log(directory, **KEEP)
    assert _values(reopened.fetch(0, 1 << 20)) == [(o, v) for o, v, _ in expected[:second.base_offset]]
    damaged = f"offsets {second.base_offset}..{second.next_offset - 1} at byte {pos} of {re.escape(path)}"
    for offset in range(second.base_offset, second.next_offset):
        with pytest.raises(CorruptRecordError, match=damaged + r".*seek to offset " + str(second.next_offset)):
            reopened.fetch(offset, 1 << 20)
    assert storage.read_all(reopened, second.next_offset) == expected[second.next_offset:]
    assert reopened.append(storage.make_batch([b"new"], [5])) == end  # past the watermark, nothing cut
    assert os.path.getsize(path) > size
    assert storage.read_all(storage.open_log(directory, **KEEP), second.next_offset) == \
        expected[second.next_offset:] + [(end, b"new", 5)]


def _as_version_1(path: str) -> None:
    """Rewrite every frame of a segment as version 1 wrote it (the CRC left the base offset out)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    pos = 0
    while pos < len(data):
        header = frame.unpack_header(bytes(data), pos)
        old = replace(header, version=1, crc=0)
        payload = bytes(data[pos + frame.HEADER_SIZE:pos + header.size])
        data[pos:pos + frame.HEADER_SIZE] = replace(old, crc=frame.checksum(old.pack(), payload, 1)).pack()
        pos += header.size
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("which", ["middle frame", "first frame of a segment"])
@pytest.mark.parametrize("bit", [0, 3, 40])
def test_flipped_base_offset_is_never_served_at_wrong_offsets(tmp_path, storage, version, which, bit):
    """Defect 3: the base offset was outside the CRC and readers never checked contiguity, so a flipped bit
    served records at wrong offsets and dropped others, with no error. Version 2 frames cover it by their CRC;
    version 1 frames (older segments) are caught by the contiguity check."""
    directory, log, expected = _partition(storage, tmp_path, 14, segment_bytes=1500, index_interval_bytes=0)
    if version == 1:
        for path in storage.data_files(directory):
            _as_version_1(path)
        for seg in log.segments():
            seg.rebuild_indexes(0)
    frames = storage.committed_frames(directory, log.end_offset)
    firsts = [f for i, f in enumerate(frames) if i == 0 or f[0] != frames[i - 1][0]]
    path, pos, victim, _ = firsts[1] if which == "first frame of a segment" else frames[len(frames) // 2 + 1]
    _flip(path, pos + 8 + bit // 8, 1 << (bit % 8))

    reopened = storage.open_log(directory, **KEEP)
    bad = range(victim.base_offset, victim.next_offset)
    served = {}
    for offset in range(len(expected)):
        try:
            for o, v in _values(reopened.fetch(offset, 1 << 20)):
                assert served.setdefault(o, v) == v
        except CorruptRecordError as exc:
            assert offset in bad and f"offsets {victim.base_offset}..{victim.next_offset - 1}" in str(exc)
    assert served == {o: v for o, v, _ in expected if o not in bad}  # every other record, each at its offset


def test_flipped_middle_index_entry_is_caught_and_the_index_rebuilt(tmp_path, storage, caplog):
    """Defect 4: only the last index entry was checked, so a damaged middle entry made a seek to offset 8
    return offset 10."""
    directory = str(tmp_path / "t" / "0")
    log = storage.open_log(directory, index_interval_bytes=0, **KEEP)
    for i in range(12):
        log.append(storage.make_batch([b"v%d" % i], [i]))
    seg = log.segments()[0]
    entries = seg.index.entries.copy()
    assert list(entries["rel"]) == list(range(12))
    sparse = entries[::2].copy()  # one entry every other batch, as a larger index.interval.bytes makes
    sparse[4] = (8, entries[10]["pos"] - 1)  # offset 8's entry damaged, yet the entries still increase
    with open(seg.index.path, "wb") as f:
        f.write(sparse.tobytes())
    assert seg.indexes_consistent()  # what a check of the whole file sees: nothing wrong

    reopened = storage.open_log(directory, index_interval_bytes=0, **KEEP)
    with caplog.at_level(logging.WARNING, logger="fabric.storage"):
        got = reopened.fetch(8, 1)
    assert _values(got) == [(8, b"v8")]
    assert any("rebuilt" in r.getMessage() and seg.index.path in r.getMessage() for r in caplog.records)
    assert list(np.asarray(reopened.segments()[0].index.entries["rel"])) == list(range(12))
    for offset in range(12):
        assert _values(reopened.fetch(offset, 1)) == [(offset, b"v%d" % offset)]


def test_a_crc_failure_does_not_withhold_the_good_batches_before_it(tmp_path, storage):
    """Defect 5: a fetch whose later batch failed its CRC check returned nothing at all."""
    cluster = storage.cluster(str(tmp_path), **KEEP)  # a Broker: consumers fetch through it
    log = cluster.log("events", 0)
    expected = storage.fill(log, 6)
    path, pos, victim, _ = storage.committed_frames(log.directory, log.end_offset)[3]
    _flip(path, pos + frame.HEADER_SIZE + victim.length // 2, 0x5A)
    got = cluster.fetch("events", 0, 0, 1 << 20)
    assert _values(got) == [(o, v) for o, v, _ in expected[:victim.base_offset]]
    with pytest.raises(CorruptRecordError, match=f"offsets {victim.base_offset}..{victim.next_offset - 1}"):
        cluster.fetch("events", 0, victim.base_offset, 1 << 20)
    assert _values(cluster.fetch("events", 0, victim.next_offset, 1 << 20)) == \
        [(o, v) for o, v, _ in expected[victim.next_offset:]]


@pytest.mark.parametrize("which", ["oldest", "active"])
@pytest.mark.parametrize("where", [0, 20, 24, 70])
def test_a_corrupt_schema_frame_leaves_the_partition_readable_and_writable(tmp_path, storage, which, where, caplog):
    """Defect 5: a damaged schema frame made the whole partition unreadable and unwritable; the Log knows the
    topic's storage schema, so the segment's batches still decode."""
    directory, log, expected = _partition(storage, tmp_path, 14, segment_bytes=1500)
    paths = storage.data_files(directory)
    assert len(paths) > 2
    _flip(paths[0] if which == "oldest" else paths[-1], where, 0x10)
    with caplog.at_level(logging.WARNING, logger="fabric.storage"):
        reopened = storage.open_log(directory, segment_bytes=1500, **KEEP)
        assert storage.read_all(reopened) == expected
        assert reopened.append(storage.make_batch([b"after"], [3])) == len(expected)
    assert any("schema frame is damaged" in r.getMessage() for r in caplog.records)
    assert storage.read_all(storage.open_log(directory, **KEEP)) == expected + [(len(expected), b"after", 3)]


def test_a_zero_length_last_segment_is_recovered(tmp_path, storage):
    """Defect 5: a crash right after a roll can leave the new segment's file empty (its name durable, its data
    not); that made the partition unreadable and unwritable."""
    directory, log, expected = _partition(storage, tmp_path, 5)
    hw = log.end_offset
    with open(os.path.join(directory, f"{hw:020d}.arrows"), "wb"):
        pass
    reopened = storage.open_log(directory, **KEEP)
    assert storage.read_all(reopened) == expected
    assert reopened.append(storage.make_batch([b"x"], [1])) == hw
    assert storage.read_all(storage.open_log(directory, **KEEP)) == expected + [(hw, b"x", 1)]
    storage.assert_clean(directory, hw + 1)
