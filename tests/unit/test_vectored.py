"""fabric.common.vectored: buffers written whole through a gathering call that takes any number of their bytes,
each byte once and in order, at most IOV_MAX buffers a call; a call that takes nothing is an error, not a loop."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common import vectored


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=50), max_size=12), st.lists(st.integers(1, 60), min_size=1, max_size=10))
def test_every_byte_is_written_once_in_order_however_much_each_call_takes(parts, takes) -> None:
    written, calls = bytearray(), [0]

    def write(views: list[memoryview]) -> int:
        offered = b"".join(views)
        taken = min(takes[calls[0] % len(takes)], len(offered))
        calls[0] += 1
        written.extend(offered[:taken])
        return taken

    vectored.write_all(write, [pa.py_buffer(p) if i % 2 else p for i, p in enumerate(parts)])
    assert bytes(written) == b"".join(parts)


def test_a_call_takes_at_most_iov_max_buffers_and_one_that_takes_nothing_fails() -> None:
    seen: list[int] = []

    def write(views: list[memoryview]) -> int:
        seen.append(len(views))
        return sum(len(v) for v in views)

    vectored.write_all(write, [b"x"] * (vectored.IOV_MAX + 5))
    assert seen == [vectored.IOV_MAX, 5]
    with pytest.raises(OSError, match="a write took 0 of 3 bytes"):
        vectored.write_all(lambda views: 0, [b"abc"])


def test_a_file_gets_every_part(tmp_path) -> None:
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        vectored.write_all(lambda views: os.writev(fd, views), [b"head", pa.py_buffer(b"-body-"), b"", b"tail"])
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"head-body-tail"
