"""High availability of consumer groups: three coordinator instances over a real ZooKeeper, group consumers in
real processes consuming and committing while the group rebalances, and the active instance SIGKILLed in the
middle of that rebalance. Another instance must take over within the ZooKeeper session timeout, the group must
settle (Stable, every partition owned exactly once), no acknowledged commit may be lost or go backwards, and no
partition may ever be owned by two members of one generation (each worker logs every assignment it installs)."""
from __future__ import annotations

import json
import os
import threading
from typing import Any

import pytest

import fabric
from fabric.common.waiting import wait_for

GROUP, TOPIC = "workers", "jobs"
PARTITIONS = 6
ZK_SESSION_MS = 2000
TAKEOVER_GRACE_S = 3.0  # beyond the session timeout: ZooKeeper's expiry tick, the watch and this test's polling
MEMBER = dict(partition_assignment_strategy="cooperative-sticky", session_timeout_ms=10000,
              heartbeat_interval_ms=300, max_poll_interval_ms=30000)  # members outlive the failover

# A worker process (argv: url, workdir, name, group, topic, config JSON): consume and commit what it read,
# logging to <name>.jsonl every assignment it installs ({"generation", "member", "partitions"}) and every
# acknowledged commit ({"ack": [[partition, offset]...]}). A commit a rebalance refused is retried after the
# rejoin for the partitions the worker still owns (the others' next owner resumes from the last commit), so
# the last records read before the producer stops are committed too. While <name>.pause exists it does not
# poll, so a rebalance waits for it.
LOGGED_MEMBER = r"""
import json, os, sys, time
import fabric
from fabric.common.errors import CommitFailedError

url, workdir, name, group, topic = sys.argv[1:6]
config = json.loads(sys.argv[6])
parent = os.getppid()

def path(suffix):
    return os.path.join(workdir, name + suffix)

with fabric.connect(url) as fab, open(path(".jsonl"), "a", buffering=1) as log:
    def assigned(_):
        meta = consumer.group_metadata()
        log.write(json.dumps({"generation": meta.generation, "member": meta.member_id,
                              "partitions": sorted(p for _, p in consumer.assignment())}) + "\n")

    consumer = fab.consumer(group_id=group, on_assign=assigned, **config)
    consumer.subscribe([topic])  # after `consumer` is bound: the first assignment may come at once
    pending = {}
    while not os.path.exists(path(".stop")) and os.getppid() == parent:
        if os.path.exists(path(".pause")):
            time.sleep(0.05)  # not polling: the heartbeat thread keeps the session alive
            continue
        pending.update({(r.topic, r.partition): r.offset + 1 for r in consumer.poll(0.05)})
        pending = {tp: o for tp, o in pending.items() if tp in consumer.assignment()}
        if pending:
            try:
                consumer.commit(pending)
            except CommitFailedError:
                continue  # rejoin on the next poll, then commit what is still ours
            log.write(json.dumps({"ack": sorted([p, o] for (_, p), o in pending.items())}) + "\n")
            pending = {}
    consumer.close()
"""


def entries(workdir: str, name: str) -> list[dict[str, Any]]:
    with open(os.path.join(workdir, f"{name}.jsonl")) as lines:
        return [json.loads(line) for line in lines if line.endswith("\n")]


class Producer(threading.Thread):
    """Sends a record to every partition every few milliseconds through the failover URL until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.failures = url, threading.Event(), []

    def run(self) -> None:
        try:
            with fabric.connect(self.url) as fab, fab.producer() as producer:
                while not self.stop.wait(0.02):
                    for p in range(PARTITIONS):
                        producer.send(TOPIC, b"x", partition=p)
                    producer.flush()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.failures.append(exc)


class CommitSampler(threading.Thread):
    """Reads the group's committed offsets over and over (through the failover) and records any that went back."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.backwards, self.samples = url, threading.Event(), [], 0
        self.last: dict[int, int] = {}

    def run(self) -> None:
        with fabric.connect(self.url) as fab:
            while not self.stop.wait(0.1):
                for (_, p), c in fab.cluster.coordinator.committed(GROUP).items():
                    if c.offset < self.last.get(p, 0):
                        self.backwards.append((p, self.last[p], c.offset))
                    self.last[p] = max(c.offset, self.last.get(p, 0))
                self.samples += 1


def settled(fab, workers, names: list[str]) -> Any:
    """The group's description once it is Stable with `names` as members, owning every partition exactly once,
    and each worker has installed that generation's assignment; else None."""
    group = fab.cluster.coordinator.describe_group(GROUP)
    owned = sorted(p for m in group.members for _, p in m.assignment)
    if group.state != "Stable" or len(group.members) != len(names) or owned != list(range(PARTITIONS)):
        return None
    latest = [[e for e in entries(workers.workdir, n) if "generation" in e][-1:] for n in names]
    return group if all(last and last[0]["generation"] == group.generation for last in latest) else None


@pytest.mark.zookeeper
def test_killing_the_active_coordinator_mid_rebalance_loses_no_commit(zookeeper_instances, the_active, group_workers,
                                                                     tmp_path) -> None:
    instances, url = zookeeper_instances(ZK_SESSION_MS)
    workers = group_workers(url, str(tmp_path / "workers"), GROUP, TOPIC, script=LOGGED_MEMBER)
    producer, sampler = Producer(url), CommitSampler(url)
    with fabric.connect(url) as fab:
        first = wait_for(lambda: the_active(fab), 30, "one active instance")
        fab.create_topic(TOPIC, partitions=PARTITIONS)
        try:
            producer.start()
            sampler.start()
            for name in ("w0", "w1", "w2"):
                workers.start(name, **MEMBER)
            wait_for(lambda: settled(fab, workers, ["w0", "w1", "w2"]), 40, "3 workers to split the partitions")
            wait_for(lambda: len(sampler.last) == PARTITIONS and min(sampler.last.values()) > 0, 20,
                     "commits in every partition")

            open(os.path.join(workers.workdir, "w0.pause"), "w").close()  # the rebalance will wait for w0
            for name in ("w3", "w4"):
                workers.start(name, **MEMBER)
            wait_for(lambda: fab.cluster.coordinator.describe_group(GROUP).state == "PreparingRebalance", 30,
                     "new members to start a rebalance")
            acked_before = dict(sampler.last)
            instances[first.instance].kill()  # SIGKILL the active instance in the middle of the rebalance
            second = wait_for(lambda: (s := the_active(fab)) and s.instance != first.instance and s,
                              ZK_SESSION_MS / 1000 + TAKEOVER_GRACE_S, "another instance to take over")
            assert second.epoch > first.epoch
            os.remove(os.path.join(workers.workdir, "w0.pause"))

            names = [f"w{i}" for i in range(5)]
            group = wait_for(lambda: settled(fab, workers, names), 40, "the 5 workers to settle after the failover")
            assert group.protocol == "cooperative-sticky"
            after = wait_for(lambda: (lambda c: c if all(c[p] > acked_before[p] for p in c) else None)(dict(
                sampler.last)), 20, "commits to advance under the new active instance")
            assert all(after[p] >= acked_before[p] for p in range(PARTITIONS))
            producer.stop.set()
            producer.join(30)
            assert not producer.failures, producer.failures
            ends = {p: fab.cluster.partition_state(TOPIC, p).end_offset for p in range(PARTITIONS)}
            committed = wait_for(lambda: (lambda c: c if c == ends else None)(
                {p: c.offset for (_, p), c in fab.cluster.coordinator.committed(GROUP).items()}), 30,
                "every record committed")
        finally:
            producer.stop.set()
            sampler.stop.set()
            workers.close()
        sampler.join(30)
    assert sampler.samples > 0 and sampler.backwards == [], sampler.backwards

    logs = {name: entries(workers.workdir, name) for name in names}
    for name, log in logs.items():  # every acknowledged commit survived (none lost, none overwritten by less)
        for ack in (e["ack"] for e in log if "ack" in e):
            assert all(committed[p] >= offset for p, offset in ack), (name, ack, committed)
    owners: dict[tuple[int, int], set[str]] = {}
    for log in logs.values():
        for e in (e for e in log if "generation" in e):
            for p in e["partitions"]:
                owners.setdefault((e["generation"], p), set()).add(e["member"])
    assert owners and all(len(members) == 1 for members in owners.values()), {
        k: v for k, v in owners.items() if len(v) > 1}
    assert {p for (g, p) in owners if g == group.generation} == set(range(PARTITIONS))
