"""One partition replica hosted by a data node: its role as an explicit state machine with leader epochs.

States (docs/replication.md, "Replication on the nodes"):
- OFFLINE: the node serves nothing of it (not yet told, the partition has no leader, the node is fenced, or
  it is no longer assigned here).
- LEADER(epoch): the controller made this node the leader under `epoch`; it serves appends and fetches.
- FOLLOWER(epoch): another node leads under `epoch`. Phase 3 has replication factor 1 only in mind: a
  follower serves nothing yet; phase 4's fetcher copies the leader's frames while in this state.

Transitions come from the controller's states (`become`): a state with a higher leader epoch moves to LEADER
or FOLLOWER (or OFFLINE when it has no leader); the same epoch only refreshes the ISR and partition epoch; an
older one is stale and ignored, so the node never moves back in epoch. `fence` (the node's own registration
lapsed, or the partition left it) moves to OFFLINE keeping the epoch: the controller's next state decides again
(a lapsed node's partitions carry a newer epoch by then, a deleted partition none).

A request quotes the leader epoch the client knows (`check_leader`): one for an older epoch is refused with
FencedLeaderEpochError, one the node does not lead with NotLeaderError (both retriable: the client refreshes
its metadata).
"""
from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass

from fabric.common.errors import FencedLeaderEpochError, NotLeaderError
from fabric.common.types import PartitionRegistration, TopicPartition

log = logging.getLogger(__name__)


class Role(str, enum.Enum):
    OFFLINE = "Offline"
    LEADER = "Leader"
    FOLLOWER = "Follower"


@dataclass(frozen=True)
class ReplicaState:
    """The role, the leader epoch it holds under (-1 before any), and the registration it came from."""

    role: Role
    leader_epoch: int
    registration: PartitionRegistration | None = None


class PartitionReplica:
    """The replica of partition `tp` on node `node_id`; thread-safe."""

    def __init__(self, tp: TopicPartition, node_id: int) -> None:
        self.tp, self.node_id = tp, node_id
        self._state = ReplicaState(Role.OFFLINE, -1)
        self._lock = threading.Lock()

    @property
    def state(self) -> ReplicaState:
        return self._state

    @property
    def name(self) -> str:
        return f"{self.tp[0]}-{self.tp[1]}"

    def become(self, registration: PartitionRegistration) -> bool:
        """Apply the controller's state of the partition; True if the role or epoch changed."""
        new = registration.state
        with self._lock:
            old = self._state
            if new.leader_epoch < old.leader_epoch:
                return False  # an older decision than the one applied: stale
            if new.leader is None:
                role = Role.OFFLINE
            else:
                role = Role.LEADER if new.leader == self.node_id else Role.FOLLOWER
            self._state = ReplicaState(role, new.leader_epoch, registration)
        changed = (role, new.leader_epoch) != (old.role, old.leader_epoch)
        if changed:
            log.info("partition %s: %s(epoch %d) -> %s(epoch %d)", self.name, old.role.value, old.leader_epoch,
                     role.value, new.leader_epoch)
        return changed

    def fence(self, why: str) -> None:
        """Stop serving (keeping the epoch) until the controller's next state says otherwise."""
        with self._lock:
            old = self._state
            self._state = ReplicaState(Role.OFFLINE, old.leader_epoch, old.registration)
        if old.role is not Role.OFFLINE:
            log.warning("partition %s: %s(epoch %d) -> Offline: %s", self.name, old.role.value, old.leader_epoch, why)

    def check_leader(self, leader_epoch: int | None) -> ReplicaState:
        """The state, if this node leads the partition under the epoch the request quotes (None: any)."""
        state = self._state
        if state.role is not Role.LEADER:
            leader = state.registration.state.leader if state.registration is not None else None
            raise NotLeaderError(f"node {self.node_id} does not lead {self.name} (it is {state.role.value} at leader "
                                 f"epoch {state.leader_epoch}; the leader is {leader}); refresh the metadata")
        if leader_epoch is not None and leader_epoch < state.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {leader_epoch} of {self.name} is older than node "
                                         f"{self.node_id}'s {state.leader_epoch}; refresh the metadata")
        if leader_epoch is not None and leader_epoch > state.leader_epoch:
            raise NotLeaderError(f"node {self.node_id} has not learned leader epoch {leader_epoch} of {self.name} "
                                 f"yet (it knows {state.leader_epoch}); retry")
        return state
