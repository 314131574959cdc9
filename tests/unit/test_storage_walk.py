"""A segment walk (scan.Walk) over damaged bytes: what it yields as frames is whole, follows on and, where asked,
passes its CRC check; the damage between them is reported, so frames and damage cover every offset once. (Walks
check the usual frame inline and every other one in full: this holds whichever path a frame took.)"""
from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.storage import frame
from fabric.storage.scan import Damage, Frame, Walk

BASE = 100
SCHEMA = pa.schema([("value", pa.binary())])


def _segment(counts: list[int]) -> tuple[bytes, int]:
    """A segment's bytes (its schema frame, then a frame of each count of records) and where its data starts."""
    header, payload = frame.schema_frame(SCHEMA, BASE)
    out, offset = [header.pack(), payload.to_pybytes()], BASE
    for count in counts:
        batch = pa.record_batch([pa.array([b"v%d" % (offset + i) for i in range(count)])], schema=SCHEMA)
        body = frame.encode_batch(batch)
        sealed = frame.seal(frame.FrameHeader(0, offset, count, 1, 1), body)
        out += [sealed.pack(), body.to_pybytes()]
        offset += count
    return b"".join(out), len(out[0]) + len(out[1])


def _walked(data: bytes, start: int, verify: bool) -> list[Frame | Damage]:
    walk = Walk("seg", pa.py_buffer(data), start, BASE, verify_from=BASE if verify else None)
    return list(walk)


def test_an_undamaged_segment_walks_frame_by_frame():
    data, start = _segment([1, 3, 2])
    items = _walked(data, start, verify=True)
    assert all(isinstance(item, Frame) for item in items)
    assert [(f.header.base_offset, f.header.record_count) for f in items] == [(100, 1), (101, 3), (104, 2)]
    assert items[0].position == start and items[-1].end == len(data)


def _check_walk(damaged: bytes, start: int, verify: bool) -> None:
    """Frames and damage follow on from the segment's base offset; every frame is whole (and, with `verify`,
    passes its CRC check)."""
    expected: int | None = BASE
    position = start
    for item in _walked(damaged, start, verify):
        if isinstance(item, Frame):
            header = item.header
            assert (header.base_offset, item.position) == (expected, position), item
            assert item.end <= len(damaged) and not header.is_schema
            assert not verify or frame.verify(damaged, item.position, header), f"{item} fails its CRC check"
            expected, position = header.next_offset, item.end
        else:
            assert item.first_offset == expected and item.position == position, item
            assert item.next_offset is None or item.next_offset >= expected, item  # (junk bytes: no offsets)
            expected, position = item.next_offset, item.end
            if expected is None:
                return


@pytest.mark.parametrize("verify", [False, True])
def test_each_byte_of_a_frame_header_damaged_in_turn(verify):
    segment, start = _segment([2, 3, 1])
    second = start + frame.HEADER_SIZE + frame.unpack_header(segment, start).length
    for at in range(second, second + frame.HEADER_SIZE):
        for bits in (0x01, 0x80):
            damaged = bytearray(segment)
            damaged[at] ^= bits
            _check_walk(bytes(damaged), start, verify)


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(1, 4), min_size=1, max_size=6), verify=st.booleans(), data=st.data())
def test_frames_walked_over_damage_are_whole_and_follow_on(counts, verify, data):
    segment, start = _segment(counts)
    damaged = bytearray(segment)
    for _ in range(data.draw(st.integers(1, 3), "flips")):
        at = data.draw(st.integers(start, len(damaged) - 1), "at")
        damaged[at] ^= data.draw(st.integers(1, 255), "bits")
    cut = data.draw(st.integers(start, len(damaged)), "cut")
    _check_walk(bytes(damaged[:cut]), start, verify)
