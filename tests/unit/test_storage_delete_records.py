"""Log.delete_records (Kafka's DeleteRecords): the log start offset moves up, reads below it are refused at once,
whole segments below it are deleted, and the start survives a new process, retention and the cleaner."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from fabric.common.errors import OffsetOutOfRangeError
from fabric.storage import log_start

SMALL = dict(segment_bytes=1500, index_interval_bytes=300, retention_ms=-1, segment_ms=2**62)


def _keyed(storage, pairs):
    batch = storage.make_batch([v.encode() for _, v in pairs])
    return batch.set_column(1, "key", pa.array([k.encode() for k, _ in pairs], pa.binary()))


def _bases(log):
    return [s.base_offset for s in log.segments()]


def test_delete_inside_a_segment_hides_the_records_below(tmp_path, storage):
    log = storage.open_log(str(tmp_path), **storage.KEEP)
    expected = storage.fill(log, 6)  # 12 records in one segment
    assert log.delete_records(5) == 5
    assert log.start_offset == 5
    assert _bases(log) == [0]  # the segment holds offsets from 5 on: it stays
    assert storage.read_all(log) == [r for r in expected if r[0] >= 5]
    for below in (0, 4):
        with pytest.raises(OffsetOutOfRangeError, match=r"range \[5, 12\]"):
            log.fetch(below, 1 << 20)
        with pytest.raises(OffsetOutOfRangeError):
            log.offset_after_records(below, 1)
    assert log.offset_after_records(5, 2) == 7
    assert log.offset_for_time(0) == 5  # the earliest record a reader can get


def test_a_time_lookup_reads_on_from_a_start_past_the_frame_its_index_names(tmp_path, storage):
    """The time index names the first frame reaching a time; where that frame lies below the log start, the record
    that reaches it later in the segment is the answer, not the end of the search."""
    log = storage.open_log(str(tmp_path), **storage.KEEP)
    log.append(storage.make_batch([b"a", b"b"], [10, 100]))  # offsets 0-1: the index's entry for 100
    log.append(storage.make_batch([b"c"], [50]))
    log.append(storage.make_batch([b"d"], [100]))  # offset 3
    log.append(storage.make_batch([b"e"], [300]))
    log.delete_records(2)
    assert [log.offset_for_time(t) for t in (0, 60, 100, 101, 300, 301)] == [2, 3, 3, 4, 4, None]


def test_delete_across_segments_removes_the_whole_ones_below(tmp_path, storage):
    log = storage.open_log(str(tmp_path), **SMALL)
    expected = storage.fill(log, 60)
    bases = _bases(log)
    assert len(bases) >= 4
    target = bases[2] + 1  # inside the third segment
    assert log.delete_records(target) == target
    assert _bases(log) == bases[2:]
    assert log.start_offset == target
    assert storage.read_all(log) == [r for r in expected if r[0] >= target]
    assert log.delete_records(bases[1]) == target  # below the start: nothing changes, the start is returned
    assert _bases(log) == bases[2:]


def test_minus_one_deletes_everything_up_to_the_high_watermark(tmp_path, storage):
    log = storage.open_log(str(tmp_path), **SMALL)
    storage.fill(log, 30)
    end = log.end_offset
    assert log.delete_records(-1) == end
    assert log.start_offset == end and _bases(log) == [end]  # the active segment rolled and went too
    assert storage.read_all(log) == []
    assert log.append(storage.make_batch([b"after"])) == end
    assert [v for _, v, _ in storage.read_all(log)] == [b"after"]


def test_an_offset_past_the_high_watermark_is_refused(tmp_path, storage):
    log = storage.open_log(str(tmp_path), **storage.KEEP)
    storage.fill(log, 3)
    for bad in (log.end_offset + 1, -2):
        with pytest.raises(OffsetOutOfRangeError, match=r"from 0 to 6, or -1 for the high watermark"):
            log.delete_records(bad)
    assert log.start_offset == 0
    assert not os.path.exists(os.path.join(str(tmp_path), log_start.CHECKPOINT))


def test_a_new_process_keeps_the_log_start(tmp_path, storage):
    log = storage.open_log(str(tmp_path), **SMALL)
    expected = storage.fill(log, 40)
    target = _bases(log)[1] + 2
    log.delete_records(target)
    again = storage.open_log(str(tmp_path), **SMALL)  # another Log object reads it from the files, as a restart
    assert again.start_offset == target
    assert storage.read_all(again) == [r for r in expected if r[0] >= target]
    with pytest.raises(OffsetOutOfRangeError):
        again.fetch(target - 1, 1 << 20)


def test_a_damaged_checkpoint_falls_back_to_the_first_segment(tmp_path, storage, caplog):
    log = storage.open_log(str(tmp_path), **storage.KEEP)
    storage.fill(log, 4)
    log.delete_records(3)
    with open(os.path.join(str(tmp_path), log_start.CHECKPOINT), "r+b") as f:
        f.write(b"9")  # the version digit: the checksum no longer matches
    assert storage.open_log(str(tmp_path), **storage.KEEP).start_offset == 0
    assert "log-start-offset checkpoint" in caplog.text and "damaged" in caplog.text


def test_retention_deletes_segments_left_below_the_log_start(tmp_path, storage):
    """What a delete_records killed after its checkpoint leaves (the segments below it) goes with the next
    retention pass, whatever the cleanup policy."""
    log = storage.open_log(str(tmp_path), cleanup_policy="compact", **SMALL)
    for i in range(30):
        log.append(_keyed(storage, [(f"k{i}a", f"v{i}"), (f"k{i}b", f"v{i}")]))
    bases = _bases(log)
    target = bases[2]
    log_start.write(str(tmp_path), target)  # the checkpoint alone, as a crash before the deletion leaves it
    assert log.start_offset == target and _bases(log) == bases
    assert log.enforce_retention() == 2
    assert _bases(log) == bases[2:]
    assert log.start_offset == target


def test_retention_after_delete_records(tmp_path, storage):
    """retention.bytes deletes past the log start: the start is then the first segment's base again."""
    config = dict(SMALL, retention_bytes=4000)
    log = storage.open_log(str(tmp_path), **dict(config, retention_bytes=-1))
    expected = storage.fill(log, 60)
    target = _bases(log)[1] + 1
    log.delete_records(target)
    bounded = storage.open_log(str(tmp_path), **config)
    assert bounded.enforce_retention() > 0
    first = _bases(bounded)[0]
    assert first > target and bounded.start_offset == first
    assert storage.read_all(bounded) == [r for r in expected if r[0] >= first]


def test_the_cleaner_keeps_the_log_start(tmp_path, storage):
    log = storage.open_log(str(tmp_path), cleanup_policy="compact,delete", min_cleanable_dirty_ratio="0.01",
                           **SMALL)
    for r in range(10):
        log.append(_keyed(storage, [(f"k{k}", f"r{r}-{k}") for k in range(3)]))
    target = _bases(log)[1] + 1
    log.delete_records(target)
    report = log.clean(force=True)
    assert report.cleaned
    assert log.start_offset == target
    records = storage.keyed_records(log)
    assert records and all(offset >= target for offset, _, _ in records)
    assert {k: v for _, k, v in records} == {f"k{k}".encode(): f"r9-{k}".encode() for k in range(3)}
    with pytest.raises(OffsetOutOfRangeError):
        log.fetch(target - 1, 1 << 20)
