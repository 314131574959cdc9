"""Consumer groups through a real coordinator service over a real ZooKeeper: ten consumer processes that
commit as they go must settle. (Regression: heartbeats and waiting members' join polls rewrote the group
state so often that a member's offset commit on revocation lost every compare-and-set, so it never rejoined
and the group stayed in PreparingRebalance until max_poll_interval_ms.)"""
from __future__ import annotations

import concurrent.futures
import os
import signal

import pytest

import fabric
from fabric.common.waiting import wait_for

GROUP, TOPIC = "workers", "jobs"
MEMBERS, PARTITIONS = 10, 20


@pytest.mark.slow
@pytest.mark.zookeeper
def test_ten_consumer_processes_over_zookeeper_stabilise(coordinators, group_workers, zk_url, tmp_path):
    service = coordinators(store=zk_url)
    workers = group_workers(service.url(), str(tmp_path / "status"), GROUP, TOPIC)
    with fabric.connect(service.url()) as fab:
        fab.create_topic(TOPIC, partitions=PARTITIONS)
        workers.produce(fab, PARTITIONS, 5)  # members consume and commit, also while their partitions are revoked
        names = [f"w{i}" for i in range(MEMBERS)]
        try:
            for name in names:
                workers.start(name, enable_auto_commit=True, auto_commit_interval_ms=100)
            owned = wait_for(lambda: workers.exact_cover(names, PARTITIONS), 30,
                             f"{MEMBERS} processes to split {PARTITIONS} partitions")
            assert sorted(len(tps) for tps in owned.values()) == [2] * MEMBERS
            group = wait_for(lambda: (lambda d: d if d.state == "Stable" else None)(
                fab.cluster.coordinator.describe_group(GROUP)), 30, "the group to be Stable")
            assert len(group.members) == MEMBERS
            assert sorted(tp for m in group.members for tp in m.assignment) == [(TOPIC, p) for p in range(PARTITIONS)]
            committed = wait_for(lambda: (lambda c: c if len(c) == PARTITIONS else None)(
                fab.cluster.coordinator.committed(GROUP)), 30, "every partition's offsets committed")
            assert {c.offset for c in committed.values()} == {5}
        finally:
            workers.close()


@pytest.mark.zookeeper
def test_a_kept_groups_commits_and_a_kept_topics_records_are_taken_while_zookeeper_is_paused(own_zookeeper,
                                                                                               coordinators):
    """A coordinator instance keeps a group's state and its topics in memory once read (coordinator.zk_store,
    zk_watched_cache), so its commits and produces ask ZooKeeper nothing (and are served on its event loop:
    test_zk_store): with ZooKeeper SIGSTOPped, ten commits are answered and ten records acknowledged, all stored."""
    service = coordinators(store=own_zookeeper.url("/paused"))
    with fabric.connect(service.url()) as fab, fab.producer() as producer:
        fab.create_topic(TOPIC)
        for _ in range(20):  # the first reads the topic and the producer id's owner (on a worker), then kept
            producer.send(TOPIC, b"x", partition=0).get(timeout=30)
        coordinator = fab.cluster.coordinator
        for offset in (1, 2):  # the first reads the group's state (on a worker), and keeps it
            coordinator.commit_offsets(GROUP, {(TOPIC, 0): offset})
        assert own_zookeeper.process is not None
        os.kill(own_zookeeper.process.pid, signal.SIGSTOP)
        try:
            def while_paused() -> None:
                for offset in range(3, 13):
                    coordinator.commit_offsets(GROUP, {(TOPIC, 0): offset})
                    producer.send(TOPIC, b"y", partition=0).get(timeout=30)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a ZooKeeper round trip would wait out the pause
                pool.submit(while_paused).result(timeout=60)
        finally:
            os.kill(own_zookeeper.process.pid, signal.SIGCONT)
        assert coordinator.committed(GROUP)[(TOPIC, 0)].offset == 12
        assert fab.cluster.partition_state(TOPIC, 0).end_offset == 30
