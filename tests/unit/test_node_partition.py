"""A data node's partition replica (fabric/server/node/partition.py): its role follows the controller's states
and only ever moves forward in leader epoch; requests are refused unless the node leads under the quoted epoch."""
from __future__ import annotations

import pytest

from fabric.common.errors import FencedLeaderEpochError, NotLeaderError
from fabric.common.types import LeaderAndIsr, PartitionAssignment, PartitionRegistration
from fabric.server.node.partition import PartitionReplica, Role


def registration(leader: int | None, leader_epoch: int, isr: tuple[int, ...] = (1,)) -> PartitionRegistration:
    return PartitionRegistration(PartitionAssignment((1, 2)), LeaderAndIsr(leader, leader_epoch, isr, leader_epoch, 1))


def test_the_role_follows_newer_epochs_and_ignores_stale_ones() -> None:
    replica = PartitionReplica(("t", 0), node_id=1)
    assert replica.state.role is Role.OFFLINE
    with pytest.raises(NotLeaderError, match="does not lead t-0"):
        replica.check_leader(None)
    assert replica.become(registration(1, 0))
    assert replica.check_leader(0).role is Role.LEADER and replica.check_leader(None).leader_epoch == 0
    assert replica.become(registration(2, 1, (2,)))
    assert replica.state.role is Role.FOLLOWER
    assert not replica.become(registration(1, 0))  # an older decision arriving late
    assert replica.state.role is Role.FOLLOWER
    assert replica.become(registration(None, 2, (2,)))
    assert replica.state.role is Role.OFFLINE
    assert not replica.become(registration(None, 2, (2,)))  # the same decision again changes nothing


def test_requests_quoting_another_epoch_are_refused() -> None:
    replica = PartitionReplica(("t", 0), node_id=1)
    replica.become(registration(1, 3))
    with pytest.raises(FencedLeaderEpochError, match="epoch 2 of t-0 is older than node 1's 3"):
        replica.check_leader(2)
    with pytest.raises(NotLeaderError, match="has not learned leader epoch 4"):
        replica.check_leader(4)


def test_a_fenced_replica_serves_nothing_until_a_newer_decision() -> None:
    replica = PartitionReplica(("t", 0), node_id=1)
    replica.become(registration(1, 3))
    replica.fence("the node's registration lapsed")
    assert replica.state.role is Role.OFFLINE and replica.state.leader_epoch == 3
    with pytest.raises(NotLeaderError):
        replica.check_leader(3)
    assert replica.become(registration(1, 3))  # the controller's state again (it may still name this node)
    assert replica.state.role is Role.LEADER
