"""offsets.retention.minutes (Kafka's, KIP-211) on the SQLite store, its time moved by hand: a group's offsets and
state are forgotten once it has had no live member and no commit for the retention, counted from its newest
commit and from when its last member left (or its session ended); never while a member is live, and never an
offset committed after the pass looked."""
from __future__ import annotations

import pytest

from fabric.common.types import GroupStatus, JoinRequest
from fabric.coordinator.offsets_topic import OffsetsTopic
from fabric.coordinator.sqlite_store import SqliteCoordinator

RETENTION_MS = 7 * 24 * 3600 * 1000
SESSION_MS = 30_000


@pytest.fixture
def coord(tmp_path, clock):
    """A SqliteCoordinator whose groups and offsets tell time by `clock`, with a topic t of 2 partitions."""
    store = SqliteCoordinator(str(tmp_path / "meta" / "metadata.db"))
    store.use_offsets_topic(OffsetsTopic.in_directory(str(tmp_path / "offsets"), clock=clock))
    store._groups.clock = clock
    store.create_topic("t", 2, {}, None)
    store.create_topic("u", 1, {}, None)
    yield store
    store.close()


def join(coord: SqliteCoordinator, group: str) -> str:
    """A member of `group`, joined and synced; its id."""
    joined = coord.join_group(JoinRequest(group, "", ("t",), session_timeout_ms=SESSION_MS))
    coord.sync_group(group, joined.member_id, joined.generation)
    return joined.member_id


def test_a_standalone_groups_offsets_go_once_its_newest_commit_is_older_than_the_retention(coord, clock) -> None:
    coord.commit_offsets("old", {("t", 0): 5, ("t", 1): 6})
    clock.ms += RETENTION_MS // 2
    coord.commit_offsets("old", {("t", 1): 7})  # the newest commit counts, for every partition of the group
    clock.ms += RETENTION_MS // 2 + 1
    assert coord.expire_groups(RETENTION_MS).groups == []
    coord.commit_offsets("recent", {("t", 0): 1})
    clock.ms += RETENTION_MS // 2
    assert coord.expire_groups(RETENTION_MS).groups == ["old"]
    assert coord.committed("old") == {} and coord.list_groups() == ["recent"]
    assert coord.committed("recent")[("t", 0)].offset == 1
    reopened = OffsetsTopic.in_directory(coord.offsets_topic.log.directory)  # tombstones, read back from the log
    assert reopened.groups() == ["recent"]


def test_a_group_with_a_live_member_keeps_its_offsets_and_the_retention_counts_from_its_leaving(coord, clock) -> None:
    retention_ms = 4 * SESSION_MS  # (a member heartbeats within its session, so a short retention here)
    member = join(coord, "live")
    coord.commit_offsets("live", {("t", 0): 3}, generation=1, member_id=member)
    for _ in range(30):  # the commit gets old, the member heartbeating all along
        clock.ms += SESSION_MS // 3
        coord.heartbeat("live", member, 1)
        assert coord.expire_groups(retention_ms).groups == []
    coord.leave_group("live", member)
    clock.ms += retention_ms - 1
    assert coord.expire_groups(retention_ms).groups == []
    clock.ms += 1
    assert coord.expire_groups(retention_ms).groups == ["live"]
    assert coord.committed("live") == {} and coord.describe_group("live").state == GroupStatus.DEAD


def test_a_member_whose_session_ended_counts_as_gone_from_its_sessions_end(coord, clock) -> None:
    member = join(coord, "silent")
    coord.commit_offsets("silent", {("t", 0): 3}, generation=1, member_id=member)
    clock.ms += RETENTION_MS  # the member died at the start; nothing rewrote the group's state since
    assert coord.expire_groups(RETENTION_MS).groups == []  # gone for the retention less its session
    clock.ms += 2 * SESSION_MS
    assert coord.expire_groups(RETENTION_MS).groups == ["silent"]


def test_a_group_that_never_committed_is_forgotten_once_empty_that_long(coord, clock) -> None:
    member = join(coord, "idle")
    coord.leave_group("idle", member)
    clock.ms += RETENTION_MS
    assert coord.expire_groups(RETENTION_MS).groups == ["idle"]
    assert "idle" not in coord.group_store.list()


def test_offsets_committed_after_the_cutoff_are_never_tombstoned(coord, clock) -> None:
    coord.commit_offsets("racing", {("t", 0): 5})
    clock.ms += RETENTION_MS + 1
    cutoff = clock.ms - RETENTION_MS
    coord.commit_offsets("racing", {("t", 1): 9})  # after the pass looked at the group, before its tombstones
    assert coord.offsets_topic.expire_offsets("racing", cutoff) == [("t", 0)]  # the newer one is not old enough
    assert {tp: c.offset for tp, c in coord.committed("racing").items()} == {("t", 1): 9}


def test_a_live_group_forgets_old_offsets_of_topics_its_members_no_longer_subscribe_to(coord, clock) -> None:
    """KIP-496: the group moved from topic u to topic t; u's offset goes once the retention passed since it was
    committed, while the members live on and t's offsets stay however old."""
    retention_ms = 4 * SESSION_MS
    coord.commit_offsets("moved", {("u", 0): 4})  # before its members subscribed to t only
    member = join(coord, "moved")
    coord.commit_offsets("moved", {("t", 0): 3}, generation=1, member_id=member)
    clock.ms += SESSION_MS // 3
    coord.commit_offsets("moved", {("u", 0): 5}, generation=1, member_id=member)  # renewed: counts from here
    for _ in range(11):  # u's renewed offset 110 s old, t's 120 s
        clock.ms += SESSION_MS // 3
        coord.heartbeat("moved", member, 1)
        assert coord.expire_groups(retention_ms).partitions == {}
    clock.ms += SESSION_MS // 3
    coord.heartbeat("moved", member, 1)
    expired = coord.expire_groups(retention_ms)
    assert (expired.groups, expired.partitions) == ([], {"moved": [("u", 0)]})
    assert {tp: c.offset for tp, c in coord.committed("moved").items()} == {("t", 0): 3}
    assert coord.describe_group("moved").state == GroupStatus.STABLE
