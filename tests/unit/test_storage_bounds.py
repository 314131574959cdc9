"""LogBounds.holding (an offset commit's range check): an offset within the bounds this process read last is
answered with the end read last, reading no watermark file, and the start read now (another process's
delete_records or retention is seen at once); an offset past that end reads it again; a replica log, which
truncation cuts, reads its end each time."""
from __future__ import annotations

from fabric.storage.watermark import HighWatermark


def _counting_watermark_reads(log, monkeypatch) -> list[int]:
    """Count the reads of `log`'s watermark file from here on."""
    reads: list[int] = []
    read = HighWatermark.read

    def counted(self):
        if self is log.hw:
            reads.append(1)
        return read(self)
    monkeypatch.setattr(HighWatermark, "read", counted)
    return reads


def test_an_offset_within_the_bounds_read_last_reads_no_file(tmp_path, storage, monkeypatch):
    log = storage.open_log(str(tmp_path), **storage.KEEP)
    storage.fill(log, 3)  # 6 records
    assert log.bounds.now() == (0, 6)
    reads = _counting_watermark_reads(log, monkeypatch)
    for offset in (0, 3, 6):
        assert log.bounds.holding(offset) == (0, 6)
    assert reads == []
    assert log.bounds.holding(7) == (0, 6)  # past them: read again, and still past the end
    assert reads == [1]


def test_an_offset_past_them_sees_what_another_process_appended_since(tmp_path, storage):
    log = storage.open_log(str(tmp_path), **storage.KEEP)
    storage.fill(log, 3)
    assert log.bounds.now() == (0, 6)
    other = storage.open_log(str(tmp_path), **storage.KEEP)  # another process's view of the same directory
    storage.fill(other, 2)  # 3 more records
    assert log.bounds.holding(9) == (0, 9)
    assert log.bounds.holding(4) == (0, 9)  # (the bounds read for 9 are kept)


def test_a_log_start_another_process_raised_is_seen_at_once(tmp_path, storage):
    log = storage.open_log(str(tmp_path), **storage.KEEP)
    storage.fill(log, 3)
    assert log.bounds.holding(2) == (0, 6)
    other = storage.open_log(str(tmp_path), **storage.KEEP)
    assert other.delete_records(4) == 4
    assert log.bounds.holding(2) == (4, 6)  # below the new start: refused by the caller, as it must be
    retention = storage.open_log(str(tmp_path), **{**storage.KEEP, "retention_bytes": 1})
    storage.fill(retention, 1)
    assert retention.roll() and retention.enforce_retention() == 1  # the whole segment below goes
    start, _ = log.bounds.holding(5)
    assert start > 5  # the listing is read again: 5 is gone


def test_a_replica_log_cut_by_truncation_is_read_each_time(tmp_path, replicas):
    log = replicas.open(str(tmp_path))
    replicas.lead(log, 0, 4)  # 1 + 2 + 3 + 1 records
    assert log.bounds.now() == (0, 7)
    assert log.truncate_to(3)
    assert log.bounds.holding(5) == (0, 3)
