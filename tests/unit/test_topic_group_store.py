"""Group states in an offsets topic a coordinator instance owns (coordinator/topic_group_store.py), over the offsets
topic in a directory that one instance at a time owns (as the replicated topic on the data nodes is): a group is a
record without heartbeat times, a heartbeat writes nothing, the next owner loads the groups (members keep their
generation and get a fresh session), a deposed owner's group writes are refused, a delete is a tombstone that
stays, and the groups of the store kept before are moved in once."""
from __future__ import annotations

import json
from typing import Any

import pytest

from fabric.common.errors import CoordinatorUnavailableError
from fabric.common.types import JoinRequest
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.group_store import GroupService, GroupStore
from fabric.coordinator.offsets_log import LocalOffsetsLog
from fabric.coordinator.offsets_records import group_key, offsets_partition
from fabric.coordinator.offsets_topic import OffsetsTopic
from fabric.coordinator.topic_group_store import TopicGroupStore

GROUP = "owned"
SESSION_MS = 10_000


class Instance:
    """One coordinator instance's offsets topic in `directory` under election `epoch`, owned (not shared: loaded
    when it takes the leadership), with its group states in it."""

    def __init__(self, directory: Any, epoch: int, clock: Any, legacy: GroupStore | None = None) -> None:
        self.log = LocalOffsetsLog(str(directory), epoch=lambda: epoch, clock=clock)
        self.log.shared = False  # one writer: this instance while it is active
        self.topic = OffsetsTopic(self.log, clock=clock)
        self.store = TopicGroupStore(self.topic, legacy, clock)
        self.groups = GroupService(self.store, lambda topic: 2, clock)
        self.epoch = epoch

    def take_leadership(self) -> Instance:
        self.topic.take_leadership(self.epoch)
        return self

    def group_records(self, group: str = GROUP) -> list[dict[str, Any] | None]:
        """The values of `group`'s records in the log, oldest first (None: a tombstone)."""
        out: list[dict[str, Any] | None] = []
        for _, records in self.log.read(offsets_partition(group, self.log.partitions), 0):
            out += [v for k, v in zip(records.column(1).to_pylist(), records.column(3).to_pylist(), strict=True)
                    if k == group_key(group)]
        return out


def join(groups: GroupService | Any, group: str = GROUP) -> tuple[str, int]:
    """A member that joined and synced `group` alone (through a GroupService or a Coordinator): its id and
    generation."""
    joined = groups.join_group(JoinRequest(group, "", ("t",), session_timeout_ms=SESSION_MS))
    groups.sync_group(group, joined.member_id, joined.generation)
    return joined.member_id, joined.generation


def test_a_group_is_a_record_without_heartbeat_times_and_a_heartbeat_writes_none(tmp_path, clock) -> None:
    first = Instance(tmp_path, 1, clock)
    with pytest.raises(NotControllerError, match="not the active instance"):  # not loaded: not the owner
        first.groups.join_group(JoinRequest(GROUP, "", ("t",)))
    first.take_leadership()
    member, generation = join(first.groups)
    records = first.group_records()
    stored = records[-1]
    assert stored is not None and stored["next_offset"] == generation == 1
    state = json.loads(stored["metadata"])
    assert (state["state"], state["generation"], list(state["members"])) == ("Stable", 1, [member])
    assert "last_heartbeat_ms" not in state["members"][member]

    clock.ms += SESSION_MS // 2  # past the heartbeat slack: the heartbeat time moves, in memory only
    first.groups.heartbeat(GROUP, member, generation)
    assert first.store.load(GROUP).members[member].last_heartbeat_ms == clock.ms
    assert first.group_records() == records
    clock.ms += SESSION_MS - 1000  # alive only thanks to that heartbeat
    assert [m.member_id for m in first.groups.describe_group(GROUP).members] == [member]
    first.topic.resign()
    with pytest.raises(NotControllerError):
        first.groups.describe_group(GROUP)


def test_the_next_owner_loads_the_group_with_fresh_sessions_and_fences_the_deposed_one(tmp_path, clock) -> None:
    first = Instance(tmp_path, 1, clock).take_leadership()
    member, generation = join(first.groups)
    clock.ms += 3 * SESSION_MS  # the member's session would be over, had it not a fresh one on the load
    second = Instance(tmp_path, 2, clock).take_leadership()
    assert second.store.load(GROUP).members[member].last_heartbeat_ms == clock.ms
    second.groups.heartbeat(GROUP, member, generation)  # same generation: no rebalance
    second.groups.validate_commit(GROUP, member, generation)
    assert second.groups.describe_group(GROUP).generation == generation

    with pytest.raises(CoordinatorUnavailableError, match="deposed"):  # the old owner's late leave
        first.groups.leave_group(GROUP, member)
    assert list(first.store.load(GROUP).members) == [member]  # its memory took nothing that was not written
    assert [m.member_id for m in second.groups.describe_group(GROUP).members] == [member]


def test_a_deleted_group_is_a_tombstone_and_stays_deleted(tmp_path, clock) -> None:
    first = Instance(tmp_path, 1, clock).take_leadership()
    member, _ = join(first.groups)
    join(first.groups, "other")
    first.groups.leave_group(GROUP, member)
    first.groups.delete_group(GROUP)
    assert first.group_records()[-1] is None
    assert first.store.list() == ["other"]
    assert not first.store._writers  # no lock kept for a group nobody writes (groups come and go by the million)
    second = Instance(tmp_path, 2, clock).take_leadership()
    assert second.store.list() == ["other"] and second.groups.describe_group(GROUP) is None


def test_the_groups_of_the_earlier_store_move_in_once(tmp_path, clock, store) -> None:
    member, generation = join(store)  # into the SQLite coordinator's own group store
    join(store, "kept")
    legacy = store.group_store
    first = Instance(tmp_path / "topic", 1, clock, legacy).take_leadership()
    assert first.store.list() == ["kept", GROUP]
    moved = first.store.load(GROUP)
    assert moved is not None and moved.generation == generation and list(moved.members) == [member]
    assert len(first.group_records()) == 1
    first.groups.leave_group(GROUP, member)
    first.groups.delete_group(GROUP)
    join(store, "later")  # reaches the old store only: the migration is done

    second = Instance(tmp_path / "topic", 2, clock, legacy).take_leadership()
    assert second.store.list() == ["kept"]  # the deleted group was not brought back, nor "later" moved in
    assert legacy.list() == ["kept", "later", GROUP]  # the old copies stay, unread


def test_an_instance_serves_the_partitions_it_took_and_a_newer_owner_of_one_fences_only_that_one(tmp_path,
                                                                                                 clock) -> None:
    """Owners per partition: an instance serves the groups and offsets of the partitions it took, and another
    instance taking one of them (with a newer epoch) takes its groups, members and offsets over and fences the
    first there only."""
    first = Instance(tmp_path, 1, clock)
    by_partition = {offsets_partition(g, first.log.partitions): g for g in (f"g{n}" for n in range(500))}
    moved, kept, elsewhere = by_partition[0], by_partition[1], by_partition[2]
    first.topic.take_leadership(1, [0, 1])
    member, generation = join(first.groups, moved)
    join(first.groups, kept)
    first.topic.commit(moved, {("t", 0): 5}, "")
    with pytest.raises(NotControllerError):  # a partition it did not take
        join(first.groups, elsewhere)
    assert first.store.list() == sorted([moved, kept])  # the groups of the partitions it serves

    second = Instance(tmp_path, 2, clock)
    second.topic.take_leadership(2, [0])
    assert second.groups.describe_group(moved).generation == generation
    assert [m.member_id for m in second.groups.describe_group(moved).members] == [member]
    assert {tp: c.offset for tp, c in second.topic.committed(moved).items()} == {("t", 0): 5}
    with pytest.raises(CoordinatorUnavailableError, match="deposed"):
        first.topic.commit(moved, {("t", 0): 6}, "")
    first.topic.commit(kept, {("t", 0): 7}, "")  # its other partition is still its own
    with pytest.raises(NotControllerError):
        second.topic.committed(kept)
    first.topic.resign([0])
    with pytest.raises(NotControllerError):
        first.groups.describe_group(moved)
    assert first.groups.describe_group(kept).generation == 1
