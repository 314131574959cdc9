"""Segment rolling (segment.bytes, segment.ms) and retention (retention.bytes, retention.ms)."""
from __future__ import annotations

import os

import pytest

from fabric.common.errors import OffsetOutOfRangeError
from fabric.common.waiting import wait_for
from fabric.storage.segment import disk_usage, segment_name

HOUR_US = 3600 * 1_000_000


def _append(storage, log, count, stamp=None, size=1, tag="v"):
    out = []
    for _ in range(count):
        n = log.end_offset
        values = [f"{tag}{n + i}".encode() + b"." * 30 for i in range(size)]
        ts = [storage.now_us() if stamp is None else stamp] * size
        assert log.append(storage.make_batch(values, ts)) == n
        out.extend((n + i, values[i], ts[i]) for i in range(size))
    return out


def _check_segment_layout(storage, log):
    """Each segment file is named by the base offset of its first frame, and bases chain up."""
    segs = log.segments()
    for seg, nxt in zip(segs, segs[1:] + [None], strict=True):
        frames = [h for _, h, ok in storage.scan_frames(seg.path) if not h.is_schema and ok]
        assert os.path.basename(seg.path) == segment_name(seg.base_offset) + ".arrows"
        if frames:
            assert frames[0].base_offset == seg.base_offset
            if nxt is not None:
                assert frames[-1].next_offset == nxt.base_offset


def test_roll_on_segment_bytes(tmp_path, storage):
    log = storage.open_log(str(tmp_path), segment_bytes=2048, retention_ms=-1)
    records = _append(storage, log, 40, size=2)
    segs = log.segments()
    assert len(segs) >= 5
    for seg in segs:
        assert seg.size <= 2048
    _check_segment_layout(storage, log)
    assert storage.read_all(log) == records
    assert log.start_offset == 0


def test_disk_usage_counts_a_segment_deleted_after_the_listing_as_gone(tmp_path, storage):
    """describe lists the segments, then sizes them: retention or the cleaner (another thread or process) may
    delete one in between, which must not fail the describe."""
    log = storage.open_log(str(tmp_path), segment_bytes=2048, retention_ms=-1)
    _append(storage, log, 40, size=2)
    segs = log.segments()
    os.unlink(segs[0].path)
    assert disk_usage(segs) == (len(segs) - 1, sum(s.size for s in segs[1:]))


def test_single_batch_larger_than_segment_bytes_still_lands(tmp_path, storage):
    log = storage.open_log(str(tmp_path), segment_bytes=1024, retention_ms=-1)
    small = _append(storage, log, 1)
    big = _append(storage, log, 1, size=60)  # ~2.5 KiB in one frame
    after = _append(storage, log, 1)
    assert storage.read_all(log) == small + big + after
    _check_segment_layout(storage, log)


def test_roll_on_segment_ms(tmp_path, storage):
    log = storage.open_log(str(tmp_path), segment_ms=1, retention_ms=-1)
    first = _append(storage, log, 1)
    first_ms = first[0][2] // 1000
    wait_for(lambda: storage.now_us() // 1000 - first_ms >= 2, what="segment.ms to pass")
    second = _append(storage, log, 1)
    assert [s.base_offset for s in log.segments()] == [0, 1]
    # with a long segment.ms nothing rolls
    steady = storage.open_log(str(tmp_path / "steady"), segment_ms=HOUR_US // 1000, retention_ms=-1)
    _append(storage, steady, 5)
    assert len(steady.segments()) == 1
    assert storage.read_all(log) == first + second


def test_segment_ms_is_measured_in_record_time_so_a_backfill_of_old_records_fills_segments(tmp_path, storage):
    # Kafka's rule: records stamped a week ago (a backfill, event time) do not roll a segment per append; a
    # segment rolls once its records span segment.ms
    log = storage.open_log(str(tmp_path), segment_ms=HOUR_US // 1000, retention_ms=-1)
    week_ago = storage.now_us() - 7 * 24 * HOUR_US
    old = _append(storage, log, 20, stamp=week_ago)
    assert [s.base_offset for s in log.segments()] == [0]
    later = _append(storage, log, 3, stamp=week_ago + HOUR_US)
    assert [s.base_offset for s in log.segments()] == [0, 20]
    assert storage.read_all(log) == old + later
    _check_segment_layout(storage, log)


def test_retention_bytes_deletes_oldest_whole_segments(tmp_path, storage):
    directory = str(tmp_path)
    log = storage.open_log(directory, segment_bytes=1500, retention_ms=-1)
    records = _append(storage, log, 60, size=2)
    assert len(log.segments()) > 6
    limited = storage.open_log(directory, segment_bytes=1500, retention_ms=-1, retention_bytes=4000)
    before = [s.base_offset for s in limited.segments()]
    deleted = limited.enforce_retention()
    segs = limited.segments()
    assert deleted == len(before) - len(segs) > 0
    assert [s.base_offset for s in segs] == before[deleted:]  # oldest first, whole segments
    total = sum(s.size for s in segs)
    assert total >= 4000  # nothing deleted that retention.bytes did not require
    assert total - segs[0].size < 4000  # and nothing more could go
    start = limited.start_offset
    assert start == segs[0].base_offset > 0
    assert limited.end_offset == len(records)
    assert storage.read_all(limited) == records[start:]
    for reader in (limited, storage.open_log(directory)):
        assert reader.start_offset == start
        with pytest.raises(OffsetOutOfRangeError):
            list(reader.read(start - 1, 1 << 20))
        with pytest.raises(OffsetOutOfRangeError):
            list(reader.read(0, 1 << 20))
        assert reader.offset_for_time(0) == start  # deleted offsets are never answered
    # retention also runs by itself when the log rolls
    more = _append(storage, limited, 40, size=2)
    assert limited.size_bytes() - limited.segments()[0].size < 4000
    assert storage.read_all(limited) == (records + more)[limited.start_offset:]
    assert limited.start_offset > start


def test_retention_ms_deletes_expired_segments_only(tmp_path, storage):
    directory = str(tmp_path)
    log = storage.open_log(directory, segment_bytes=1500, retention_ms=-1, segment_ms=2**62)
    old = _append(storage, log, 30, stamp=storage.now_us() - 2 * HOUR_US, size=2)
    boundary = log.end_offset
    new = _append(storage, log, 30, size=2)
    assert len(log.segments()) > 4
    timed = storage.open_log(directory, segment_bytes=1500, retention_ms=HOUR_US // 1000, segment_ms=2**62)
    assert timed.enforce_retention() > 0
    start = timed.start_offset
    assert 0 < start <= boundary
    # only segments made entirely of expired records went; the one straddling the boundary stays
    first = timed.segments()[0]
    assert first.timeindex.max_timestamp() >= new[0][2]
    assert storage.read_all(timed) == (old + new)[start:]
    with pytest.raises(OffsetOutOfRangeError):
        list(timed.read(start - 1, 1))
    assert timed.enforce_retention() == 0  # idempotent


def test_active_segment_with_unexpired_data_is_kept(tmp_path, storage):
    directory = str(tmp_path)
    log = storage.open_log(directory, retention_bytes=1, retention_ms=HOUR_US // 1000)
    records = _append(storage, log, 5)
    assert log.enforce_retention() == 0
    assert len(log.segments()) == 1 and log.start_offset == 0
    assert storage.read_all(log) == records
    # an active segment mixing expired and fresh records is not expired either
    mixed = storage.open_log(str(tmp_path / "mixed"), retention_ms=HOUR_US // 1000, segment_ms=2**62)
    recs = _append(storage, mixed, 3, stamp=storage.now_us() - 3 * HOUR_US) + _append(storage, mixed, 2)
    assert mixed.enforce_retention() == 0
    assert storage.read_all(mixed) == recs


def test_fully_expired_log_empties_but_keeps_its_offsets(tmp_path, storage):
    # expired records written with old CreateTime into the single, active segment
    log2 = storage.open_log(str(tmp_path / "old"), retention_ms=-1, segment_ms=2**62)
    _append(storage, log2, 4, stamp=storage.now_us() - 5 * HOUR_US)
    expiring = storage.open_log(str(tmp_path / "old"), retention_ms=HOUR_US // 1000, segment_ms=2**62)
    assert expiring.enforce_retention() == 1
    assert expiring.start_offset == expiring.end_offset == 4
    assert [s.base_offset for s in expiring.segments()] == [4]
    assert list(expiring.read(4, 1 << 20)) == []
    with pytest.raises(OffsetOutOfRangeError):
        list(expiring.read(3, 1 << 20))
    assert expiring.offset_for_time(0) is None
    assert expiring.append(storage.make_batch([b"fresh"])) == 4
    assert [v for _, v, _ in storage.read_all(expiring)] == [b"fresh"]
    assert len(storage.data_files(str(tmp_path / "old"))) == 1
