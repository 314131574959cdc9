"""The controller inside a coordinator instance (fabric/server/controller_driver.py) over a real SQLite store
and a clock the test moves: idle until promoted, node calls and describe_cluster while running, leases expired
by ticks, nothing decided once demoted or deposed by a newer controller epoch."""
from __future__ import annotations

import pytest

from fabric.common.errors import (
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidRequestError,
    StaleControllerEpochError,
    StaleNodeEpochError,
)
from fabric.common.types import ClusterDescription, NodeAssignment, NodeHeartbeat, NodeInfo
from fabric.server.controller_driver import ControllerDriver, ControllerNotRunningError, ControllerState

SESSION_MS = 1000


@pytest.fixture
def driver(store, clock) -> ControllerDriver:
    made = ControllerDriver(store, SESSION_MS, clock)
    made.promote(store.claim_controller_epoch)
    return made


def test_an_idle_instance_serves_no_controller_call(store, clock) -> None:
    idle = ControllerDriver(store, SESSION_MS, clock)
    assert idle.state is ControllerState.IDLE
    with pytest.raises(ControllerNotRunningError, match="not running the controller"):
        idle.register_node(1, "127.0.0.1:9095", directory_id="dir1")


def test_nodes_register_heartbeat_and_learn_their_partitions(driver, clock) -> None:
    assert driver.state is ControllerState.RUNNING
    one = driver.register_node(1, "127.0.0.1:9095", directory_id="dir1")
    driver.register_node(2, "127.0.0.1:9096", None, directory_id="dir2")
    driver.create_topic("t", 4, 1, {}, None)
    assignment = driver.node_heartbeat(1, one.node_epoch)
    assert sorted(assignment.partitions) == [tp for tp, reg in driver.describe_cluster().partitions.items()
                                             if reg.assignment.replicas == (1,)]
    assert assignment.topics["t"].partitions == 4
    with pytest.raises(StaleNodeEpochError):
        driver.node_heartbeat(1, one.node_epoch + 1)
    with pytest.raises(InvalidConfigError, match="HOST:PORT"):
        driver.register_node(3, "no-port", directory_id="dir3")
    with pytest.raises(InvalidRequestError, match="a data directory id must be"):
        driver.register_node(3, "127.0.0.1:9097", directory_id="")


def test_a_node_that_names_the_view_it_applied_is_sent_only_a_changed_one(driver) -> None:
    """NodeHeartbeat: the whole view with its digest the first time, nothing while it stays the same, the whole
    view again once it changes; a node of an earlier release (naming no digest) gets the view itself."""
    one = driver.register_node(1, "127.0.0.1:9095", directory_id="dir1")
    driver.create_topic("t", 2, 1, {}, None)
    first = driver.node_heartbeat(1, one.node_epoch, assignment_digest="")
    assert isinstance(first, NodeHeartbeat) and first.assignment is not None and first.digest
    assert sorted(first.assignment.partitions) == [("t", 0), ("t", 1)]
    same = driver.node_heartbeat(1, one.node_epoch, assignment_digest=first.digest)
    assert same == NodeHeartbeat(first.digest, None)
    driver.create_topic("u", 1, 1, {}, None)
    changed = driver.node_heartbeat(1, one.node_epoch, assignment_digest=first.digest)
    assert changed.assignment is not None and changed.digest != first.digest
    assert ("u", 0) in changed.assignment.partitions
    assert isinstance(driver.node_heartbeat(1, one.node_epoch), NodeAssignment)


def two_nodes(driver) -> tuple[NodeInfo, NodeInfo]:
    return (driver.register_node(1, "127.0.0.1:9095", directory_id="dir1"),
            driver.register_node(2, "127.0.0.1:9096", directory_id="dir2"))


def only_node_two_beats(driver, clock, two: NodeInfo) -> ClusterDescription:
    """A session and a half of ticks with only node 2 heartbeating; the cluster then (node 1 declared dead)."""
    for _ in range(3):
        clock.ms += SESSION_MS // 2
        driver.node_heartbeat(2, two.node_epoch)
        driver.tick()
    cluster = driver.describe_cluster()
    assert [(n.id, n.alive) for n in cluster.nodes] == [(1, False), (2, True)]
    return cluster


def test_ticks_expire_silent_nodes_and_their_partitions_go_offline(driver, clock) -> None:
    one, two = two_nodes(driver)
    driver.create_topic("t", 2, 1, {}, None)
    cluster = only_node_two_beats(driver, clock, two)
    on_one = [reg.state for reg in cluster.partitions.values() if reg.assignment.replicas == (1,)]
    assert on_one and all(state.leader is None for state in on_one)
    with pytest.raises(StaleNodeEpochError):
        driver.node_heartbeat(1, one.node_epoch)


def test_a_paused_controller_declares_no_node_dead_and_changes_no_partition(driver, clock) -> None:
    """The coordinator SIGSTOPped for ten sessions: on resume its tick finds every lease past its end, but the
    nodes were not silent, the controller was. Every node gets a full session from the resume; nothing changes;
    a node that stays silent for that session is declared dead then."""
    one, two = two_nodes(driver)
    driver.create_topic("t", 2, 2, {}, None)
    before = driver.describe_cluster()
    driver.tick()
    clock.ms += 10 * SESSION_MS
    driver.tick()
    assert driver.describe_cluster() == before
    assert [n.alive for n in before.nodes] == [True, True]
    driver.node_heartbeat(2, two.node_epoch)
    after = only_node_two_beats(driver, clock, two)
    assert {reg.state.leader for reg in after.partitions.values()} == {2}
    with pytest.raises(StaleNodeEpochError):
        driver.node_heartbeat(1, one.node_epoch)


def test_a_demoted_or_deposed_controller_decides_nothing_but_the_store_is_described(driver, store) -> None:
    driver.register_node(1, "127.0.0.1:9095", directory_id="dir1")
    driver.demote()
    with pytest.raises(ControllerNotRunningError):
        driver.node_heartbeat(1, 1)
    stored = driver.describe_cluster()  # what the store says, liveness unknown
    assert [(n.id, n.alive) for n in stored.nodes] == [(1, False)] and stored.controller_epoch == 1
    driver.promote(store.claim_controller_epoch)
    driver.register_node(1, "127.0.0.1:9095", directory_id="dir1")
    store.claim_controller_epoch()  # another controller took over
    with pytest.raises(StaleControllerEpochError):
        driver.create_topic("t", 1, 1, {}, None)
    assert driver.state is ControllerState.IDLE


def test_offline_replicas_reported_with_heartbeats_move_leaders_and_bar_the_isr_until_healthy(driver) -> None:
    epochs = {i: driver.register_node(i, f"127.0.0.1:{9094 + i}", directory_id=f"dir{i}").node_epoch
              for i in (1, 2, 3)}
    driver.create_topic("t", 1, 3, {}, None)
    tp = ("t", 0)
    state = driver.describe_cluster().partitions[tp].state
    leader, followers = state.leader, {1, 2, 3} - {state.leader}
    driver.node_heartbeat(leader, epochs[leader], offline_replicas=[tp])  # e.g. its disk is full
    moved = driver.describe_cluster().partitions[tp].state
    assert moved.leader in followers and leader not in moved.isr and moved.leader_epoch > state.leader_epoch
    assert driver.node_heartbeat(moved.leader, epochs[moved.leader]).offline_replicas == {tp: (leader,)}
    with pytest.raises(IneligibleReplicaError, match="report their replicas of t-0 offline"):
        driver.alter_partition("t", 0, moved.leader, epochs[moved.leader], moved.leader_epoch,
                               moved.partition_epoch, (1, 2, 3))
    driver.node_heartbeat(leader, epochs[leader], offline_replicas=[])  # its storage works again
    assert driver.node_heartbeat(moved.leader, epochs[moved.leader]).offline_replicas == {}
    assert set(driver.alter_partition("t", 0, moved.leader, epochs[moved.leader], moved.leader_epoch,
                                      moved.partition_epoch, (1, 2, 3)).isr) == {1, 2, 3}


def test_an_offline_only_copy_keeps_leading_until_a_healthy_replica_is_in_sync(driver) -> None:
    epochs = {i: driver.register_node(i, f"127.0.0.1:{9094 + i}", directory_id=f"dir{i}").node_epoch
              for i in (1, 2)}
    driver.create_topic("t", 1, 2, {}, None)
    tp = ("t", 0)
    state = driver.describe_cluster().partitions[tp].state
    leader, other = state.leader, 3 - state.leader
    state = driver.alter_partition("t", 0, leader, epochs[leader], state.leader_epoch, state.partition_epoch,
                                   (leader,))  # the other lags
    driver.node_heartbeat(leader, epochs[leader], offline_replicas=[tp])
    assert driver.describe_cluster().partitions[tp].state == state  # nothing healthy is in sync: it keeps leading
    state = driver.alter_partition("t", 0, leader, epochs[leader], state.leader_epoch, state.partition_epoch,
                                   (1, 2))  # the other caught up
    driver.node_heartbeat(leader, epochs[leader], offline_replicas=[tp])  # the next report hands over
    assert driver.describe_cluster().partitions[tp].state.leader == other
    driver.register_node(leader, f"127.0.0.1:{9094 + leader}", directory_id=f"dir{leader}")  # a new process
    # reports for itself
    assert driver.node_heartbeat(other, epochs[other]).offline_replicas == {}


def test_the_timer_ticks_as_the_first_lease_lapses(driver, clock) -> None:
    """The next tick comes at the regular interval, or as soon as a lease lapses if sooner, so a node that stopped
    heartbeating is declared dead when its session ends; a lapse the last tick failed to act on is retried at the
    interval, not in a tight loop."""
    interval = 0.25

    def ticking(ms: int) -> None:  # the clock moves on while the timer ticks (a longer gap is a pause)
        for _ in range(ms // 100):
            clock.ms += 100
            driver.tick()
        clock.ms += ms % 100
    one = driver.register_node(1, "127.0.0.1:9095", directory_id="dir1")
    assert driver.next_tick_s(interval) == interval  # the session ends well after the next regular tick
    ticking(SESSION_MS - 100)
    assert driver.next_tick_s(interval) == pytest.approx(0.101)  # the lease lapses 1 ms after its last ms
    clock.ms += 101
    assert driver.next_tick_s(interval) == interval  # lapsed, not yet expired: the regular tick retries
    driver.tick()
    assert [(n.id, n.alive) for n in driver.describe_cluster().nodes] == [(1, False)]
    again = driver.register_node(1, "127.0.0.1:9095", directory_id="dir1")
    assert again.node_epoch > one.node_epoch and driver.next_tick_s(interval) == interval
