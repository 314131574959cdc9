"""Node liveness leases (coordinator/node_leases.py) on a clock the test controls. A running controller looks at
its leases every check interval (`elapse` moves the clock so); a longer gap is a pause of its own."""
from __future__ import annotations

import pytest

from fabric.common.errors import StaleNodeEpochError
from fabric.coordinator.node_leases import NodeLeases, check_interval_ms

SESSION_MS = 1000


@pytest.fixture
def leases(clock) -> NodeLeases:
    return NodeLeases(session_timeout_ms=SESSION_MS, clock=clock)


def elapse(leases: NodeLeases, clock, ms: int) -> None:
    """Move the clock `ms` on while the controller runs: it looks at its leases every check interval."""
    step = check_interval_ms(SESSION_MS)
    while ms > 0:
        clock.ms += min(step, ms)
        ms -= step
        leases.alive()


def test_a_heartbeat_renews_the_lease(leases: NodeLeases, clock) -> None:
    leases.register(1, 1)
    for _ in range(5):
        elapse(leases, clock, 900)
        leases.heartbeat(1, 1)
        assert leases.expire() == [] and leases.is_alive(1)
    elapse(leases, clock, 1000)
    assert leases.is_alive(1)  # exactly one session timeout: not yet
    clock.ms += 1
    assert not leases.is_alive(1)
    assert leases.expire() == [1]
    assert leases.expire() == []  # reported once


def test_dead_or_fenced_nodes_must_register_again(leases: NodeLeases, clock) -> None:
    leases.register(1, 1)
    leases.register(1, 2)  # a restart: the old process's epoch is fenced
    with pytest.raises(StaleNodeEpochError, match="register the node again"):
        leases.heartbeat(1, 1)
    with pytest.raises(StaleNodeEpochError, match="not newer"):
        leases.register(1, 2)
    elapse(leases, clock, 1001)
    with pytest.raises(StaleNodeEpochError):  # its session timed out, even before expire() declared it
        leases.heartbeat(1, 2)
    assert leases.expire() == [1]
    with pytest.raises(StaleNodeEpochError):
        leases.heartbeat(1, 2)
    with pytest.raises(StaleNodeEpochError):
        leases.heartbeat(7, 1)  # never registered
    leases.register(1, 3)
    assert leases.alive() == {1}


def test_a_released_lease_ends_at_once_for_its_own_epoch_only(leases: NodeLeases, clock) -> None:
    """A controlled shutdown releases the lease: the node is dead at once, never reported by expire(), and must
    register again; an older epoch (a zombie's) cannot release the current process's lease."""
    leases.register(1, 2)
    with pytest.raises(StaleNodeEpochError):
        leases.release(1, 1)
    assert leases.is_alive(1)
    leases.release(1, 2)
    assert not leases.is_alive(1) and leases.alive() == set()
    elapse(leases, clock, 5000)
    assert leases.expire() == []
    with pytest.raises(StaleNodeEpochError):
        leases.release(1, 2)  # released once
    leases.register(1, 3)
    assert leases.alive() == {1}


def test_a_new_controller_grants_every_node_a_full_session(leases: NodeLeases, clock) -> None:
    leases.register(1, 1)
    elapse(leases, clock, 999)  # node 1 was about to lapse under the old controller
    fresh = NodeLeases(session_timeout_ms=SESSION_MS, clock=clock)
    fresh.grant_all([(1, 1), (2, 4)])
    elapse(fresh, clock, 1000)
    assert fresh.alive() == {1, 2} and fresh.expire() == []
    fresh.heartbeat(2, 4)
    clock.ms += 1
    assert fresh.expire() == [1] and fresh.alive() == {2}


def test_the_session_timeout_must_be_positive(clock) -> None:
    with pytest.raises(ValueError, match="node.session.timeout.ms"):
        NodeLeases(0, clock)


def test_a_paused_controller_gives_every_live_node_a_full_session(leases: NodeLeases, clock) -> None:
    """The controller itself stopped (SIGSTOP, a stalled machine) for longer than a session: no node could reach
    it, so none is dead for that. Its first call afterwards, whichever it is (the lease-checking tick, or a
    heartbeat that was waiting), renews every lease that had not lapsed before the gap for a full session; a node
    that stays silent for that session is declared dead then."""
    leases.register(1, 1)
    leases.register(2, 1)
    leases.register(3, 1)
    elapse(leases, clock, 600)
    leases.heartbeat(1, 1)
    leases.heartbeat(2, 1)
    clock.ms += 10_000  # paused: no tick, no heartbeat served
    leases.heartbeat(2, 1)  # a heartbeat served before the tick is not refused
    assert leases.expire() == [] and leases.alive() == {1, 2, 3}
    elapse(leases, clock, 900)
    leases.heartbeat(1, 1)
    leases.heartbeat(2, 1)
    elapse(leases, clock, 101)
    assert leases.expire() == [3]  # silent for a full session after the pause
    assert leases.alive() == {1, 2}


def test_the_pause_is_a_gap_of_over_half_a_session_and_revives_no_lapsed_lease(leases: NodeLeases, clock) -> None:
    """Half a session without a call is still the controller's cadence (it looks every quarter session), and a
    lease already lapsed when the gap began stays lapsed: the node was silent while the controller listened."""
    leases.register(1, 1)
    leases.register(2, 1)
    elapse(leases, clock, 900)
    leases.heartbeat(2, 1)
    clock.ms += SESSION_MS // 2  # late, but no pause: node 1 lapses as it would have
    assert not leases.is_alive(1) and leases.is_alive(2)
    clock.ms += 5000  # a pause after node 1 lapsed
    assert leases.alive() == {2}
    assert leases.expire() == [1]


def test_the_next_lapse_is_the_first_lease_to_end(leases: NodeLeases, clock) -> None:
    assert leases.next_lapse_ms() is None
    leases.register(1, 1)
    elapse(leases, clock, 300)
    leases.register(2, 1)
    assert leases.next_lapse_ms() == clock.ms - 300 + SESSION_MS
    leases.heartbeat(1, 1)
    assert leases.next_lapse_ms() == clock.ms + SESSION_MS  # both end a session from now
    elapse(leases, clock, SESSION_MS + 1)
    assert leases.expire() == [1, 2] and leases.next_lapse_ms() is None
