"""A group member's reaction to a heartbeat answered as stale (fabric.client.membership), over a real embedded
coordinator: as Kafka's consumer on ILLEGAL_GENERATION, it gives its partitions up and rejoins under the same
member id, so the group never lists a second, abandoned id for it."""
from __future__ import annotations

import threading
from typing import Any

from fabric.client.embedded import EmbeddedCluster
from fabric.client.membership import GroupMember
from fabric.common.errors import CoordinatorUnavailableError, IllegalGenerationError
from fabric.common.waiting import wait_for

BOTH = [("t", 0), ("t", 1)]


class StaleHeartbeat:
    """A real coordinator whose next heartbeat, once `stale` is set, is answered as from a stale generation: what
    a heartbeat sent just before its member's own sync gets, when its answer comes before the member took the new
    generation in."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.stale = inner, threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        if self.stale.is_set():
            self.stale.clear()
            raise IllegalGenerationError(f"generation {generation} is stale: the group is at a newer one")
        self.inner.heartbeat(group, member_id, generation)


def test_a_member_fenced_for_a_stale_generation_rejoins_under_its_own_id(fabric_dir):
    cluster = EmbeddedCluster(fabric_dir)
    cluster.create_topic("t", 2, {}, None)
    coordinator = StaleHeartbeat(cluster.coordinator)
    lost: list[list[Any]] = []
    member = GroupMember(coordinator, "g", ["t"], session_timeout_ms=60000, heartbeat_interval_ms=50,
                         on_lost=lost.append)
    try:
        wait_for(lambda: member.poll() or member.assignment() == BOTH, 30, "the member's first assignment")
        first = member.member_id
        coordinator.stale.set()
        wait_for(lambda: member.poll() or (lost and member.assignment() == BOTH), 30,
                 "the member to lose its partitions and get them again")
        assert lost == [BOTH]  # fenced: given up without a commit, as they may be another member's now
        assert member.member_id == first
        assert [m.member_id for m in cluster.coordinator.describe_group("g").members] == [first]
    finally:
        member.close()
    assert cluster.coordinator.describe_group("g").members == ()
    cluster.close()


class FailingCoordinator:
    """A real coordinator whose next heartbeat, once `broken` is set, fails with an error no transport classifies
    (a bug's RuntimeError), and whose leave_group fails as unavailable while `unreachable` is set; each
    leave_group notes whether its `member` was fenced already then."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.broken, self.unreachable = inner, threading.Event(), threading.Event()
        self.heartbeats = 0
        self.member: Any = None
        self.fenced_at_leave: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        if self.broken.is_set():
            self.broken.clear()
            raise RuntimeError("an unexpected failure")
        self.heartbeats += 1
        self.inner.heartbeat(group, member_id, generation)

    def leave_group(self, group: str, member_id: str) -> None:
        self.fenced_at_leave.append(self.member is not None and self.member._fenced)
        if self.unreachable.is_set():
            raise CoordinatorUnavailableError("the coordinator is unreachable")
        self.inner.leave_group(group, member_id)


def test_the_heartbeat_thread_outlives_an_unexpected_failure_and_a_leave_it_cannot_send(fabric_dir):
    """An unclassified failure of one heartbeat does not end the member's heartbeats; and a member that passed
    max_poll_interval_ms while the coordinator could not be told that it leaves is fenced all the same: its next
    poll gives its partitions up and joins again (as a new member, once the coordinator evicted the old one after
    its session timeout). It is fenced before the leave is sent, in the same step, under poll()'s lock, as the
    heartbeat thread finds it overdue: a poll racing the leave hands out nothing of the generation being left (it
    left first, then was fenced: a poll in that gap handed out buffered records of partitions the group was giving
    to others)."""
    cluster = EmbeddedCluster(fabric_dir)
    cluster.create_topic("t", 2, {}, None)
    coordinator = FailingCoordinator(cluster.coordinator)
    lost: list[list[Any]] = []
    member = GroupMember(coordinator, "g", ["t"], session_timeout_ms=2000, heartbeat_interval_ms=50,
                         max_poll_interval_ms=60000, on_lost=lost.append)
    coordinator.member = member
    try:
        wait_for(lambda: member.poll() or member.assignment() == BOTH, 30, "the member's first assignment")
        coordinator.broken.set()
        wait_for(lambda: not coordinator.broken.is_set(), 30, "the failing heartbeat")
        after = coordinator.heartbeats
        wait_for(lambda: coordinator.heartbeats > after, 30, "a heartbeat after the failure")
        coordinator.unreachable.set()
        member.max_poll_interval_ms = 100  # no poll for longer than that from now on
        wait_for(lambda: member._fenced and coordinator.fenced_at_leave, 30,
                 "the member to leave, fenced, though the coordinator was not told")
        assert coordinator.fenced_at_leave == [True]
        coordinator.unreachable.clear()
        wait_for(lambda: member.poll() or (lost and member.assignment() == BOTH), 30,
                 "the member to give its partitions up and join again")
        assert lost == [BOTH]
    finally:
        member.close()
    cluster.close()

