"""offsets.retention.minutes (Kafka's key; 1 minute here, the least it takes, looked at every 500 ms) on a
cluster's coordinator process, its offsets replicated on a data node, and in a writing process of an embedded
`file://` fabric, which no server looks after: a group that stopped committing and has no member is forgotten
once a minute passed, its offsets tombstoned in __consumer_offsets, while a group that goes on committing keeps
its own. A minute of waiting each: the retention counts in the process's own time."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import fabric
from fabric.common.errors import CoordinatorUnavailableError
from fabric.common.waiting import wait_for

TOPIC = "retained"


def test_a_group_that_stopped_committing_is_forgotten_after_the_retention_and_a_committing_one_kept(
        node_cluster) -> None:
    cluster = node_cluster(nodes=1, coordinator_extra=(
        "--offsets-topic-replication-factor", "1", "--offsets-retention-minutes", "1",
        "--offsets-retention-check-interval-ms", "500"))
    stop = threading.Event()
    with fabric.connect(cluster.url) as fab:
        fab.create_topic(TOPIC, partitions=2)
        wait_for(lambda: _commits(fab, "abandoned"), 120, "the offsets topic to take the first commit")
        committed_at = time.monotonic()
        keeper = threading.Thread(target=_keep_committing, args=(fab, stop), daemon=True)
        keeper.start()
        try:
            _forgotten_after_a_minute(fab, committed_at)
        finally:
            stop.set()
            keeper.join(30)
    log = Path(cluster.coordinator.log_path).read_text(errors="replace")
    assert "forgot 1 group(s) with no member and no commit for 1 minutes (offsets.retention.minutes): abandoned" in log
    assert "expiring group offsets failed" not in log  # not even while the offsets topic waited for its first commit


def test_a_writing_embedded_process_forgets_its_directorys_abandoned_groups(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FABRIC_OFFSETS_RETENTION_MINUTES", "1")
    monkeypatch.setenv("FABRIC_OFFSETS_RETENTION_CHECK_INTERVAL_MS", "500")
    stop = threading.Event()
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic(TOPIC, partitions=2)
        assert _commits(fab, "abandoned")
        committed_at = time.monotonic()
        keeper = threading.Thread(target=_keep_committing, args=(fab, stop), daemon=True)
        keeper.start()
        try:
            with fab.producer() as producer:  # the process writes: its background passes start
                producer.send(TOPIC, b"x", partition=0).get(60)
            _forgotten_after_a_minute(fab, committed_at)
        finally:
            stop.set()
            keeper.join(30)
    with fabric.connect(f"file://{tmp_path}") as again:  # the tombstones are in the directory's offsets topic
        assert again.list_groups() == ["kept"]


def _keep_committing(fab: fabric.Fabric, stop: threading.Event) -> None:
    """Commit for group "kept" every 2 s until `stop`."""
    while not stop.wait(2.0):
        _commits(fab, "kept")


def _forgotten_after_a_minute(fab: fabric.Fabric, committed_at: float) -> None:
    """Group "abandoned", which last committed at `committed_at` (monotonic), goes once its minute passed, its
    offsets with it; "kept", committing meanwhile, keeps its own."""
    wait_for(lambda: "kept" in fab.list_groups(), 60, "the kept group's first commit")
    wait_for(lambda: "abandoned" not in fab.list_groups(), 300, "the abandoned group to be forgotten")
    assert time.monotonic() - committed_at >= 59  # not before its minute
    assert fab.cluster.coordinator.committed("abandoned") == {}
    assert fab.cluster.coordinator.committed("kept")[(TOPIC, 1)].offset == 0


def _commits(fab: fabric.Fabric, group: str) -> bool:
    """Commit offset 0 of both partitions for `group`; False while the offsets topic is not ready for it."""
    try:
        fab.cluster.coordinator.commit_offsets(group, {(TOPIC, 0): 0, (TOPIC, 1): 0})
    except CoordinatorUnavailableError:
        return False
    return True
