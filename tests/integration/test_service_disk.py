"""A full or read-only disk under a fabric (a real tmpfs, filled up or remounted read-only; root cannot write
either, unlike a directory without write permission): reads keep working on a full disk, writes fail with an
error naming the disk problem and the fix, and once space is freed the same processes write again. Embedded
(CLI processes, as users run them) and through a coordinator service."""
from __future__ import annotations

import pyarrow as pa
import pytest

import fabric
from fabric.common.errors import StorageError
from fabric.common.records import to_storage

ROWS = to_storage(pa.table({"value": [b"x" * 100_000]}), None, 1_000_000).to_batches()[0]  # more than a free page


@pytest.fixture
def full_fabric(small_disk, coordinators, tmp_path):
    """A fabric on the small disk (topic `t`, 2 partitions, 5 records, group `g` committed) served by a
    coordinator instance (its log elsewhere); yields (data dir, instance) once the disk is full."""
    data = str(small_disk.path / "fabric")
    with fabric.connect(data) as fab:
        fab.create_topic("t", partitions=2)
        with fab.producer() as producer:
            for i in range(5):
                producer.send("t", b"v%d" % i, partition=i % 2)
        consumer = fab.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
        consumer.commit({("t", 0): 1})
        consumer.close()
    instance = coordinators(data, log_dir=str(tmp_path / "logs"))
    with fabric.connect(instance.url()) as remote:
        assert remote.list_topics() == ["t"]  # some service threads opened the database before the disk filled
    small_disk.fill()
    return data, instance


def refused(proc, problem: str) -> None:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert problem in proc.stderr and "free space on that filesystem or make it writable" in proc.stderr


def test_a_full_disk_keeps_reads_working_and_fails_writes_clearly(full_fabric, small_disk, fabric_cli) -> None:
    data, instance = full_fabric
    described = fabric_cli("--url", data, "topics", "describe", "t")
    assert described.returncode == 0, described.stderr
    consumed = fabric_cli("--url", data, "consume", "t", "--from-beginning", "--max-messages", "5",
                          "--timeout-ms", "20000")
    assert consumed.returncode == 0 and sorted(consumed.stdout.split()) == [f"v{i}" for i in range(5)]
    groups = fabric_cli("--url", data, "groups", "describe", "g")
    assert groups.returncode == 0 and "g" in groups.stdout, groups.stderr
    refused(fabric_cli("--url", data, "topics", "create", "u"), "cannot write the metadata database: the disk is full")
    # an idempotent producer reserves its producer id in the metadata database before it writes the partition
    refused(fabric_cli("--url", data, "produce", "t", stdin="x" * 100_000 + "\n"),
            "cannot write the metadata database: the disk is full")
    with fabric.connect(instance.url()) as remote:
        assert remote.list_topics() == ["t"]
        assert sum(len(f.batch) for p in (0, 1) for f in remote.cluster.fetch("t", p, 0, 1 << 20)) == 5
        def commit_until_full() -> None:  # a commit is a small record: the offsets log's last block may hold one
            for _ in range(100):
                remote.cluster.commit_offsets("g", {("t", 0): 2}, "m" * 4096)

        for write in (lambda: remote.create_topic("u"), lambda: remote.cluster.append("t", 0, ROWS),
                      commit_until_full):
            with pytest.raises(StorageError, match="the disk is full .*; free space on that filesystem"):
                write()
        small_disk.free()  # the same service process writes again
        remote.create_topic("u")
        assert remote.cluster.append("t", 0, ROWS) == 3
        remote.cluster.commit_offsets("g", {("t", 0): 2})
        assert remote.list_topics() == ["t", "u"]
    assert fabric_cli("--url", data, "topics", "create", "v").returncode == 0


def test_a_read_only_disk_serves_metadata_and_refuses_writes_clearly(small_disk, fabric_cli) -> None:
    data = str(small_disk.path / "fabric")
    assert fabric_cli("--url", data, "topics", "create", "t").returncode == 0
    small_disk.remount("ro")
    listed = fabric_cli("--url", data, "topics", "list")
    assert listed.returncode == 0 and listed.stdout.split() == ["t"], listed.stderr
    refused(fabric_cli("--url", data, "topics", "create", "u"), "the filesystem is read-only")
    described = fabric_cli("--url", data, "topics", "describe", "t")  # reads go on from memory
    assert described.returncode == 0 and "t" in described.stdout, described.stderr
    small_disk.remount("rw")
    assert fabric_cli("--url", data, "topics", "create", "u").returncode == 0
