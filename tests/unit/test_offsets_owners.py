"""Sharing the offsets topic's partitions out among coordinator instances (coordinator/offsets_owners.py `assign`):
every partition goes to a live instance, none holds more than its fair share, a live owner within its share keeps
its partitions, and a partition that moves gets an epoch above every earlier one and at least the controller's."""
from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from fabric.coordinator.offsets_owners import Instance, Owner, assign

PARTITIONS = 16
IDS = ["a", "b", "c", "d"]


@st.composite
def situations(draw: st.DrawFn) -> tuple[dict[int, Owner], dict[str, Instance], int]:
    """Owners as an earlier assignment left them (some of instances now gone or restarted), the live instances,
    and the controller's epoch."""
    live = {i: Instance(f"{i}:1", draw(st.integers(1, 3))) for i in draw(st.sets(st.sampled_from(IDS)))}
    current = {}
    for p in range(PARTITIONS):
        if draw(st.booleans()):
            instance_id = draw(st.sampled_from(IDS))
            current[p] = Owner(instance_id, f"{instance_id}:1", draw(st.integers(1, 3)), draw(st.integers(0, 50)))
    return current, live, draw(st.integers(0, 60))


@given(situations())
def test_every_partition_goes_to_a_live_instance_within_its_share_with_a_newer_epoch(situation) -> None:
    current, live, floor = situation
    changes = assign(current, live, PARTITIONS, floor)
    if not live:
        assert changes == {}
        return
    after = {**current, **changes}
    assert sorted(after) == list(range(PARTITIONS))
    share = math.ceil(PARTITIONS / len(live))
    for instance_id, instance in live.items():
        held = [p for p, o in after.items() if o.instance_id == instance_id]
        assert len(held) <= share
        assert all(Instance(after[p].address, after[p].session) == instance for p in held)
    for p, owner in changes.items():
        assert owner.epoch >= floor and (p not in current or owner.epoch > current[p].epoch)
    kept = {p for p in current if p not in changes}
    assert all(current[p].instance_id in live for p in kept)


def test_a_balanced_assignment_moves_nothing_and_a_new_instance_takes_only_its_share() -> None:
    live = {"a": Instance("a:1", 1), "b": Instance("b:1", 1)}
    first = assign({}, live, PARTITIONS, 5)
    assert sorted(first) == list(range(PARTITIONS)) and {o.epoch for o in first.values()} == {5}
    assert assign(first, live, PARTITIONS, 6) == {}
    third = {**live, "c": Instance("c:1", 1)}
    moved = assign(first, third, PARTITIONS, 6)
    assert {o.instance_id for o in moved.values()} == {"c"} and len(moved) == PARTITIONS - 2 * 6
    restarted = {**live, "b": Instance("b:1", 2)}  # a new session of b: its partitions get new epochs
    again = assign(first, restarted, PARTITIONS, 6)
    assert sorted(again) == sorted(p for p, o in first.items() if o.instance_id == "b")
    assert all(o.session == 2 and o.epoch == 6 for o in again.values())
