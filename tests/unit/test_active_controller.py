"""The active controller (coordinator/active_controller.py) over a real SQLite store and a clock the test moves:
events decided and persisted, a lost compare-and-set race decided again (boundedly), a deposed controller."""
from __future__ import annotations

from dataclasses import replace

import pytest

from fabric.common.errors import (
    CoordinatorUnavailableError,
    DuplicateNodeRegistrationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidUpdateVersionError,
    StaleControllerEpochError,
    StaleNodeEpochError,
)
from fabric.common.types import LeaderAndIsr, PartitionAssignment
from fabric.coordinator import active_controller
from fabric.coordinator.active_controller import ActiveController
from fabric.coordinator.controller import DecisionKind, Election
from fabric.coordinator.node_leases import NodeLeases
from fabric.coordinator.sqlite_store import SqliteCoordinator

SESSION_MS = 1000


@pytest.fixture
def controller(store, clock) -> ActiveController:
    """The controller of a fresh epoch with nodes 1, 2, 3 registered and alive; placement starts at index 0."""
    made = ActiveController(store, store.claim_controller_epoch(), NodeLeases(SESSION_MS, clock), lambda n: 0)
    for i in (1, 2, 3):
        made.register_node(i, f"h{i}:9092", directory_id=f"dir{i}")
    return made


def states(store, topic: str = "t") -> dict[int, LeaderAndIsr]:
    return {tp[1]: reg.state for tp, reg in store.partition_registrations([topic]).items()}


def beat(controllers: list[ActiveController], clock, *alive: int, ms: int = SESSION_MS) -> None:
    """Let `ms` pass with the `alive` nodes heartbeating on time to each of `controllers`."""
    for _ in range(ms // 500):
        clock.ms += 500
        for controller in controllers:
            for i in alive:
                controller.heartbeat(i, controller.nodes()[i].node_epoch)


def test_create_topic_places_replicas_and_persists_the_first_leaders(controller, store) -> None:
    info = controller.create_topic("t", 3, 3, {"min.insync.replicas": "2"}, None)
    assert (info.partitions, store.topic("t").config) == (3, {"min.insync.replicas": "2"})
    regs = store.partition_registrations(["t"])
    assert [reg.assignment for reg in regs.values()] == [PartitionAssignment(r)
                                                         for r in ((1, 2, 3), (2, 3, 1), (3, 1, 2))]
    assert states(store)[1] == LeaderAndIsr(2, 0, (2, 3, 1), 0, controller.controller_epoch)
    with pytest.raises(InvalidReplicationFactorError, match="start more nodes"):
        controller.create_topic("big", 1, 4, {}, None)


def test_a_node_whose_lease_lapses_loses_leadership_and_comes_back_by_registering(controller, store, clock) -> None:
    controller.create_topic("t", 1, 2, {}, None)  # replicas (1, 2)
    beat([controller], clock, 2, 3)
    assert controller.expire_nodes() == []  # exactly one session timeout: not yet
    beat([controller], clock, 2, 3)
    decisions = controller.expire_nodes()
    assert [(d.kind, d.after.leader) for d in decisions] == [(DecisionKind.ELECTED, 2)]
    assert states(store)[0] == LeaderAndIsr(2, 1, (2,), 1, controller.controller_epoch)
    assert not controller.nodes()[1].alive

    beat([controller], clock, 3, ms=2 * SESSION_MS)
    controller.expire_nodes()
    assert states(store)[0].leader is None  # its last in-sync replica died: offline
    controller.register_node(2, "h2:9092", directory_id="dir2")
    assert states(store)[0] == LeaderAndIsr(2, 3, (2,), 3, controller.controller_epoch)


def test_a_live_node_id_is_refused_to_another_data_directory_and_a_restart_on_its_own_fences_the_old(
        controller, store, clock) -> None:
    """One process per node id (Kafka's DUPLICATE_BROKER_REGISTRATION): while node 1's lease is alive, a
    registration from another data directory is refused, naming the id and the live address, and changes
    nothing (registration, node epoch, partitions). A registration from node 1's own directory is a restart (the
    old process held the directory's lock, so it is gone): accepted at once, fencing the old epoch. Once the
    lease lapses, another directory (a replaced disk) registers."""
    controller.create_topic("t", 1, 3, {}, None)
    before, node = states(store)[0], controller.nodes()[1]
    with pytest.raises(DuplicateNodeRegistrationError,
                       match=r"node id 1 is held by a live node process at h1:9092 \(data directory id dir1"):
        controller.register_node(1, "h9:9092", directory_id="another-disk")
    assert controller.nodes()[1] == node and store.registered_nodes()[0] == replace(node, alive=False)
    assert states(store)[0] == before
    controller.heartbeat(1, node.node_epoch)  # the live process keeps its lease

    restarted = controller.register_node(1, "h1:9093", directory_id="dir1")
    assert restarted.node_epoch == node.node_epoch + 1
    with pytest.raises(StaleNodeEpochError):
        controller.heartbeat(1, node.node_epoch)

    beat([controller], clock, 2, 3, ms=2 * SESSION_MS)
    controller.expire_nodes()
    replaced = controller.register_node(1, "h1:9094", directory_id="another-disk")
    assert replaced.node_epoch == restarted.node_epoch + 1
    assert store.registered_nodes()[0].directory_id == "another-disk"


def test_unclean_election_when_the_topic_enables_it(controller, store, clock) -> None:
    controller.create_topic("t", 1, 2, {"unclean.leader.election.enable": "true"}, None)
    leader_epoch = states(store)[0].leader_epoch
    controller.alter_partition(("t", 0), 1, controller.nodes()[1].node_epoch, leader_epoch, 0, (1,))  # 2 lags
    beat([controller], clock, 2, 3, ms=2 * SESSION_MS)
    [decision] = controller.expire_nodes()
    assert decision.kind is DecisionKind.UNCLEAN_ELECTED and states(store)[0].leader == 2


def test_alter_partition_is_persisted_and_a_stale_partition_epoch_refused(controller, store) -> None:
    controller.create_topic("t", 1, 3, {}, None)
    epoch = controller.nodes()[1].node_epoch
    shrunk = controller.alter_partition(("t", 0), 1, epoch, 0, 0, (1, 3))
    assert shrunk == states(store)[0] == LeaderAndIsr(1, 0, (1, 3), 1, controller.controller_epoch)
    with pytest.raises(InvalidUpdateVersionError):
        controller.alter_partition(("t", 0), 1, epoch, 0, 0, (1,))
    assert states(store)[0] == shrunk


def test_preferred_leader_election_and_added_partitions(controller, store, clock) -> None:
    controller.create_topic("t", 2, 2, {}, None)  # (1, 2) and (2, 3)
    beat([controller], clock, 2, 3, ms=2 * SESSION_MS)
    controller.expire_nodes()
    controller.register_node(1, "h1:9092", directory_id="dir1")
    t0 = states(store)[0]
    controller.alter_partition(("t", 0), 2, controller.nodes()[2].node_epoch, t0.leader_epoch,
                               t0.partition_epoch, (1, 2))
    [decision] = controller.elect_leaders(Election.PREFERRED)
    assert decision.partition == ("t", 0) and states(store)[0].leader == 1
    assert controller.add_partitions("t", 4).partitions == 4
    assert [reg.assignment.replicas for reg in store.partition_registrations(["t"]).values()][2:] == [(3, 1), (1, 3)]
    with pytest.raises(InvalidPartitionsError, match="only grow"):
        controller.add_partitions("t", 4)


class RacingStore:
    """The SQLite store with a rival writer: before each of the first `losses` state updates, another node's
    ISR change lands first, so the update loses its compare-and-set."""

    def __init__(self, store: SqliteCoordinator, losses: int) -> None:
        self.store, self.losses, self.attempts = store, losses, 0

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def update_partition_states(self, updates) -> bool:
        self.attempts += 1
        if self.attempts <= self.losses:
            for tp in updates:
                s = self.store.partition_registrations([tp[0]])[tp].state
                rival = LeaderAndIsr(s.leader, s.leader_epoch, s.isr, s.partition_epoch + 1, s.controller_epoch)
                assert self.store.update_partition_states({tp: (s.partition_epoch, rival)})
        return self.store.update_partition_states(updates)


def test_a_lost_race_is_decided_again_on_a_fresh_read(controller, store, clock, monkeypatch) -> None:
    controller.create_topic("t", 1, 3, {}, None)
    racing = RacingStore(store, losses=2)
    controller.store = racing
    beat([controller], clock, 1, 3, ms=2 * SESSION_MS)
    [decision] = controller.expire_nodes()
    assert racing.attempts == 3
    assert decision.before.partition_epoch == 2  # decided on the rival's latest state
    assert states(store)[0] == LeaderAndIsr(1, 0, (1, 3), 3, controller.controller_epoch)


def test_the_retry_is_bounded(controller, store, clock, monkeypatch) -> None:
    controller.create_topic("t", 1, 3, {}, None)
    monkeypatch.setattr(active_controller, "conflict_backoff", lambda attempt: None)
    controller.store = RacingStore(store, losses=10**6)
    beat([controller], clock, 1, 3, ms=2 * SESSION_MS)
    with pytest.raises(CoordinatorUnavailableError, match=f"changed {active_controller.MAX_ATTEMPTS} times"):
        controller.expire_nodes()
    assert controller.store.attempts == active_controller.MAX_ATTEMPTS


def test_a_deposed_controller_changes_nothing(controller, store, clock) -> None:
    controller.create_topic("t", 1, 3, {}, None)
    successor = ActiveController(store, store.claim_controller_epoch(), NodeLeases(SESSION_MS, clock))
    assert successor.nodes()[1].alive  # a new controller grants every registered node a full session
    beat([controller, successor], clock, 1, 3, ms=2 * SESSION_MS)
    with pytest.raises(StaleControllerEpochError):
        controller.expire_nodes()
    assert states(store)[0].isr == (1, 2, 3)
    assert [d.after for d in successor.expire_nodes()] == [LeaderAndIsr(1, 0, (1, 3), 1, successor.controller_epoch)]


def test_a_controlled_shutdown_moves_leadership_at_once_and_a_failed_one_leaves_the_node_to_its_lease(
        controller, store, clock, monkeypatch) -> None:
    """Kafka's controlled shutdown: the stopping node dies now, not a session later (its leaderships go to
    in-sync replicas, it leaves every ISR); a stale node epoch is refused; a decision that cannot be stored leaves
    its lease, so the lease's expiry still moves its partitions."""
    controller.create_topic("t", 2, 3, {}, None)  # partition 0 led by 1, partition 1 by 2
    with pytest.raises(StaleNodeEpochError):
        controller.controlled_shutdown(1, controller.nodes()[1].node_epoch + 1)
    monkeypatch.setattr(active_controller, "conflict_backoff", lambda attempt: None)
    real, controller.store = controller.store, RacingStore(store, losses=10**6)
    with pytest.raises(CoordinatorUnavailableError):
        controller.controlled_shutdown(1, controller.nodes()[1].node_epoch)
    controller.store = real
    assert controller.nodes()[1].alive and states(store)[0].leader == 1  # nothing changed: still leased

    decisions = controller.controlled_shutdown(1, controller.nodes()[1].node_epoch)
    assert sorted((d.partition[1], d.kind, d.after.leader) for d in decisions) == [
        (0, DecisionKind.ELECTED, 2), (1, DecisionKind.ISR_CHANGED, 2)]
    assert all(1 not in s.isr for s in states(store).values())
    assert not controller.nodes()[1].alive
    assert controller.expire_nodes() == []  # no lease left to lapse: nothing decided twice
    with pytest.raises(StaleNodeEpochError):
        controller.heartbeat(1, controller.nodes()[1].node_epoch)  # it must register again to come back
