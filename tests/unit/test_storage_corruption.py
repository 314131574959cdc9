"""The corruption suite: a bit flipped in, or the file cut at, every field of a frame header, the payload, each
index, the watermark and the pending-publish marker of a partition of several segments. After each:

- every read returns exactly the acknowledged (offset, value) pairs, or raises CorruptRecordError covering the
  offset read, which must lie in the damaged range (OffsetOutOfRangeError past a recovered end, when the tail
  of the log was cut away);
- an append afterwards lands at the end and loses no acknowledged, undamaged record;
- nothing but FabricError types ever escapes.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common.errors import CorruptRecordError, FabricError, OffsetOutOfRangeError
from fabric.storage import batch_encoding, frame
from fabric.storage.marker import PENDING
from fabric.storage.scan import CorruptRangeError

CONFIG = dict(segment_bytes=1500, index_interval_bytes=400, retention_ms=-1, segment_ms=2**62)
SUITE = settings(max_examples=4, deadline=None, derandomize=True)
FIELDS = {  # byte ranges of the header's fields (see fabric.storage.frame)
    "magic": (0, 4), "length": (4, 8), "base offset": (8, 16), "leader epoch": (16, 20), "crc": (20, 24),
    "version": (24, 25), "attributes": (25, 26), "reserved": (26, 28), "record count": (28, 32),
    "first timestamp": (32, 40), "max timestamp": (40, 48), "producer id": (48, 56), "producer epoch": (56, 58),
    "base sequence": (58, 62), "reserved tail": (62, 64),
}
SITES = [f"header {name}" for name in FIELDS] + ["payload", "offset index", "time index", "watermark", "marker"]


_TEMPLATES: dict[bool, tuple[str, dict[int, bytes]]] = {}


def _template(storage, factory, with_publish: bool) -> tuple[str, dict[int, bytes]]:
    """A copy of a partition of several segments (with_publish: and a dead, uncommitted publish past the
    watermark) in a new directory of `factory` (tmp_path_factory), and its acknowledged values by offset. Built
    once per session, then copied."""
    if with_publish not in _TEMPLATES:
        source = os.path.join(factory.mktemp("template"), "t", "0")
        log = storage.open_log(source, **CONFIG)
        records = storage.fill(log, 16, width=4)
        assert len(log.segments()) >= 4
        if with_publish:
            hw = log.end_offset
            with log.lock:
                log.begin_publish("txn-dead", hw + 6)
                for base in (hw, hw + 3):
                    template, payload = batch_encoding.encode(storage.make_batch([b"dead-%d" % base] * 3, [9] * 3))
                    log.write_frame(frame.seal(template.rebased(base), payload), payload)
        os.unlink(os.path.join(source, ".lock"))
        _TEMPLATES[with_publish] = source, {o: v for o, v, _ in records}
    source, acked = _TEMPLATES[with_publish]
    directory = os.path.join(factory.mktemp("corrupt"), "t", "0")
    shutil.copytree(source, directory)
    return directory, acked


def _segments(storage, directory: str) -> list[tuple[str, int, list[tuple[int, frame.FrameHeader]]]]:
    """(path, base offset, [(position, header)]) of each segment, schema frame first."""
    return [(path, int(os.path.basename(path)[:20]), [(pos, h) for pos, h, _ in storage.scan_frames(path)])
            for path in storage.data_files(directory)]


def _damage(storage, directory: str, site: str, choice, cut: bool, hw: int) -> set[int]:
    """Damage `site`; returns the offsets allowed to be unreadable afterwards."""
    segs = _segments(storage, directory)
    if site in ("offset index", "time index", "watermark", "marker"):
        path = {"watermark": os.path.join(directory, "high-watermark"),
                "marker": os.path.join(directory, PENDING)}.get(site)
        if path is None:
            seg_path = segs[choice(len(segs))][0]
            path = seg_path[:-len(".arrows")] + (".index" if site == "offset index" else ".timeindex")
        _hit(path, choice(os.path.getsize(path)), choice(8), cut)
        return set()
    s = choice(len(segs))
    path, base, frames = segs[s]
    end = segs[s + 1][1] if s + 1 < len(segs) else hw
    data_frames = [(pos, h) for pos, h in frames if not h.is_schema]
    if site == "payload":
        pos, header = data_frames[choice(len(data_frames))]
        _hit(path, pos + frame.HEADER_SIZE + choice(header.length), choice(8), cut)
    else:
        lo, hi = FIELDS[site[len("header "):]]
        k = choice(len(frames))  # the schema frame too
        pos, header = frames[k]
        _hit(path, pos + lo + choice(hi - lo), choice(8), cut)
    if cut:  # everything from the cut frame to the segment's end is gone
        return set(range(header.base_offset, end))
    return set() if header.is_schema else set(range(header.base_offset, header.next_offset))


def _hit(path: str, byte: int, bit: int, cut: bool) -> None:
    with open(path, "r+b") as f:
        if cut:
            f.truncate(byte)
            return
        f.seek(byte)
        old = f.read(1)[0]
        f.seek(byte)
        f.write(bytes([old ^ (1 << bit)]))


def _read_one(log, offset: int):
    """(offset, value) pairs of fetch(offset, 1), or the FabricError it raised (anything else fails the test)."""
    try:
        return [(f.offset + i, v) for f in log.fetch(offset, 1) for i, v in enumerate(f.batch.column(3).to_pylist())]
    except FabricError as exc:
        return exc


def _check_reads(log, acked: dict[int, bytes], damaged: set[int]) -> None:
    for offset in sorted(acked):
        got = _read_one(log, offset)
        if isinstance(got, CorruptRecordError):
            assert offset in damaged, f"offset {offset} reported damaged, but only {sorted(damaged)} are: {got}"
            if isinstance(got, CorruptRangeError):
                assert got.damage.covers(offset), got
        elif isinstance(got, OffsetOutOfRangeError) or got == []:  # past (or at) the end recovered from the frames
            assert offset in damaged and offset >= log.end_offset, got
        else:
            assert not isinstance(got, Exception), got
            assert got and got[0][0] == offset, (offset, got)
            for o, v in got:
                assert acked.get(o) == v or o in damaged, (o, v, acked.get(o))


@pytest.mark.parametrize("cut", [False, True], ids=["flip", "cut"])
@pytest.mark.parametrize("site", SITES)
@given(data=st.data())
@SUITE
def test_damage_is_reported_or_survived_never_spread(tmp_path_factory, storage, site, cut, data):
    directory, acked = _template(storage, tmp_path_factory, with_publish=site == "marker")
    hw = len(acked)
    damaged = _damage(storage, directory, site, lambda n: data.draw(st.integers(0, max(n - 1, 0))), cut, hw)

    log = storage.open_log(directory, **CONFIG)
    _check_reads(log, acked, damaged)
    if site in ("offset index", "time index"):
        for ts in range(1_000, 1_000 + hw + 5, 7):
            assert log.offset_for_time(ts) == min((o for o in acked if 1_000 + o >= ts), default=None), ts
    end = log.end_offset
    assert end == hw or (cut and end in damaged and end < hw)  # the tail was cut away: its first lost offset
    assert log.append(storage.make_batch([b"after"], [5])) == end
    reader = storage.open_log(directory, **CONFIG)
    assert _read_one(reader, end) == [(end, b"after")]
    _check_reads(reader, {o: v for o, v in acked.items() if o < end}, damaged)
    assert not os.path.exists(os.path.join(directory, PENDING))


def test_the_suite_damages_what_it_says(tmp_path_factory, storage):
    """The suite's template really has several segments, sparse indexes and a dead publish to damage."""
    directory, acked = _template(storage, tmp_path_factory, with_publish=True)
    segs = _segments(storage, directory)
    assert len(segs) >= 4 and all(frames[0][1].is_schema for _, _, frames in segs)
    assert all(os.path.getsize(p[:-len(".arrows")] + ".index") >= 8 for p, _, _ in segs)
    with open(os.path.join(directory, PENDING)) as f:
        assert json.load(f) == {"txn": "txn-dead", "base": len(acked), "end": len(acked) + 6}

