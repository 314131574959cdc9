"""Node liveness leases (coordinator/node_leases.py) on a clock the test controls."""
from __future__ import annotations

import pytest

from fabric.common.errors import StaleNodeEpochError
from fabric.coordinator.node_leases import NodeLeases


@pytest.fixture
def leases(clock) -> NodeLeases:
    return NodeLeases(session_timeout_ms=1000, clock=clock)


def test_a_heartbeat_renews_the_lease(leases: NodeLeases, clock) -> None:
    leases.register(1, 1)
    for _ in range(5):
        clock.ms += 900
        leases.heartbeat(1, 1)
        assert leases.expire() == [] and leases.is_alive(1)
    clock.ms += 1000
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
    clock.ms += 1001
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
    clock.ms += 5000
    assert leases.expire() == []
    with pytest.raises(StaleNodeEpochError):
        leases.release(1, 2)  # released once
    leases.register(1, 3)
    assert leases.alive() == {1}


def test_a_new_controller_grants_every_node_a_full_session(leases: NodeLeases, clock) -> None:
    leases.register(1, 1)
    clock.ms += 999  # node 1 was about to lapse under the old controller
    fresh = NodeLeases(session_timeout_ms=1000, clock=clock)
    fresh.grant_all([(1, 1), (2, 4)])
    clock.ms += 1000
    assert fresh.alive() == {1, 2} and fresh.expire() == []
    fresh.heartbeat(2, 4)
    clock.ms += 1
    assert fresh.expire() == [1] and fresh.alive() == {2}


def test_the_session_timeout_must_be_positive(clock) -> None:
    with pytest.raises(ValueError, match="node.session.timeout.ms"):
        NodeLeases(0, clock)
