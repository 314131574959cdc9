"""Consumer groups across real OS processes sharing one embedded fabric: partitions are split, a SIGKILLed
member's partitions move after its session timeout, offsets survive, static members rejoin without a
rebalance, and the rebalance callbacks run. Each worker reports its state in a JSON file (kill-safe); the
workers are the `group_workers` fixture's member processes."""
from __future__ import annotations

import os

import pytest

from fabric.common.waiting import wait_for

GROUP = "workers"
TOPIC = "jobs"


@pytest.fixture
def workers(group_workers, fabric_url, tmp_path):
    return group_workers(fabric_url, str(tmp_path / "status"), GROUP, TOPIC)


def committed(fab) -> dict[int, int]:
    return {p: c.offset for (_, p), c in fab.cluster.coordinator.committed(GROUP).items()}


def test_processes_split_partitions_and_survivors_take_over_a_killed_member(fab, workers):
    fab.create_topic(TOPIC, partitions=6)
    workers.produce(fab, 6, 10)
    names = ["a", "b", "c"]
    for name in names:
        workers.start(name)
    first = wait_for(lambda: workers.exact_cover(names, 6), 60, "3 processes to split 6 partitions")
    assert all(len(tps) == 2 for tps in first.values())
    wait_for(lambda: committed(fab) == {p: 10 for p in range(6)}, 30, "all 60 records committed")

    workers.kill("c")  # SIGKILL: no leave, no commit; only the session timeout tells the group
    workers.produce(fab, 6, 10)
    after = wait_for(lambda: workers.exact_cover(["a", "b"], 6), 30, "survivors to take the dead member's partitions")
    assert all(len(tps) == 3 for tps in after.values())
    wait_for(lambda: committed(fab) == {p: 20 for p in range(6)}, 30, "the survivors to commit everything")
    for name in ("a", "b"):  # eager range: everything revoked before the rebalance, new partitions assigned
        status = workers.status(name)
        assert status["revoked"] and [tuple(tp) for tp in status["assigned"][-1]] == after[name]
    assert sum(workers.status(n)["consumed"] for n in ("a", "b")) >= 60

    for name in ("a", "b"):
        workers.stop(name)
    assert fab.cluster.coordinator.describe_group(GROUP).state == "Empty"
    with fab.consumer(TOPIC, group_id=GROUP, **workers.FAST) as late:  # committed offsets survive every member
        wait_for(lambda: late.poll(0.05) == [] and len(late.assignment()) == 6, 20, "a new member's assignment")
        assert {tp[1]: late.position(*tp) for tp in late.assignment()} == {p: 20 for p in range(6)}


@pytest.mark.slow
def test_ten_consumer_processes_cover_every_partition_exactly_once(fab, workers):
    fab.create_topic(TOPIC, partitions=12)
    names = [f"w{i}" for i in range(10)]
    for name in names:
        workers.start(name)
    owned = wait_for(lambda: workers.exact_cover(names, 12), 120, "10 processes to split 12 partitions")
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
    owned = wait_for(lambda: workers.exact_cover(["dynamic", "static"], 4), 60, "two members to split 4 partitions")
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
    two = wait_for(lambda: workers.exact_cover(["a", "b"], 6), 60, "two cooperative members")
    assert all(len(tps) == 3 for tps in two.values())
    earlier = {name: len(workers.status(name)["revoked"]) for name in ("a", "b")}
    workers.start("c", **coop)
    three = wait_for(lambda: workers.exact_cover(["a", "b", "c"], 6), 60, "the third member to get its share")
    assert all(len(tps) == 2 for tps in three.values())
    for name in ("a", "b"):
        kept = set(three[name])
        assert kept < set(two[name])  # sticky: nothing new, only what moved was given up
        revoked = {tuple(tp) for ps in workers.status(name)["revoked"][earlier[name]:] for tp in ps}
        assert revoked == set(two[name]) - kept
    assert {tuple(tp) for ps in workers.status("c")["assigned"] for tp in ps} == set(three["c"])
