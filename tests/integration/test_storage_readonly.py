"""Reads on a directory this process cannot write (a read-only disk, a full one, another user's): they need no
write. What would be repaired (a stale watermark, a torn tail, a broken index) is worked around in memory and
said at WARNING; writes fail with a StorageError naming the partition and the fix."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
import tempfile
from typing import Iterator

import pytest

from fabric.common.errors import StorageError

KEEP = dict(retention_ms=-1, segment_ms=2**62)
NOBODY = 65534


@contextlib.contextmanager
def unwritable(root: str) -> Iterator[None]:
    """`root` as a process that may not write it sees it: root ignores permission bits, so as root this process
    acts as user nobody meanwhile; any other user loses the tree's write bits."""
    if os.geteuid() == 0:
        os.seteuid(NOBODY)
        try:
            yield
        finally:
            os.seteuid(0)
        return
    modes = {}
    for directory, _, files in os.walk(root):
        for path in [directory] + [os.path.join(directory, f) for f in files]:
            modes[path] = os.stat(path).st_mode
            os.chmod(path, modes[path] & ~0o222)
    try:
        yield
    finally:
        for path, mode in modes.items():
            os.chmod(path, mode)


@contextlib.contextmanager
def shared_dir() -> Iterator[str]:
    """A directory every user may read (pytest's own temp root is private to its user), removed afterwards."""
    path = tempfile.mkdtemp(prefix="fabric-readonly-")
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _snapshot(root: str) -> dict[str, bytes]:
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                out[os.path.join(directory, name)] = f.read()
    return out


def test_reads_need_no_write_on_an_unwritable_directory(storage, caplog):
    """Defect 8: the read path rebuilt indexes and recovered the tail in place, so it failed where it could not
    write. Here every repair is due at once: an older-format watermark, a torn tail past it, a broken index."""
    with shared_dir() as root:
        _reads_on_an_unwritable_directory(root, storage, caplog)


def _reads_on_an_unwritable_directory(shared_dir: str, storage, caplog) -> None:
    directory = os.path.join(shared_dir, "t", "0")
    log = storage.open_log(directory, segment_bytes=1500, **KEEP)
    expected = storage.fill(log, 14)
    segs = log.segments()
    assert len(segs) > 2
    with open(os.path.join(directory, "high-watermark"), "wb") as f:
        f.write(struct.pack("<q", len(expected)))  # the older format: checked against the frames
    with open(segs[-1].path, "ab") as f:
        f.write(b"FBAT torn tail of a dead writer")
    with open(segs[1].index.path, "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn entry: the index needs a rebuild
    before = _snapshot(shared_dir)

    with unwritable(shared_dir), caplog.at_level(logging.WARNING, logger="fabric.storage"):
        reader = storage.open_log(directory, segment_bytes=1500, **KEEP)
        assert reader.end_offset == len(expected)
        assert storage.read_all(reader) == expected
        for offset in range(0, len(expected), 5):
            assert storage.read_all(reader, offset) == expected[offset:]
        assert reader.offset_for_time(expected[7][2]) == next(o for o, _, t in expected if t >= expected[7][2])
        with pytest.raises(StorageError, match="cannot write partition t-0: .* make it writable"):
            reader.append(storage.make_batch([b"no"], [1]))
    assert _snapshot(shared_dir) == before  # nothing was written
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "reads are served up to offset" in messages and "cannot repair" in messages
    assert "reading without them" in messages and segs[1].path in messages

    writer = storage.open_log(directory, segment_bytes=1500, **KEEP)  # writable again: repaired on first use
    assert writer.append(storage.make_batch([b"yes"], [1])) == len(expected)
    report = writer.last_recovery  # what the first writer repaired, as a report
    assert report is not None and report.end_offset == len(expected)
    assert report.rebuilt == [segs[1].path] and [t[0] for t in report.truncated] == [segs[-1].path]
    assert storage.read_all(writer) == expected + [(len(expected), b"yes", 1)]
    storage.assert_clean(directory, len(expected) + 1)
