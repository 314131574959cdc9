"""Walks of every frame header hand the interpreter lock over (fabric/storage/pacing.py): a producer-state scan,
the cleaner's walks (of the producers, and of the records), a transaction index and a segment's indexes rebuilt
call `time.sleep(0)` as they go."""
from __future__ import annotations

import os
import time

import pytest

from fabric.common.types import ProducerBatch
from fabric.storage import cleaner, pacing, producer_snapshot
from fabric.storage.producer_state_load import Scan
from tests.unit.test_storage_compaction import open_log, written


@pytest.fixture
def hand_overs(monkeypatch) -> list[float]:
    """Each `time.sleep(0)` made from now on (every paced item hands over: HAND_OVER_S is 0)."""
    calls: list[float] = []
    sleep = time.sleep
    monkeypatch.setattr(pacing, "HAND_OVER_S", 0.0)
    monkeypatch.setattr(time, "sleep", lambda s: calls.append(s) if s == 0 else sleep(s))
    return calls


def test_a_paced_pass_hands_over_only_once_the_stretch_is_spent(monkeypatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", calls.append)
    assert list(pacing.paced(range(1000))) == list(range(1000))
    fast = len(calls)  # a thousand items of nothing: well under a millisecond, a few hand-overs at most

    def slow(n: int):
        for i in range(n):
            end = time.perf_counter() + pacing.HAND_OVER_S
            while time.perf_counter() < end:
                pass
            yield i

    calls.clear()
    assert list(pacing.paced(slow(20))) == list(range(20))
    assert fast <= 5 and len(calls) >= 19, (fast, len(calls))


def test_a_cleaner_pass_hands_over_as_it_walks_the_headers(tmp_path, storage, hand_overs) -> None:
    plog = open_log(storage, str(tmp_path / "p"))
    written(storage, plog, rounds=12, keys=7, ts_ms=1_000)
    frames = sum(1 for _ in plog.headers(plog.end_offset))
    report = plog.clean(force=True)
    assert report.cleaned, report.describe()
    assert len(hand_overs) >= frames, (len(hand_overs), frames)  # each header walked once


def test_a_cleaner_pass_paces_its_walks_of_the_records(tmp_path, storage, monkeypatch) -> None:
    paced: list[int] = []

    class Counting(pacing.Pacer):
        def __call__(self) -> None:
            paced.append(1)
            super().__call__()
    monkeypatch.setattr(cleaner, "Pacer", Counting)
    plog = open_log(storage, str(tmp_path / "p"))
    written(storage, plog, rounds=12, keys=7, ts_ms=1_000)
    frames = sum(1 for _ in plog.headers(plog.end_offset))
    assert plog.clean(force=True).cleaned
    assert len(paced) == 2 * frames  # each frame's records walked twice: the keys' latest offsets, then the copy


def test_a_transaction_index_rebuilt_hands_over_as_it_walks(tmp_path, storage, hand_overs) -> None:
    plog = storage.open_log(str(tmp_path / "p"))
    for _ in range(30):
        plog.append(storage.make_batch([b"x"]))
    reopened = storage.open_log(str(tmp_path / "p"))  # (its transactions not loaded yet: the frames are walked)
    hand_overs.clear()
    assert reopened.last_stable_offset(reopened.end_offset) == 30
    assert len(hand_overs) >= 30


def test_a_segments_indexes_rebuilt_hand_over_as_they_walk(tmp_path, storage, hand_overs) -> None:
    plog = storage.open_log(str(tmp_path / "p"))
    for _ in range(30):
        plog.append(storage.make_batch([b"x"]))
    seg = plog.segments()[-1]
    hand_overs.clear()
    seg.rebuild_indexes(plog.config["index.interval.bytes"])
    assert len(hand_overs) >= 30


def test_a_producer_state_scan_hands_over_as_it_reads(tmp_path, replicas, storage, hand_overs) -> None:
    plog = replicas.open(str(tmp_path / "p"), segment_bytes=1 << 20)  # (one segment: all 30 frames scanned)
    for seq in range(30):
        plog.append(storage.make_batch([b"x"]), leader_epoch=0, producer=ProducerBatch(1, 0, seq))
    os.remove(producer_snapshot.path_of(plog.directory))  # (none to start from: the frames are walked)
    scan = Scan(replicas.open(str(tmp_path / "p"), segment_bytes=1 << 20))
    hand_overs.clear()
    scan.read()
    assert len(hand_overs) >= 30


@pytest.mark.parametrize("walk", ["headers", "transactions"])
def test_a_walk_over_many_small_segments_is_paced_across_them(tmp_path, storage, monkeypatch, walk) -> None:
    plog = storage.open_log(str(tmp_path / "p"), segment_bytes=1200, **storage.KEEP)
    for i in range(30):  # 1,200-byte segments: a frame or two each
        plog.append(storage.make_batch([b"%d" % i * 600]))
    assert len(plog.segments()) >= 15
    reopened = storage.open_log(str(tmp_path / "p"), segment_bytes=1200, **storage.KEEP)
    ticks = iter(range(10**6))
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) * pacing.HAND_OVER_S / 2)  # half a stretch a call
    calls: list[float] = []
    monkeypatch.setattr(time, "sleep", calls.append)
    if walk == "headers":
        assert len(list(reopened.headers(reopened.end_offset))) == 30
    else:  # (no segment has a transaction index yet: every frame is walked)
        assert reopened.last_stable_offset(reopened.end_offset) == 30
    assert len(calls) >= 8, len(calls)  # about one hand-over in three frames, not one per segment's first
