"""Group offsets in the offsets topic through restarts: a committing process SIGKILLed, a coordinator service
SIGKILLed and started again on its data directory, an embedded fabric reopened. No acknowledged commit is lost
(what is read back is the last acknowledged commit or the one in flight), and a group consumer resumes from it.
(The active ZooKeeper instance SIGKILLed during a rebalance: test_ha_groups.py.)"""
from __future__ import annotations

import random
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

import fabric

GROUP, TOPIC, PARTITIONS, RECORDS = "resumers", "events", 2, 400

# argv: url. Commits offsets n for every partition, n = 1, 2, ... (a "simple" commit: no membership), printing
# "sending n" before and "ok n" after each acknowledged one, each line in one write (under PYTHONUNBUFFERED a
# print of several pieces is several writes, and a SIGKILL between them left "ok " alone: CI, 2026-12-06).
COMMITTER = r"""
import sys
import fabric
url, partitions, records = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with fabric.connect(url) as fab:
    for n in range(1, records + 1):
        sys.stdout.write(f"sending {n}\n")
        sys.stdout.flush()
        fab.cluster.coordinator.commit_offsets("resumers", {("events", p): n for p in range(partitions)})
        sys.stdout.write(f"ok {n}\n")
        sys.stdout.flush()
"""


def _fill(url: str) -> None:
    with fabric.connect(url) as fab:
        fab.create_topic(TOPIC, partitions=PARTITIONS)
        with fab.producer() as producer:
            producer.send_batch(TOPIC, pa.table({"value": [b"v%d" % i for i in range(RECORDS * PARTITIONS)],
                                                 "partition": [i % PARTITIONS for i in range(RECORDS * PARTITIONS)]}))


def _commit_until_killed(url: str, kill) -> tuple[int, int]:
    """Run the committer until a random acknowledged commit, then `kill()`; (last acknowledged, last sent)."""
    proc = subprocess.Popen([sys.executable, "-c", COMMITTER, url, str(PARTITIONS), str(RECORDS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = sent = 0
    target = random.randrange(20, 200)

    def take(line: str) -> None:
        nonlocal acked, sent
        what, n = line.split()
        acked, sent = (int(n), sent) if what == "ok" else (acked, int(n))
    try:
        while acked < target:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"the committer died: {proc.stderr.read()}")
            take(line)
        kill(proc)
        proc.wait(timeout=30)
        for line in proc.stdout.read().splitlines(keepends=True):  # what it printed before it was killed
            if line.endswith("\n"):  # a line cut by the kill says nothing
                take(line)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    return acked, max(sent, acked)


def _check_resumes(url: str, acked: int, sent: int) -> None:
    """The group's commits are the last acknowledged or the one in flight, and a member resumes there. (The
    service may still be handling the commit in flight when its client was killed, so it may land while this
    runs: the member resumes from what was committed when it joined, between the two reads.)"""
    def read(fab: fabric.Fabric) -> dict[int, int]:
        return {tp[1]: c.offset for tp, c in fab.cluster.coordinator.committed(GROUP).items() if tp[0] == TOPIC}
    with fabric.connect(url) as fab:
        before = read(fab)
        assert set(before) == set(range(PARTITIONS))
        assert all(acked <= o <= sent for o in before.values()), (acked, sent, before)
        with fab.consumer(TOPIC, group_id=GROUP, enable_auto_commit=False) as consumer:
            first: dict[int, int] = {}
            while len(first) < PARTITIONS:
                for record in consumer.poll(1.0):
                    first.setdefault(record.partition, record.offset)
        after = read(fab)
        assert all(acked <= o <= sent for o in after.values()), (acked, sent, after)
        assert all(before[p] <= first[p] <= after[p] for p in range(PARTITIONS)), (before, first, after)


@pytest.mark.parametrize("killed", ["committer", "service"])
def test_a_service_sigkilled_and_restarted_loses_no_acknowledged_commit(coordinators, tmp_path, killed) -> None:
    data = str(tmp_path / "data")
    service = coordinators(data)
    _fill(service.url())

    def kill(proc: subprocess.Popen) -> None:
        if killed == "service":
            service.kill()
        proc.send_signal(signal.SIGKILL)

    acked, sent = _commit_until_killed(service.url(), kill)
    if killed == "service":
        service.start()  # the same data directory: the offsets partitions are recovered, the cache rebuilt
    _check_resumes(service.url(), acked, sent)


def test_an_embedded_committer_sigkilled_mid_commit_leaves_the_last_acknowledged(tmp_path) -> None:
    url = f"file://{tmp_path / 'fabric'}"
    _fill(url)
    acked, sent = _commit_until_killed(url, lambda proc: proc.send_signal(signal.SIGKILL))
    _check_resumes(url, acked, sent)
