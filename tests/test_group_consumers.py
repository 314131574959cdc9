"""Consumer groups across real OS processes sharing one embedded fabric: partitions are split, a SIGKILLed
member's partitions move after its session timeout, offsets survive, static members rejoin without a
rebalance, and the rebalance callbacks run. Each worker reports its state in a JSON file (kill-safe)."""
from __future__ import annotations

import json
import multiprocessing
import os
from typing import Any, Callable

import pytest

import fabric
from fabric.errors import CommitFailedError
from fabric.waiting import wait_for

GROUP = "workers"
TOPIC = "jobs"
FAST = dict(session_timeout_ms=1500, heartbeat_interval_ms=250, auto_offset_reset="earliest",
            enable_auto_commit=False)


def run_member(url: str, workdir: str, name: str, config: dict) -> None:
    """A worker process: consume, commit after every poll, report owned partitions and callbacks."""
    status: dict[str, Any] = {"owned": [], "assigned": [], "revoked": [], "consumed": 0, "closed": False}
    path = os.path.join(workdir, f"{name}.json")

    def save() -> None:
        with open(path + ".tmp", "w") as out:
            json.dump(status, out)
        os.replace(path + ".tmp", path)

    with fabric.connect(url) as fab:
        consumer = fab.consumer(TOPIC, group_id=GROUP, on_assign=lambda ps: status["assigned"].append(ps),
                                on_revoke=lambda ps: status["revoked"].append(ps), **config)
        while not os.path.exists(os.path.join(workdir, f"{name}.stop")):
            records = consumer.poll(0.05)
            if records:
                status["consumed"] += len(records)
                try:
                    consumer.commit()
                except CommitFailedError:
                    pass  # a rebalance took the partitions: the next owner resumes from the last commit
            owned = [list(tp) for tp in consumer.assignment()]
            if owned != status["owned"] or records:
                status["owned"] = owned
                save()
        consumer.close()
    status["owned"], status["closed"] = [], True
    save()


class Workers:
    """Worker processes (spawned) of one group, and what they report."""

    def __init__(self, url: str, workdir: str, target: Callable[[str, str, str, dict], None] = run_member) -> None:
        self.url, self.workdir, self.target = url, workdir, target
        self.procs: dict[str, multiprocessing.Process] = {}

    def start(self, name: str, **config: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        proc = ctx.Process(target=self.target, args=(self.url, self.workdir, name, {**FAST, **config}), daemon=True)
        proc.start()
        self.procs[name] = proc

    def status(self, name: str) -> dict[str, Any]:
        try:
            with open(os.path.join(self.workdir, f"{name}.json")) as f:
                return json.load(f)
        except FileNotFoundError:
            return {"owned": [], "assigned": [], "revoked": [], "consumed": 0, "closed": False}

    def owned(self, names: list[str]) -> dict[str, list[tuple[str, int]]]:
        return {n: [tuple(tp) for tp in self.status(n)["owned"]] for n in names}

    def stop(self, name: str) -> None:
        open(os.path.join(self.workdir, f"{name}.stop"), "w").close()
        self.procs[name].join(30)
        assert self.procs[name].exitcode == 0

    def kill(self, name: str) -> None:
        self.procs[name].kill()
        self.procs[name].join(10)

    def close(self) -> None:
        for name, proc in self.procs.items():
            if proc.is_alive():
                open(os.path.join(self.workdir, f"{name}.stop"), "w").close()
        for proc in self.procs.values():
            proc.join(30)
            if proc.is_alive():
                proc.kill()


@pytest.fixture
def workers(fabric_url, tmp_path):
    ws = Workers(fabric_url, str(tmp_path / "status"))
    os.makedirs(ws.workdir)
    yield ws
    ws.close()


def exact_cover(ws: Workers, names: list[str], partitions: int) -> dict[str, list[tuple[str, int]]] | None:
    """The workers' assignments if together they own every partition exactly once and each owns some."""
    owned = ws.owned(names)
    flat = sorted(tp for tps in owned.values() for tp in tps)
    busy = all(owned.values()) if len(names) <= partitions else True
    return owned if flat == [(TOPIC, p) for p in range(partitions)] and busy else None


def produce(fab, partitions: int, per_partition: int) -> None:
    producer = fab.producer()
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(TOPIC, b"v%d" % i, partition=p)
    producer.flush()
    producer.close()


def committed(fab) -> dict[int, int]:
    return {p: c.offset for (_, p), c in fab.cluster.coordinator.committed(GROUP).items()}


def test_processes_split_partitions_and_survivors_take_over_a_killed_member(fab, workers):
    fab.create_topic(TOPIC, partitions=6)
    produce(fab, 6, 10)
    names = ["a", "b", "c"]
    for name in names:
        workers.start(name)
    first = wait_for(lambda: exact_cover(workers, names, 6), 60, "3 processes to split 6 partitions")
    assert all(len(tps) == 2 for tps in first.values())
    wait_for(lambda: committed(fab) == {p: 10 for p in range(6)}, 30, "all 60 records committed")

    workers.kill("c")  # SIGKILL: no leave, no commit; only the session timeout tells the group
    produce(fab, 6, 10)
    after = wait_for(lambda: exact_cover(workers, ["a", "b"], 6), 30, "survivors to take the dead member's partitions")
    assert all(len(tps) == 3 for tps in after.values())
    wait_for(lambda: committed(fab) == {p: 20 for p in range(6)}, 30, "the survivors to commit everything")
    for name in ("a", "b"):  # eager range: everything revoked before the rebalance, new partitions assigned
        status = workers.status(name)
        assert status["revoked"] and [tuple(tp) for tp in status["assigned"][-1]] == after[name]
    assert sum(workers.status(n)["consumed"] for n in ("a", "b")) >= 60

    for name in ("a", "b"):
        workers.stop(name)
    assert fab.cluster.coordinator.describe_group(GROUP).state == "Empty"
    with fab.consumer(TOPIC, group_id=GROUP, **FAST) as late:  # committed offsets survive every member
        wait_for(lambda: late.poll(0.05) == [] and len(late.assignment()) == 6, 20, "a new member's assignment")
        assert {tp[1]: late.position(*tp) for tp in late.assignment()} == {p: 20 for p in range(6)}


@pytest.mark.slow
def test_ten_consumer_processes_cover_every_partition_exactly_once(fab, workers):
    fab.create_topic(TOPIC, partitions=12)
    names = [f"w{i}" for i in range(10)]
    for name in names:
        workers.start(name)
    owned = wait_for(lambda: exact_cover(workers, names, 12), 120, "10 processes to split 12 partitions")
    assert sorted(len(tps) for tps in owned.values()) == [1] * 8 + [2] * 2
    group = wait_for(lambda: (lambda d: d if d.state == "Stable" else None)(
        fab.cluster.coordinator.describe_group(GROUP)), 30, "the group to be Stable")
    assert len(group.members) == 10
    assert sorted(tp for m in group.members for tp in m.assignment) == [(TOPIC, p) for p in range(12)]
    for name in names:
        workers.stop(name)
    assert fab.cluster.coordinator.describe_group(GROUP).members == ()


def test_static_member_restart_keeps_its_partitions_without_rebalance(fab, workers):
    fab.create_topic(TOPIC, partitions=4)
    static = dict(group_instance_id="box-1", session_timeout_ms=20000, heartbeat_interval_ms=250)
    workers.start("dynamic")
    workers.start("static", **static)
    owned = wait_for(lambda: exact_cover(workers, ["dynamic", "static"], 4), 60, "two members to split 4 partitions")
    before = fab.cluster.coordinator.describe_group(GROUP)
    revokes_before = len(workers.status("dynamic")["revoked"])

    workers.stop("static")  # a static member does not leave on close: its slot waits for it
    assert len(fab.cluster.coordinator.describe_group(GROUP).members) == 2
    os.remove(os.path.join(workers.workdir, "static.stop"))
    workers.start("static", **static)
    wait_for(lambda: workers.owned(["static"])["static"] == owned["static"], 60, "the restarted static member")
    after = fab.cluster.coordinator.describe_group(GROUP)
    assert (after.state, after.generation) == ("Stable", before.generation)
    assert {m.group_instance_id for m in after.members} == {"", "box-1"}
    assert len(workers.status("dynamic")["revoked"]) == revokes_before  # the other member noticed nothing
    assert workers.owned(["dynamic"])["dynamic"] == owned["dynamic"]


def test_cooperative_sticky_revokes_only_moved_partitions(fab, workers):
    fab.create_topic(TOPIC, partitions=6)
    coop = dict(partition_assignment_strategy="cooperative-sticky")
    workers.start("a", **coop)
    workers.start("b", **coop)
    two = wait_for(lambda: exact_cover(workers, ["a", "b"], 6), 60, "two cooperative members")
    assert all(len(tps) == 3 for tps in two.values())
    earlier = {name: len(workers.status(name)["revoked"]) for name in ("a", "b")}
    workers.start("c", **coop)
    three = wait_for(lambda: exact_cover(workers, ["a", "b", "c"], 6), 60, "the third member to get its share")
    assert all(len(tps) == 2 for tps in three.values())
    for name in ("a", "b"):
        kept = set(three[name])
        assert kept < set(two[name])  # sticky: nothing new, only what moved was given up
        revoked = {tuple(tp) for ps in workers.status(name)["revoked"][earlier[name]:] for tp in ps}
        assert revoked == set(two[name]) - kept
    assert {tuple(tp) for ps in workers.status("c")["assigned"] for tp in ps} == set(three["c"])


def test_max_poll_interval_leaves_the_group_and_stale_commit_fails(fab):
    fab.create_topic(TOPIC, partitions=2)
    produce(fab, 2, 3)
    lost: list = []
    slow = fab.consumer(TOPIC, group_id=GROUP, max_poll_interval_ms=800, on_revoke=lost.append, **FAST)
    busy = fab.consumer(TOPIC, group_id=GROUP, **FAST)
    try:
        wait_for(lambda: slow.poll(0.05) is not None and busy.poll(0.05) is not None
                 and len(slow.assignment()) == 1 and len(busy.assignment()) == 1, 30, "two members, one each")
        held, revokes = slow.assignment(), len(lost)
        wait_for(lambda: busy.poll(0.05) is not None and len(busy.assignment()) == 2, 30,
                 "the slow member (not polling) to leave and the busy one to take everything")
        with pytest.raises(CommitFailedError, match="rebalanced"):
            slow.commit({(TOPIC, 0): 1})
        slow.poll(0.05)  # acts on having left: the partition is reported lost, then it rejoins
        assert lost[revokes:] == [held]
    finally:
        slow.close()
        busy.close()
