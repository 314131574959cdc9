"""Open files do not grow with the partition count: a process serving thousands of partitions runs within a small
file-descriptor limit (segment and index maps hold no descriptor and are bounded per process; the watermark is
read without holding its file open), and a process whose address space is capped still reads its files.

The children are a script importing only the installed package and the `fabric` CLI, each started with
RLIMIT_NOFILE lowered, and a script capping its own RLIMIT_AS."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

PYTHON = sys.executable
FABRIC = os.path.join(os.path.dirname(sys.executable), "fabric")
PARTITIONS, NOFILE = 2000, 256

PRODUCER = r"""
import sys
import pyarrow as pa
import fabric
partitions = int(sys.argv[2])
with fabric.connect("file://" + sys.argv[1]) as fab:
    fab.create_topic("wide", partitions=partitions)
    table = pa.table({"value": [f"v{p}".encode() for p in range(partitions)],
                      "partition": pa.array(range(partitions), pa.int32())})
    with fab.producer() as producer:
        producer.send_batch("wide", table)
    states = fab.describe_topic("wide").partitions
    assert [s.end_offset for s in states] == [1] * partitions, states[:3]
    consumer = fab.consumer("wide", auto_offset_reset="earliest")
    got = {}
    while len(got) < partitions:
        for record in consumer.poll(1.0):
            got[record.partition] = record.value
    assert got == {p: f"v{p}".encode() for p in range(partitions)}
print("ok")
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


@pytest.mark.slow
def test_thousands_of_partitions_within_a_small_file_limit(tmp_path):
    """Defect 7: every partition held mmap file descriptors (a Python mmap keeps a dup'd descriptor), so a
    1,100-partition topic could not be described or produced to at `ulimit -n 1024`."""
    root = str(tmp_path)
    child = subprocess.run([PYTHON, "-c", PRODUCER, root, str(PARTITIONS)], capture_output=True, text=True,
                           timeout=600, preexec_fn=_limited)
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr[-3000:]
    described = subprocess.run([FABRIC, "--url", f"file://{root}", "topics", "describe", "wide"], capture_output=True,
                               text=True, timeout=600, preexec_fn=_limited)
    assert described.returncode == 0, described.stderr[-3000:]
    rows = [line.split() for line in described.stdout.splitlines() if line[:1].isdigit()]
    assert len(rows) == PARTITIONS
    assert {(r[1], r[2]) for r in rows} == {("0", "1")}  # log start 0, log end 1 in every partition


def test_files_are_mapped_at_their_size_where_address_space_cannot_be_reserved(tmp_path):
    """A process whose address space is capped (ulimit -v) cannot reserve room past a file's end: it maps files
    at their size, again as they grow, and says so once."""
    script = f"""
import logging, os, resource
import pyarrow
from fabric.storage.mapcache import MapCache
logging.basicConfig(level=logging.WARNING)
path = {str(tmp_path / "seg")!r}
with open(path, "wb") as f:
    f.write(b"a" * 100)
with open("/proc/self/status") as status:
    size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 20), resource.RLIM_INFINITY))
cache = MapCache()
assert cache.get(path).to_pybytes() == b"a" * 100
with open(path, "ab") as f:
    f.write(b"b")
assert cache.get(path).to_pybytes() == b"a" * 100 + b"b"
print("read")
"""
    done = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "read\n", done.stderr
    assert done.stderr.count("cannot reserve address space") == 1, done.stderr
