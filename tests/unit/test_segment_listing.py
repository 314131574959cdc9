"""A partition directory's segment listing (fabric/storage/segment_listing.py): listed again whenever a name was
added or removed since, kept while the directory's time says nothing changed, and never kept when it was made
too soon after a change for the time to tell."""
from __future__ import annotations

import os
import time

import pytest

from fabric.storage import segment_listing
from fabric.storage.segment_listing import SegmentListing


@pytest.fixture
def listdir_calls(monkeypatch, tmp_path) -> list[str]:
    """The listings of the test's directory (those of other directories, by a background thread an earlier test
    of this process left running, say, are not the test's)."""
    calls: list[str] = []
    real = os.listdir

    def counted(path):
        if os.fspath(path) == str(tmp_path):
            calls.append(path)
        return real(path)
    monkeypatch.setattr(segment_listing.os, "listdir", counted)
    return calls


def _age(directory) -> None:
    """Set the directory's time well in the past, as if nothing had changed there for a while."""
    past = time.time() - 60
    os.utime(directory, (past, past))


def test_a_settled_directory_is_listed_once_and_again_after_each_change(tmp_path, listdir_calls) -> None:
    for name in ("00000000000000000000.arrows", "00000000000000000100.arrows", "00000000000000000100.index",
                 "high-watermark", "junk.arrows"):
        (tmp_path / name).write_bytes(b"")
    _age(tmp_path)
    listing = SegmentListing(str(tmp_path))
    assert listing.bases() == listing.bases() == (0, 100)
    assert len(listdir_calls) == 1
    (tmp_path / "00000000000000000250.arrows").write_bytes(b"")  # a roll
    assert listing.bases() == (0, 100, 250)
    (tmp_path / "00000000000000000000.arrows").unlink()  # retention, within the same clock tick
    assert listing.bases() == (100, 250)
    assert len(listdir_calls) == 3  # both changes seen, each listed again
    _age(tmp_path)
    assert listing.bases() == listing.bases() == (100, 250) and len(listdir_calls) == 4  # settled: kept
    os.rename(tmp_path / "00000000000000000100.arrows", tmp_path / "00000000000000000120.arrows")
    assert listing.bases() == (120, 250)


def test_a_listing_made_right_after_a_change_is_not_kept(tmp_path, listdir_calls) -> None:
    (tmp_path / "00000000000000000000.arrows").write_bytes(b"")
    listing = SegmentListing(str(tmp_path))
    assert listing.bases() == listing.bases() == (0,)
    assert len(listdir_calls) == 2  # the directory's time may not yet show a change made in the same tick


def test_a_directory_gone_is_an_error(tmp_path) -> None:
    listing = SegmentListing(str(tmp_path / "gone"))
    with pytest.raises(FileNotFoundError):
        listing.bases()


def test_a_logs_segment_list_is_made_once_per_listing(tmp_path, replicas) -> None:
    """Log.segments gives the same list while the listing is unchanged (no pass over the segments per read), and
    a new one after a roll or once the cleaner's swap made it forget segments; reads find each offset in it."""
    log = replicas.open(str(tmp_path))
    replicas.lead(log, 0, 30)  # one or two frames per segment
    _age(tmp_path)
    segs = log.segments()
    assert len(segs) > 10 and log.segments() is segs
    for offset in range(log.end_offset):
        first = log.fetch(offset, 1)[0]
        assert first.offset == offset and first.batch.num_rows >= 1
    log.forget_segments([segs[0].base_offset])
    again = log.segments()
    assert again is not segs and again[0] is not segs[0] and again[1:] == segs[1:]
    replicas.lead(log, 0, 5)
    assert log.segments()[-1].base_offset > again[-1].base_offset


def test_the_racy_window_follows_the_filesystems_stamps(tmp_path, listdir_calls) -> None:
    """A directory time with a fraction of a second comes from a filesystem that stamps the kernel's coarse clock:
    a listing a few ticks after it is kept. A time of whole seconds may be all the filesystem keeps: a second."""
    assert segment_listing.racy_ns(1_700_000_000_123_456_789) == segment_listing.FINE_RACY_NS <= 50_000_000
    assert segment_listing.racy_ns(1_700_000_000_000_000_000) == segment_listing.RACY_NS >= 1_000_000_000
    (tmp_path / "00000000000000000000.arrows").write_bytes(b"")
    stamp = time.time_ns() - 10 * segment_listing.FINE_RACY_NS
    stamp += 0 if stamp % 1_000_000_000 else 1
    os.utime(tmp_path, ns=(stamp, stamp))
    listing = SegmentListing(str(tmp_path))
    assert listing.bases() == listing.bases() == (0,) and len(listdir_calls) == 1


def _values(tag: str, count: int) -> list[bytes]:
    return [f"{tag}-{i}".encode().ljust(200, b".") for i in range(count)]


def _pin(directory, stamp_ns: int) -> None:
    """Give the directory back a time it had: what a clock stepped back, or a filesystem stamping whole seconds,
    leaves after a change (the listing's only sign of one)."""
    os.utime(directory, ns=(stamp_ns, stamp_ns))


def test_a_reader_finds_a_segment_its_kept_listing_misses(tmp_path, storage) -> None:
    """Another process rolled the log twice, and the directory's time is the one a reader's kept listing was made
    at: a read, a follower's frames and a count of records that stop short of the log end list the directory
    again, so the records are not hidden until the next change there."""
    writer = storage.open_log(str(tmp_path), segment_bytes=2000, **storage.KEEP)
    writer.append(storage.make_batch(_values("a", 3)))
    _age(tmp_path)
    stamp = os.stat(tmp_path).st_mtime_ns
    readers = [storage.open_log(str(tmp_path), segment_bytes=2000, **storage.KEEP) for _ in range(3)]
    for reader in readers:
        assert reader.end_offset == 3 and len(reader.segments()) == 1  # recovered, and the listing kept
    while len(writer.segments()) < 3:
        writer.append(storage.make_batch(_values("b", 3)))
    end = writer.end_offset
    _pin(tmp_path, stamp)
    assert all(len(reader.segments()) == 1 and reader.end_offset == end for reader in readers)  # stale, as set up
    reading, copying, counting = readers
    assert [offset for offset, _, _ in storage.read_all(reading)] == list(range(end))
    assert copying.read_frames(3, 1 << 20).size > 0
    assert counting.offset_after_records(0, end - 1) == end - 1
    assert all(len(reader.segments()) == 3 for reader in readers)


def test_a_writer_after_anothers_roll_lists_the_directory_again(tmp_path, storage) -> None:
    """A writer taking the partition after another process rolled it brings its tail up to date from a fresh
    listing, whatever the directory's time says: with the kept one it would recover the log as ending in the old
    segment and write over offsets already written."""
    first = storage.open_log(str(tmp_path), segment_bytes=2000, **storage.KEEP)
    second = storage.open_log(str(tmp_path), segment_bytes=2000, **storage.KEEP)
    second.append(storage.make_batch(_values("a", 3)))
    _age(tmp_path)
    stamp = os.stat(tmp_path).st_mtime_ns
    assert len(second.segments()) == 1
    while len(first.segments()) < 3:
        first.append(storage.make_batch(_values("b", 3)))
    written = first.end_offset
    _pin(tmp_path, stamp)
    assert second.append(storage.make_batch(_values("c", 2))) == written
    got = storage.read_all(storage.open_log(str(tmp_path), **storage.KEEP))
    assert [offset for offset, _, _ in got] == list(range(written + 2))
    assert [value[:3] for _, value, _ in got[-3:]] == [b"b-2", b"c-0", b"c-1"]
