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
def listdir_calls(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = os.listdir

    def counted(path):
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
