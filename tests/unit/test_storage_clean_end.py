"""A replica log's clean end (fabric/storage/clean_end.py): reopened after its process closed it, its recovery
walks no frame to find where they end; anything written, cut or damaged since is seen, and the frames are walked
as before."""
from __future__ import annotations

import pytest

from fabric.storage import clean_end
from fabric.storage.recovery import Recovery


@pytest.fixture
def walks(monkeypatch) -> list[int]:
    """One entry per walk of a last segment's frames to find their end (Recovery._frames_end)."""
    done: list[int] = []
    frames_end = Recovery._frames_end

    def counted(segs):
        done.append(len(segs))
        return frames_end(segs)
    monkeypatch.setattr(Recovery, "_frames_end", staticmethod(counted))
    return done


def _filled(replicas, directory: str, batches: int = 30):
    plog = replicas.open(directory)
    replicas.lead(plog, 0, batches)
    return plog


def test_a_replica_log_closed_cleanly_is_reopened_walking_no_frame(tmp_path, replicas, walks) -> None:
    plog = _filled(replicas, str(tmp_path / "p"))
    end = plog.end_offset
    plog.closing()
    reopened = replicas.open(str(tmp_path / "p"))
    reopened.sync_tail_locked()  # (its recovery, as its first write or read does it)
    assert reopened.end_offset == end and walks == []
    assert replicas.lead(reopened, 0, 1) == [end]  # appends go on at its end


@pytest.mark.parametrize("change", ["frames appended since", "a torn tail written since", "its last frame damaged",
                                    "the record damaged"])
def test_a_clean_end_the_segment_no_longer_matches_is_not_trusted(tmp_path, replicas, walks, change) -> None:
    plog = _filled(replicas, str(tmp_path / "p"))
    plog.closing()
    end, segment = plog.end_offset, plog.segments()[-1]
    if change == "frames appended since":
        replicas.lead(plog, 0, 2)
        end = plog.end_offset
    elif change == "a torn tail written since":
        with open(segment.path, "ab") as f:
            f.write(b"FBAT" + bytes(20))
    elif change == "its last frame damaged":
        found = plog._last_frame(end)
        assert found is not None
        with open(segment.path, "r+b") as f:
            f.seek(found[1].position + 20)  # its CRC field
            f.write(b"\xff\xff\xff\xff")
    else:
        with open(tmp_path / "p" / clean_end.FILE, "r+b") as f:
            f.seek(9)
            f.write(b"\x7f")
    reopened = replicas.open(str(tmp_path / "p"))
    reopened.sync_tail_locked()
    assert walks, f"{change}: the frames were not walked"
    if change != "its last frame damaged":
        assert reopened.end_offset == end
    else:  # (its CRC fails: a replica log ends before it, and the follower fetches it again)
        assert reopened.end_offset < end
