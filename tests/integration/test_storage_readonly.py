"""Reads on a directory this process cannot write (a read-only disk, a full one, another user's): they need no
write. What would be repaired (a stale watermark, a torn tail, a broken index) is worked around in memory and
said at WARNING; writes fail with a StorageError naming the partition and the fix.

The reads run in a child process (READER): as root, which ignores permission bits, it turns itself into user
nobody, which the shared test process must never do (its other threads would lose their files)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from typing import Any, Iterator

import pytest

KEEP = dict(retention_ms=-1, segment_ms=2**62)
NOBODY = 65534

# argv: a partition directory, a timestamp (µs), a user id. As that user if started as root: open the log, read it
# whole and from every 5th offset, look the timestamp up, try to append; print the outcome as JSON, log on stderr.
READER = r"""
import json, logging, os, sys
import pyarrow as pa
from fabric.common.config import TopicConfig
from fabric.common.errors import StorageError
from fabric.common.records import storage_schema, to_storage
from fabric.storage.log import Log

directory, timestamp, user = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if os.geteuid() == 0:
    os.setuid(user)
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s %(message)s")
log = Log(directory, storage_schema(), TopicConfig({"retention.ms": -1, "segment.ms": 2**62, "segment.bytes": 1500}))

def read_from(offset):
    out = []
    while offset < log.end_offset:
        for fetched in log.read(offset, 1 << 30):
            values = fetched.batch.column(3).to_pylist()
            stamps = fetched.batch.column(0).cast(pa.int64()).to_pylist()
            out += [[fetched.offset + i, v.hex(), t] for i, (v, t) in enumerate(zip(values, stamps))]
            offset = fetched.offset + fetched.batch.num_rows
    return out

try:
    log.append(to_storage(pa.table({"value": [b"no"]}), None, 1).to_batches()[0])
    refused = None
except StorageError as exc:
    refused = str(exc)
print(json.dumps({"end": log.end_offset, "reads": {o: read_from(o) for o in range(0, log.end_offset, 5)},
                  "at_time": log.offset_for_time(timestamp), "refused": refused}))
"""


@contextlib.contextmanager
def unwritable(root: str) -> Iterator[None]:
    """`root` as a process that may not write it sees it: as root, READER acts as user nobody; for any other user
    the tree loses its write bits meanwhile."""
    if os.geteuid() == 0:
        yield
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


def read_unwritable(directory: str, timestamp: int) -> tuple[dict[str, Any], str]:
    """What READER saw in `directory` (its JSON), and what it logged."""
    child = subprocess.run([sys.executable, "-c", READER, directory, str(timestamp), str(NOBODY)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout), child.stderr


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


def test_reads_need_no_write_on_an_unwritable_directory(storage):
    """Defect 8: the read path rebuilt indexes and recovered the tail in place, so it failed where it could not
    write. Here every repair is due at once: an older-format watermark, a torn tail past it, a broken index."""
    with shared_dir() as root:
        _reads_on_an_unwritable_directory(root, storage)


def _reads_on_an_unwritable_directory(shared_dir: str, storage) -> None:
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

    with unwritable(shared_dir):
        seen, logged = read_unwritable(directory, expected[7][2])
    assert seen["end"] == len(expected)
    for offset, records in seen["reads"].items():
        assert [(o, bytes.fromhex(v), t) for o, v, t in records] == expected[int(offset):]
    assert seen["at_time"] == next(o for o, _, t in expected if t >= expected[7][2])
    assert re.search("cannot write partition t-0: .* make it writable", seen["refused"]), seen["refused"]
    assert _snapshot(shared_dir) == before  # nothing was written
    assert "reads are served up to offset" in logged and "cannot repair" in logged
    assert "reading without them" in logged and segs[1].path in logged

    writer = storage.open_log(directory, segment_bytes=1500, **KEEP)  # writable again: repaired on first use
    assert writer.append(storage.make_batch([b"yes"], [1])) == len(expected)
    report = writer.last_recovery  # what the first writer repaired, as a report
    assert report is not None and report.end_offset == len(expected)
    assert report.rebuilt == [segs[1].path] and [t[0] for t in report.truncated] == [segs[-1].path]
    assert storage.read_all(writer) == expected + [(len(expected), b"yes", 1)]
    storage.assert_clean(directory, len(expected) + 1)


def test_a_file_in_the_way_or_unreadable_is_a_storage_error_naming_it_never_a_traceback() -> None:
    """A directory where a partition's file belongs (an operator's mistake), or a file this process may not read:
    the consumer, the producer and the CLI say which file, the problem and the fix (a StorageError; `error: ...`
    from the CLI), never an OSError's traceback; dump-log too. The unreadable case runs as user nobody when root."""
    import fabric
    from fabric.common.errors import StorageError
    with shared_dir() as root:
        url = f"file://{root}"
        with fabric.connect(url) as fab:
            fab.create_topic("t")
            with fab.producer() as producer:
                producer.send("t", b"kept", partition=0).get(30)
        partition = os.path.join(root, "t", "0")
        watermark = os.path.join(partition, "high-watermark")
        os.remove(watermark)
        os.mkdir(watermark)
        in_the_way = rf"a directory is where the fabric keeps a file \({re.escape(watermark)}\); move it aside"
        with fabric.connect(url) as fab:
            consumer = fab.consumer(auto_offset_reset="earliest")
            consumer.assign([("t", 0)])
            with pytest.raises(StorageError, match=in_the_way):
                consumer.poll(timeout=5)
            consumer.close()
            with fab.producer() as producer, pytest.raises(StorageError, match=in_the_way):
                producer.send("t", b"refused", partition=0).get(30)
        cli = [os.path.join(os.path.dirname(sys.executable), "fabric"), "--url", url]
        consumed = subprocess.run([*cli, "consume", "t", "--from-beginning", "--max-messages", "1", "--timeout-ms",
                                   "2000"], capture_output=True, text=True, timeout=120)
        assert consumed.returncode == 1 and "Traceback" not in consumed.stderr, consumed.stderr
        assert re.search(f"error: cannot read topic t: {in_the_way}", consumed.stderr), consumed.stderr
        os.rmdir(watermark)
        segment = next(os.path.join(partition, f) for f in os.listdir(partition) if f.endswith(".arrows"))
        os.chmod(segment, 0)
        dump = (f"import os, sys; from fabric.cli import main; main.build_parser(); "  # (imported as root, as READER)
                f"os.geteuid() == 0 and os.setuid({NOBODY}); sys.exit(main.main(['dump-log', '--files', {segment!r}]))")
        dumped = subprocess.run([sys.executable, "-c", dump], capture_output=True, text=True, timeout=120)
        assert dumped.returncode == 1 and "Traceback" not in dumped.stderr, dumped.stderr
        assert f"error: Permission denied ({segment}); check the path, and that this user may read it" in dumped.stderr
