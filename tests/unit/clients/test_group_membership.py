"""A group member's reaction to a heartbeat answered as stale (fabric.client.membership), over a real embedded
coordinator: as Kafka's consumer on ILLEGAL_GENERATION, it gives its partitions up and rejoins under the same
member id, so the group never lists a second, abandoned id for it."""
from __future__ import annotations

import threading
from typing import Any

from fabric.client.embedded import EmbeddedCluster
from fabric.client.membership import GroupMember
from fabric.common.errors import IllegalGenerationError
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
