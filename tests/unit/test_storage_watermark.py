"""The high-watermark file: its self-checking format, the older 8-byte one, and recovery of a watermark that is
lost or damaged (from the frames) or that trails them (a crash before the acknowledgement)."""
from __future__ import annotations

import errno
import logging
import os
import struct

import pytest

from fabric.common.errors import StorageError
from fabric.storage import watermark
from fabric.storage.watermark import HighWatermark, WatermarkState

KEEP = dict(retention_ms=-1, segment_ms=2**62)


def test_format_round_trips_and_is_checked(tmp_path):
    hw = HighWatermark(str(tmp_path / "high-watermark"))
    assert hw.read().state is WatermarkState.MISSING
    hw.write(1234)
    raw = (tmp_path / "high-watermark").read_bytes()
    assert len(raw) == watermark.SIZE == 16 and raw[:4] == watermark.MAGIC
    assert struct.unpack("<q", raw[4:12])[0] == 1234
    assert hw.read().state is WatermarkState.VALID and hw.read().value == 1234
    for position in range(16):
        for bit in (0x01, 0x80):
            damaged = bytearray(raw)
            damaged[position] ^= bit
            assert watermark.decode(bytes(damaged)).state is WatermarkState.CORRUPT, (position, bit)
    assert watermark.decode(raw[:5]).state is WatermarkState.SHORT
    assert watermark.decode(b"").state is WatermarkState.SHORT
    assert watermark.decode(raw + b"x").state is WatermarkState.CORRUPT
    assert watermark.decode(struct.pack("<q", 7)) == watermark.WatermarkReading(
        WatermarkState.LEGACY, 7, struct.pack("<q", 7))
    assert watermark.decode(struct.pack("<q", -7)).state is WatermarkState.NEGATIVE
    assert not watermark.decode(struct.pack("<q", 7)).trusted  # checked against the frames first


def test_write_replaces_a_longer_damaged_file(tmp_path):
    path = tmp_path / "high-watermark"
    path.write_bytes(b"x" * 40)
    HighWatermark(str(path)).write(5)
    assert path.read_bytes() == watermark.encode(5)


def _partition(storage, tmp_path):
    directory = str(tmp_path / "t" / "0")
    log = storage.open_log(directory, segment_bytes=1500, **KEEP)
    expected = storage.fill(log, 12)
    assert len(log.segments()) > 1
    return directory, expected


DAMAGE = {
    "missing": None,
    "empty": b"",
    "too high (older format)": struct.pack("<q", 1000),
    "too low (older format)": struct.pack("<q", 2),
    "negative (older format)": struct.pack("<q", -7),
    "short": watermark.encode(3)[:9],
    "garbage": b"not a watermark at all",
    "checksum fails": watermark.encode(5)[:12] + b"\0\0\0\0",
    "too high (checksum holds, frames lost)": watermark.encode(1000),
    "below the log start (checksum holds)": None,  # set below: retention moved the start past it
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_lost_or_damaged_watermark_is_recovered_from_the_frames(tmp_path, storage, damage, caplog):
    """Defect 1: a lost watermark made the next append start again at offset 0 (the partition was destroyed);
    an empty one crashed every command; too high left a gap, too low cut visible records, negative named a
    segment -0000000000000000007."""
    directory, expected = _partition(storage, tmp_path)
    hw_path = os.path.join(directory, "high-watermark")
    end = len(expected)
    if damage == "missing":
        os.unlink(hw_path)
    elif damage == "below the log start (checksum holds)":
        retained = storage.open_log(directory, segment_bytes=1500, retention_ms=-1, retention_bytes=1)
        assert retained.enforce_retention() > 0
        expected = expected[retained.start_offset:]
        with open(hw_path, "wb") as f:
            f.write(watermark.encode(retained.start_offset - 1))
    else:
        with open(hw_path, "wb") as f:
            f.write(DAMAGE[damage])

    with caplog.at_level(logging.WARNING, logger="fabric.storage"):
        reopened = storage.open_log(directory, segment_bytes=1500, **KEEP)
        assert reopened.end_offset == end
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("t-0" in m and f"end at offset {end}" in m for m in warnings), warnings
    assert storage.read_all(reopened) == expected
    assert reopened.append(storage.make_batch([b"next"], [9])) == end
    assert storage.read_all(storage.open_log(directory, **KEEP)) == expected + [(end, b"next", 9)]
    assert HighWatermark(hw_path).read() == watermark.WatermarkReading(WatermarkState.VALID, end + 1,
                                                                       watermark.encode(end + 1))
    assert not [n for n in os.listdir(directory) if n.startswith("-")]
    storage.assert_clean(directory, end + 1)


def test_a_valid_watermark_behind_the_frames_cuts_them(tmp_path, storage, caplog):
    """A checksum-valid watermark below whole frames is the crash between writing a frame and acknowledging
    it: those frames were never acknowledged, and are cut (the report names them)."""
    directory, expected = _partition(storage, tmp_path)
    with open(os.path.join(directory, "high-watermark"), "wb") as f:
        f.write(watermark.encode(expected[-3][0]))  # the last batch (3 records) was never acknowledged
    with caplog.at_level(logging.WARNING, logger="fabric.storage"):
        reopened = storage.open_log(directory, segment_bytes=1500, **KEEP)
        reopened.sync_tail_locked()
    report = reopened.last_recovery
    assert report is not None and report.end_offset == len(expected) - 3
    assert [(offset) for _, _, offset in report.truncated] == [len(expected) - 3]
    assert any(f"offsets {len(expected) - 3}..{len(expected) - 1}" in r.getMessage() for r in caplog.records)
    assert storage.read_all(reopened) == expected[:-3]
    assert reopened.append(storage.make_batch([b"x"], [1])) == len(expected) - 3


def test_an_older_format_watermark_that_agrees_is_upgraded_quietly(tmp_path, storage, caplog):
    directory, expected = _partition(storage, tmp_path)
    hw_path = os.path.join(directory, "high-watermark")
    with open(hw_path, "wb") as f:
        f.write(struct.pack("<q", len(expected)))
    with caplog.at_level(logging.WARNING, logger="fabric.storage"):
        reopened = storage.open_log(directory, **KEEP)
        assert reopened.end_offset == len(expected)
    assert not caplog.records
    assert os.path.getsize(hw_path) == 16
    assert storage.read_all(reopened) == expected


def test_a_watermark_write_that_fails_leaves_no_second_frame_at_its_offset(tmp_path, storage, monkeypatch):
    """The frame is written, its watermark is not (a disk filling up between the two): the append fails, and the
    same writer's next append recovers the tail from the files and writes at the unacknowledged frame's offset,
    so every record reads back once, at the offset its append returned."""
    log = storage.open_log(str(tmp_path / "t" / "0"), **KEEP)
    assert log.append(storage.make_batch([b"a", b"b"], [1, 1])) == 0
    real_write = HighWatermark.write

    def full_disk(self, value: int, files: object = None) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", self.path)

    monkeypatch.setattr(HighWatermark, "write", full_disk)
    with pytest.raises(StorageError, match="cannot write partition .*the disk is full"):
        log.append(storage.make_batch([b"lost"], [1]))
    monkeypatch.setattr(HighWatermark, "write", real_write)
    assert log.append(storage.make_batch([b"c"], [1])) == 2
    assert log.append(storage.make_batch([b"d"], [1])) == 3
    assert [(o, v) for o, v, _ in storage.read_all(log)] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert [(o, v) for o, v, _ in storage.read_all(storage.open_log(log.directory, **KEEP))] == \
        [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_a_log_range_reads_the_watermark_once_and_the_next_one_sees_other_writers(tmp_path, storage, count_calls):
    directory, _ = _partition(storage, tmp_path)
    reader, writer = storage.open_log(directory, **KEEP), storage.open_log(directory, **KEEP)  # as two processes
    reader.end_offset  # noqa: B018 (recovered on first use)
    reads, listings = count_calls(reader.hw, "read"), count_calls(reader, "segments")
    start, end = reader.bounds.now()
    assert (reads(), listings()) == (1, 1)
    assert (start, end) == (writer.start_offset, writer.end_offset) == (0, writer.end_offset) and end > 0
    storage.fill(writer, 2, start=end)
    writer.delete_records(3)
    now = reader.log_range()
    assert (now.start, now.end) == (3, writer.end_offset) and now.end > end  # nothing kept from the last request
    assert [s.base_offset for s in now.segments] == [s.base_offset for s in writer.segments()]

