"""The controller's partition state machine (coordinator/controller.py) as a pure function of events: every
transition, every refusal, a deposed controller, and properties over random event sequences."""
from __future__ import annotations

import copy
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common.errors import (
    FabricError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidUpdateVersionError,
    NotLeaderError,
    StaleControllerEpochError,
    StaleNodeEpochError,
    UnknownPartitionError,
)
from fabric.common.types import LeaderAndIsr, NodeInfo, PartitionAssignment, PartitionRegistration
from fabric.coordinator.controller import (
    AlterPartition,
    ClusterView,
    CreatePartitions,
    DecisionKind,
    Election,
    ElectLeaders,
    NodeDied,
    NodeRegistered,
    Reassign,
    ReplicasOffline,
    advance,
    decide,
)

EPOCH = 5
TP = ("t", 0)


def node(i: int, alive: bool = True, epoch: int = 1) -> NodeInfo:
    return NodeInfo(i, f"h{i}:9092", None, epoch, alive)


def part(replicas: tuple[int, ...], leader: int | None, isr: tuple[int, ...], leader_epoch: int = 3,
         partition_epoch: int = 7, controller_epoch: int = EPOCH) -> PartitionRegistration:
    return PartitionRegistration(PartitionAssignment(replicas),
                                 LeaderAndIsr(leader, leader_epoch, isr, partition_epoch, controller_epoch))


def view(partitions: dict | None = None, alive: tuple[int, ...] = (1, 2, 3), registered: tuple[int, ...] = (1, 2, 3),
         unclean: tuple[str, ...] = (), offline: dict | None = None) -> ClusterView:
    """`offline`: {node id: the partitions it reports offline}."""
    return ClusterView(EPOCH, {i: node(i, i in alive) for i in registered},
                       {TP: part((1, 2, 3), 1, (1, 2, 3))} if partitions is None else partitions,
                       frozenset(unclean), {i: frozenset(tps) for i, tps in (offline or {}).items()})


def state_after(v: ClusterView, event) -> LeaderAndIsr:
    return decide(v, event).changes[TP].state


# -- creation -------------------------------------------------------------------------------------------------
def test_create_elects_the_first_alive_replica_with_the_alive_replicas_in_sync() -> None:
    out = decide(view({}, alive=(2, 3)), CreatePartitions("t", {0: PartitionAssignment((1, 2, 3)),
                                                                1: PartitionAssignment((3, 1))}))
    assert out.changes[("t", 0)].state == LeaderAndIsr(2, 0, (2, 3), 0, EPOCH)
    assert out.changes[("t", 1)] == part((3, 1), 3, (3,), 0, 0)
    assert [(d.partition, d.kind, d.before) for d in out.decisions] == [
        (("t", 0), DecisionKind.CREATED, None), (("t", 1), DecisionKind.CREATED, None)]


@pytest.mark.parametrize("topic, assignment, error, match", [
    ("t", (1, 2), InvalidPartitionsError, "t-0 exists already"),
    ("new", (4, 1), InvalidReplicationFactorError, r"replicas \[4\] of new-0 are not registered"),
])
def test_create_refusals(topic, assignment, error, match) -> None:
    with pytest.raises(error, match=match):
        decide(view(), CreatePartitions(topic, {0: PartitionAssignment(assignment)}))


def test_create_refuses_a_partition_without_a_live_replica() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="no replica of t-0"):
        decide(view({}, alive=(3,)), CreatePartitions("t", {0: PartitionAssignment((1, 2))}))


# -- node death -----------------------------------------------------------------------------------------------
def test_a_dead_follower_leaves_the_isr() -> None:
    out = decide(view(), NodeDied(2))
    assert out.changes[TP].state == LeaderAndIsr(1, 3, (1, 3), 8, EPOCH)  # same leader and leader epoch
    assert [d.kind for d in out.decisions] == [DecisionKind.ISR_CHANGED]


def test_a_dead_leader_is_replaced_by_the_next_isr_member_in_assignment_order() -> None:
    v = view({TP: part((1, 2, 3), 1, (1, 3, 2))})
    out = decide(v, NodeDied(1))
    assert out.changes[TP].state == LeaderAndIsr(2, 4, (3, 2), 8, EPOCH)
    assert out.decisions[0].kind is DecisionKind.ELECTED and out.decisions[0].before == v.partitions[TP].state


def test_a_dead_leader_skips_replicas_outside_the_isr() -> None:
    assert state_after(view({TP: part((1, 2, 3), 1, (1, 3))}), NodeDied(1)).leader == 3


def test_when_the_last_isr_member_dies_the_partition_goes_offline_keeping_it() -> None:
    out = decide(view({TP: part((1, 2, 3), 1, (1,))}), NodeDied(1))
    assert out.changes[TP].state == LeaderAndIsr(None, 4, (1,), 8, EPOCH)
    assert out.decisions[0].kind is DecisionKind.OFFLINE


def test_unclean_election_picks_an_alive_replica_and_logs_the_possible_loss(caplog) -> None:
    v = view({TP: part((1, 2, 3), 1, (1,))}, unclean=("t",))
    with caplog.at_level(logging.WARNING, logger="fabric.coordinator.controller"):
        out = decide(v, NodeDied(1))
    assert out.changes[TP].state == LeaderAndIsr(2, 4, (2,), 8, EPOCH)
    assert out.decisions[0].kind is DecisionKind.UNCLEAN_ELECTED
    assert "unclean election of node 2 from outside the ISR [1]" in caplog.text and "may be lost" in caplog.text


def test_a_death_outside_every_isr_changes_nothing() -> None:
    out = decide(view({TP: part((1, 2, 3), 1, (1, 2))}), NodeDied(3))
    assert out.changes == {} and out.decisions == []


# -- node registration ----------------------------------------------------------------------------------------
def test_an_offline_partition_comes_back_when_an_isr_member_registers() -> None:
    v = view({TP: part((1, 2, 3), None, (2,))}, alive=(1, 3))
    out = decide(v, NodeRegistered(node(2, epoch=2)))
    assert out.changes[TP].state == LeaderAndIsr(2, 4, (2,), 8, EPOCH)
    assert out.decisions[0].kind is DecisionKind.ELECTED


def test_a_replica_outside_the_isr_does_not_bring_an_offline_partition_back() -> None:
    v = view({TP: part((1, 2, 3), None, (2,))}, alive=(3,))
    assert decide(v, NodeRegistered(node(1, epoch=2))).changes == {}
    unclean = view({TP: part((1, 2, 3), None, (2,))}, alive=(3,), unclean=("t",))
    assert state_after(unclean, NodeRegistered(node(1, epoch=2))) == LeaderAndIsr(1, 4, (1,), 8, EPOCH)


def test_a_bounce_the_leases_missed_counts_as_a_death_first() -> None:
    out = decide(view({TP: part((1, 2, 3), 1, (1, 2))}), NodeRegistered(node(1, epoch=2)))
    assert out.changes[TP].state == LeaderAndIsr(2, 4, (2,), 8, EPOCH)  # it must catch up to rejoin the ISR
    alone = decide(view({TP: part((1, 2, 3), 1, (1,))}), NodeRegistered(node(1, epoch=2)))
    assert alone.changes[TP].state == LeaderAndIsr(1, 5, (1,), 9, EPOCH)  # offline, then its leader again
    assert [d.kind for d in alone.decisions] == [DecisionKind.OFFLINE, DecisionKind.ELECTED]


def test_a_registration_after_a_lapse_not_yet_expired_counts_as_a_death_first() -> None:
    """The node's lease lapsed (not alive) but no tick has declared it dead yet when its new process (perhaps on a
    wiped disk) registers: the old incarnation's leadership must not pass to the new process."""
    v = view({TP: part((1, 2, 3), 2, (2, 1))}, alive=(1, 3))
    out = decide(v, NodeRegistered(node(2, epoch=2)))
    assert out.changes[TP].state == LeaderAndIsr(1, 4, (1,), 8, EPOCH)
    assert [d.kind for d in out.decisions] == [DecisionKind.ELECTED]


def test_a_registration_must_bring_a_newer_node_epoch() -> None:
    with pytest.raises(StaleNodeEpochError, match="not newer"):
        decide(view(), NodeRegistered(node(1, epoch=1)))


# -- AlterPartition -------------------------------------------------------------------------------------------
def alter(isr: tuple[int, ...], node_id: int = 1, node_epoch: int = 1, leader_epoch: int = 3,
          partition_epoch: int = 7) -> AlterPartition:
    return AlterPartition(TP, node_id, node_epoch, leader_epoch, partition_epoch, isr)


def test_the_leader_shrinks_and_expands_its_isr() -> None:
    shrunk = state_after(view(), alter((1, 3)))
    assert shrunk == LeaderAndIsr(1, 3, (1, 3), 8, EPOCH)
    grown = state_after(view({TP: part((1, 2, 3), 1, (1,))}), alter((3, 1)))
    assert grown == LeaderAndIsr(1, 3, (1, 3), 8, EPOCH)  # kept in assignment order
    assert decide(view(), alter((1, 2, 3))).changes == {}  # nothing to change


@pytest.mark.parametrize("request_, error", [
    (alter((1, 2), node_id=2), NotLeaderError),
    (alter((1, 2), leader_epoch=2), FencedLeaderEpochError),
    (alter((1, 2), partition_epoch=6), InvalidUpdateVersionError),
    (alter((1, 2, 4)), IneligibleReplicaError),  # not a replica
    (alter((1, 1)), IneligibleReplicaError),
    (alter((2, 3)), IneligibleReplicaError),  # the leader leaves its own ISR
    (alter((1, 2), node_epoch=2), StaleNodeEpochError),
    (AlterPartition(("t", 9), 1, 1, 3, 7, (1,)), UnknownPartitionError),
])
def test_alter_partition_refusals(request_, error) -> None:
    with pytest.raises(error):
        decide(view(), request_)


def test_a_dead_node_cannot_join_the_isr_and_a_dead_leader_cannot_ask() -> None:
    v = view({TP: part((1, 2, 3), 1, (1,))}, alive=(1, 3))
    with pytest.raises(IneligibleReplicaError, match=r"nodes \[2\] are not alive"):
        decide(v, alter((1, 2)))
    with pytest.raises(StaleNodeEpochError):
        decide(view(alive=(2, 3)), alter((1,)))


def test_leadership_errors_are_retriable() -> None:
    assert NotLeaderError.retriable and FencedLeaderEpochError.retriable and StaleControllerEpochError.retriable
    assert not InvalidUpdateVersionError.retriable and not IneligibleReplicaError.retriable


# -- elections on request -------------------------------------------------------------------------------------
def test_preferred_leader_election() -> None:
    v = view({TP: part((1, 2, 3), 2, (1, 2)),  # preferred 1 alive and in sync: elected
              ("t", 1): part((3, 1), 1, (1,)),  # preferred 3 dead
              ("t", 2): part((2, 1), 1, (1,)),  # preferred 2 alive but out of sync
              ("t", 3): part((1, 2), 1, (1, 2))},  # already led by its preferred
             alive=(1, 2))
    out = decide(v, ElectLeaders(Election.PREFERRED))
    assert out.changes == {TP: part((1, 2, 3), 1, (1, 2), 4, 8)}
    assert decide(v, ElectLeaders(Election.PREFERRED, (("t", 1),))).changes == {}
    with pytest.raises(UnknownPartitionError):
        decide(v, ElectLeaders(Election.PREFERRED, (("nope", 0),)))


def test_unclean_election_on_request_only_where_the_topic_enables_it() -> None:
    offline = {TP: part((1, 2, 3), None, (1,)), ("u", 0): part((1, 3), None, (1,))}
    with pytest.raises(InvalidConfigError, match="does not enable unclean.leader.election.enable"):
        decide(view(offline, alive=(2, 3)), ElectLeaders(Election.UNCLEAN, (TP,)))
    out = decide(view(offline, alive=(2, 3), unclean=("u",)), ElectLeaders(Election.UNCLEAN, (("u", 0),)))
    assert out.changes == {("u", 0): part((1, 3), 3, (3,), 4, 8)}


# -- reassignment ---------------------------------------------------------------------------------------------
def test_a_reassignment_adds_the_new_replicas_then_completes_when_they_are_in_sync() -> None:
    v = view({TP: part((1, 2, 3), 1, (1, 2, 3))}, alive=(1, 2, 3, 4), registered=(1, 2, 3, 4))
    v, out = advance(v, Reassign(TP, (4, 1, 2)))
    started = out.changes[TP]
    assert started.assignment == PartitionAssignment((4, 1, 2, 3), (4, 1, 2))
    assert started.state == LeaderAndIsr(1, 3, (1, 2, 3), 8, EPOCH)  # node 4 catches up as a follower first
    assert [d.kind for d in out.decisions] == [DecisionKind.REASSIGNING]
    with pytest.raises(InvalidPartitionsError, match=r"being reassigned to \[4, 1, 2\] already"):
        decide(v, Reassign(TP, (1, 2, 3)))
    v, out = advance(v, AlterPartition(TP, 1, 1, 3, 8, (1, 2, 3, 4)))  # the leader adds node 4: done
    assert out.changes[TP] == PartitionRegistration(PartitionAssignment((4, 1, 2)), LeaderAndIsr(1, 3, (4, 1, 2), 9,
                                                                                                 EPOCH))
    assert [d.kind for d in out.decisions] == [DecisionKind.REASSIGNED]


def test_a_reassignment_away_from_the_leader_hands_leadership_over() -> None:
    v = view({TP: part((1, 2, 3), 1, (1, 2, 3))})
    out = decide(v, Reassign(TP, (3, 2)))  # every target replica is in sync: done at once
    assert out.changes[TP] == PartitionRegistration(PartitionAssignment((3, 2)), LeaderAndIsr(3, 4, (3, 2), 9,
                                                                                              EPOCH))


@pytest.mark.parametrize("target, error, match", [
    ((), InvalidReplicationFactorError, "at least one"),
    ((1, 1), InvalidReplicationFactorError, "distinct"),
    ((1, 9), InvalidReplicationFactorError, r"nodes \[9\] are not registered"),
])
def test_reassignment_refusals(target, error, match) -> None:
    with pytest.raises(error, match=match):
        decide(view(), Reassign(TP, target))
    with pytest.raises(UnknownPartitionError):
        decide(view(), Reassign(("nope", 0), (1,)))
    assert decide(view(), Reassign(TP, (1, 2, 3))).changes == {}  # already there


# -- replicas their nodes report offline (storage failed, damaged) -------------------------------------------
def test_an_offline_follower_leaves_the_isr_and_an_offline_leader_hands_over() -> None:
    follower = decide(view(), ReplicasOffline(2, 1, frozenset({TP})))
    assert follower.changes[TP].state == LeaderAndIsr(1, 3, (1, 3), 8, EPOCH)
    assert [d.kind for d in follower.decisions] == [DecisionKind.ISR_CHANGED]
    leader = decide(view({TP: part((1, 2, 3), 1, (1, 3, 2))}), ReplicasOffline(1, 1, frozenset({TP})))
    assert leader.changes[TP].state == LeaderAndIsr(2, 4, (3, 2), 8, EPOCH)
    assert [d.kind for d in leader.decisions] == [DecisionKind.ELECTED]


def test_an_offline_leader_hands_over_only_to_a_healthy_live_isr_member() -> None:
    v = view({TP: part((1, 2, 3), 1, (1, 2, 3))}, alive=(1, 2, 3), offline={2: {TP}})
    assert state_after(v, ReplicasOffline(1, 1, frozenset({TP}))) == LeaderAndIsr(3, 4, (2, 3), 8, EPOCH)
    alone = view({TP: part((1, 2, 3), 1, (1, 2))}, offline={2: {TP}})  # 2 is offline too, 3 out of sync
    assert decide(alone, ReplicasOffline(1, 1, frozenset({TP}))).changes == {}  # the only copy keeps serving
    assert decide(view({TP: part((1, 2, 3), None, (1,))}), ReplicasOffline(1, 1, frozenset({TP}))).changes == {}


def test_a_report_of_other_partitions_or_of_nothing_changes_nothing() -> None:
    assert decide(view(), ReplicasOffline(2, 1, frozenset({("u", 0)}))).changes == {}
    assert decide(view(), ReplicasOffline(2, 1, frozenset())).changes == {}
    assert decide(view({TP: part((1, 2, 3), 1, (1, 3))}), ReplicasOffline(2, 1, frozenset({TP}))).changes == {}


def test_a_report_must_quote_the_live_node_epoch() -> None:
    for v, node_epoch in ((view(), 2), (view(alive=(1, 3)), 1)):
        with pytest.raises(StaleNodeEpochError):
            decide(v, ReplicasOffline(2, node_epoch, frozenset({TP})))


def test_an_offline_replica_cannot_join_the_isr_until_its_node_reports_it_healthy() -> None:
    v = view({TP: part((1, 2, 3), 1, (1,))}, offline={2: {TP}})
    with pytest.raises(IneligibleReplicaError, match=r"nodes \[2\] report their replicas of t-0 offline"):
        decide(v, alter((1, 2)))
    assert state_after(v, alter((1, 3))).isr == (1, 3)
    healthy, _ = advance(v, ReplicasOffline(2, 1, frozenset()))
    assert state_after(healthy, alter((1, 2))).isr == (1, 2)


def test_elections_prefer_replicas_their_nodes_serve() -> None:
    dead_leader = view({TP: part((1, 2, 3), 1, (1, 2, 3))}, offline={2: {TP}})
    assert state_after(dead_leader, NodeDied(1)) == LeaderAndIsr(3, 4, (2, 3), 8, EPOCH)
    only_offline = view({TP: part((1, 2, 3), 1, (1, 2))}, offline={2: {TP}})
    assert state_after(only_offline, NodeDied(1)).leader == 2  # no healthy choice: an offline copy beats none
    preferred = view({TP: part((1, 2, 3), 2, (1, 2))}, offline={1: {TP}})
    assert decide(preferred, ElectLeaders(Election.PREFERRED)).changes == {}
    unclean = view({TP: part((1, 2, 3), None, (1,))}, alive=(2, 3), unclean=("t",), offline={2: {TP}})
    assert decide(unclean, ElectLeaders(Election.UNCLEAN)).changes[TP].state.leader == 3


def test_a_new_registration_of_a_node_clears_what_its_old_process_reported() -> None:
    v = view({TP: part((1, 2, 3), None, (2,))}, alive=(1, 3), offline={2: {TP}})
    after, out = advance(v, NodeRegistered(node(2, epoch=2)))
    assert out.changes[TP].state.leader == 2 and 2 not in after.offline_replicas
    died, _ = advance(view(offline={2: {TP}}), NodeDied(2))
    assert 2 not in died.offline_replicas


# -- a deposed controller -------------------------------------------------------------------------------------
@pytest.mark.parametrize("event", [NodeDied(1), NodeDied(2), alter((1, 2)), ElectLeaders(Election.PREFERRED),
                                   NodeRegistered(node(1, epoch=2)), Reassign(TP, (3, 2)),
                                   ReplicasOffline(1, 1, frozenset({TP}))])
def test_a_deposed_controller_decides_nothing(event) -> None:
    newer = {TP: part((2, 1, 3), 1, (1, 2, 3), controller_epoch=EPOCH + 1)}
    with pytest.raises(StaleControllerEpochError, match=f"newer than this controller's {EPOCH}"):
        decide(view(newer), event)


def test_decide_never_mutates_its_input() -> None:
    v = view({TP: part((1, 2, 3), 1, (1, 2, 3))})
    before = copy.deepcopy(v)
    for event in (NodeDied(1), NodeRegistered(node(1, epoch=2)), alter((1,)), ElectLeaders(Election.PREFERRED),
                  ReplicasOffline(1, 1, frozenset({TP}))):
        decide(v, event)
    assert v == before


# -- properties over random event sequences -------------------------------------------------------------------
NODES = (1, 2, 3, 4)


@st.composite
def scenarios(draw):
    """A cluster of four nodes and replicated partitions on them, and a sequence of event choices."""
    placements = draw(st.lists(st.permutations(NODES).map(lambda p: p[:3]), min_size=1, max_size=4))
    unclean = draw(st.booleans())
    steps = draw(st.lists(st.tuples(st.sampled_from(["die", "register", "alter", "preferred", "reassign",
                                                     "offline"]),
                                    st.sampled_from(NODES), st.integers(0, 3), st.sets(st.sampled_from(NODES))),
                          max_size=30))
    return placements, unclean, steps


def _event(v: ClusterView, kind: str, node_id: int, p: int, isr: set[int]):
    if kind == "die":
        return NodeDied(node_id)
    if kind == "register":
        return NodeRegistered(node(node_id, epoch=v.nodes[node_id].node_epoch + 1))
    if kind == "preferred":
        return ElectLeaders(Election.PREFERRED)
    if kind == "offline":  # the node reports the partitions with these indexes offline
        return ReplicasOffline(node_id, v.nodes[node_id].node_epoch,
                               frozenset(tp for i, tp in enumerate(sorted(v.partitions)) if i in isr))
    tp = sorted(v.partitions)[p % len(v.partitions)]
    if kind == "reassign":
        return Reassign(tp, tuple(sorted(isr | {node_id})))
    s = v.partitions[tp].state
    leader = s.leader if s.leader is not None else node_id
    return AlterPartition(tp, leader, v.nodes[leader].node_epoch, s.leader_epoch, s.partition_epoch,
                          tuple(isr | {leader}))


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_invariants_hold_over_any_event_sequence(scenario) -> None:
    placements, unclean, steps = scenario
    v = ClusterView(EPOCH, {i: node(i) for i in NODES}, {}, frozenset({"t"} if unclean else ()))
    v, _ = advance(v, CreatePartitions("t", {p: PartitionAssignment(r) for p, r in enumerate(placements)}))
    for step in steps:
        event = _event(v, *step)
        try:
            after, outcome = advance(v, event)
        except FabricError:
            continue  # a refusal changes nothing
        for tp, reg in after.partitions.items():
            old, new = v.partitions[tp].state, reg.state
            assert new.leader is None or (new.leader in new.isr and after.nodes[new.leader].alive)
            assert set(new.isr) <= set(reg.assignment.replicas) and new.isr
            assert set(reg.assignment.target) <= set(reg.assignment.replicas)
            # dead nodes leave every ISR, except the last member of an offline partition's
            assert all(after.nodes[r].alive for r in new.isr) or (new.leader is None and len(new.isr) == 1)
            assert new.leader_epoch >= old.leader_epoch
            healthy = [r for r in new.isr if after.nodes[r].alive and after.serves(r, tp)]
            if any(d.kind is DecisionKind.ELECTED for d in outcome.decisions if d.partition == tp):
                assert after.serves(new.leader, tp) or not healthy  # offline replicas lead only as a last resort
            if isinstance(event, ReplicasOffline) and tp in event.replicas and event.node_id in new.isr:
                assert new.leader in (event.node_id, None) and healthy == []  # kept: nothing healthy to take over
            if tp in outcome.changes:
                assert new.partition_epoch > old.partition_epoch and new.controller_epoch == EPOCH
                if new.leader != old.leader:
                    assert new.leader_epoch > old.leader_epoch
                reassigned = any(d.kind is DecisionKind.REASSIGNED for d in outcome.decisions if d.partition == tp)
                if new.leader is not None and new.leader != old.leader and not unclean and not reassigned:
                    assert new.leader in old.isr  # clean elections pick an in-sync replica (a completed
                    # reassignment picks one of the ISR the leader has just confirmed: new.isr, checked above)
            else:
                assert new == old
        v = after
