"""The controller's partition state machine (docs/replication.md), a pure function of events, as groups.py is.

`decide(view, event)` takes what the controller knows (`ClusterView`: its controller epoch, the registered
nodes with their liveness, every replicated partition's assignment and LeaderAndIsr) and one event, and returns
the partitions that change and the decisions taken; it never mutates its input. Refusals raise, changing
nothing. Whoever runs it writes every change by compare-and-set on the partition epoch it read, and on a lost
race re-reads and decides again.

States of a replicated partition:
- Online(L, ISR): leader L is alive and in the ISR.
- Offline(ISR): no leader (leader None): no ISR member is alive and unclean election is off for the topic
  (or no replica at all is alive). The ISR keeps its last member, which holds every committed record.

Transitions (each bumps partition_epoch and stamps the controller epoch; each new leader, or the loss of one,
bumps leader_epoch, fencing the old leader):
- CreatePartitions: (none) -> Online(first alive replica, ISR = the alive replicas); refused if none is alive.
- NodeDied(N): N leaves every ISR it is in, unless it is the last member. Online(N, ...) -> Online(first alive
  ISR member in assignment order) | Online(first alive replica, ISR = [it]) when unclean election is on |
  Offline.
- NodeRegistered(N) (a new node epoch; its earlier incarnation first dies, as KIP-380's bounce, also when its
  lease lapsed and was not expired yet, so a new process never inherits the old one's leaderships):
  Offline(ISR) -> Online(N) when N is in the ISR (or unclean election is on and N is a replica).
- AlterPartition from the leader (Kafka's AlterPartition): Online(L, ISR) -> Online(L, ISR'). Refused unless
  the node epoch is the node's current one (StaleNodeEpochError), the sender leads (NotLeaderError), quotes the
  current leader epoch (FencedLeaderEpochError) and partition epoch (InvalidUpdateVersionError), and ISR' is a
  subset of the replicas that keeps the leader and adds only alive nodes (IneligibleReplicaError).
- ElectLeaders(PREFERRED): Online(L) -> Online(first replica) when it is alive and in the ISR.
- Reassign(target) (KIP-455): the replicas become the target followed by the old replicas not in it, the target
  is recorded, and the new replicas fetch as followers. Once every target replica is in the ISR (at once, or at
  the AlterPartition that adds the last one) the reassignment completes: the replicas become the target, the ISR
  keeps only target members, and a leader outside the target hands over to the first in-sync target replica.
  Refused for a partition already being reassigned, and for targets that are not distinct registered nodes.
- ElectLeaders(UNCLEAN), only for topics with unclean.leader.election.enable=true: Offline -> Online(first
  alive replica, ISR = [it]); the election is logged, since records the old ISR acknowledged may be lost.
- ReplicasOffline(N, node epoch, replicas) (Kafka's offline log directories, carried by the node's heartbeat): the
  replicas N reports it cannot serve (storage failed, or damaged and not yet repaired) are offline for their
  partitions, as a dead node's replicas are: each leaves the ISR; Online(N, ...) ->
  Online(first healthy alive ISR member). A replica that is the partition's only healthy choice stays where it is
  (the leader keeps leading: readers keep what it can serve). Refused (StaleNodeEpochError) unless the node epoch
  is the node's current one. While a node reports a replica offline, no election picks it as long as a healthy
  alive candidate exists, and AlterPartition refuses to add it to the ISR (IneligibleReplicaError); once its node
  no longer reports it, it rejoins through the leader's ISR expansion.

A deposed controller decides nothing: a partition that carries a newer controller epoch than the view's makes
every event touching it fail with StaleControllerEpochError (the stores refuse its writes as well).

ISR rules are KIP-966-compatible: the high watermark only advances while |ISR| >= min.insync.replicas, and a
clean election only ever picks an ISR member, a subset of the replicas KIP-966 deems eligible (ISR and ELR).
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from fabric.common.errors import (
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
from fabric.common.types import (
    LeaderAndIsr,
    NodeInfo,
    PartitionAssignment,
    PartitionRegistration,
    TopicPartition,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterView:
    """What the controller decides from: its epoch, the registered nodes (alive from its leases) and the
    replicated partitions; `unclean_topics` enable unclean.leader.election.enable."""

    controller_epoch: int
    nodes: Mapping[int, NodeInfo]
    partitions: Mapping[TopicPartition, PartitionRegistration]
    unclean_topics: frozenset[str] = frozenset()
    # the replicas each node reports it cannot serve (ReplicasOffline), by node id
    offline_replicas: Mapping[int, frozenset[TopicPartition]] = field(default_factory=dict)

    def alive(self) -> frozenset[int]:
        return frozenset(n.id for n in self.nodes.values() if n.alive)

    def serves(self, node_id: int, tp: TopicPartition) -> bool:
        """Whether `node_id` does not report its replica of `tp` offline."""
        return tp not in self.offline_replicas.get(node_id, frozenset())


class DecisionKind(enum.Enum):
    """What a decision did to a partition (the leader it elected, only its ISR, or its replicas)."""

    CREATED = "Created"
    ELECTED = "Elected"
    UNCLEAN_ELECTED = "UncleanElected"
    OFFLINE = "Offline"
    ISR_CHANGED = "IsrChanged"
    REASSIGNING = "Reassigning"
    REASSIGNED = "Reassigned"


@dataclass(frozen=True)
class Decision:
    """One partition's change: what it was (None when created), what it becomes, and why."""

    partition: TopicPartition
    kind: DecisionKind
    before: LeaderAndIsr | None
    after: LeaderAndIsr


@dataclass
class Outcome:
    """The partitions an event changes (their new registrations) and the decisions, in partition order."""

    changes: dict[TopicPartition, PartitionRegistration] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)


# -- events -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeDied:
    node_id: int


@dataclass(frozen=True)
class NodeRegistered:
    node: NodeInfo  # the new registration (its new node epoch)


@dataclass(frozen=True)
class AlterPartition:
    partition: TopicPartition
    node_id: int
    node_epoch: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class CreatePartitions:
    topic: str
    assignments: Mapping[int, PartitionAssignment]


class Election(enum.Enum):
    PREFERRED = "preferred"
    UNCLEAN = "unclean"


@dataclass(frozen=True)
class ElectLeaders:
    election: Election
    partitions: tuple[TopicPartition, ...] = ()  # () means every replicated partition


@dataclass(frozen=True)
class Reassign:
    partition: TopicPartition
    target: tuple[int, ...]


@dataclass(frozen=True)
class ReplicasOffline:
    node_id: int
    node_epoch: int
    replicas: frozenset[TopicPartition]  # every replica of the node it cannot serve now (none: all healthy)


Event = NodeDied | NodeRegistered | AlterPartition | CreatePartitions | ElectLeaders | Reassign | ReplicasOffline


# -- the transitions ----------------------------------------------------------------------------------------
def decide(view: ClusterView, event: Event) -> Outcome:
    """The partitions `event` changes and why (see the module docstring); raises a refusal, changing nothing."""
    if isinstance(event, NodeDied):
        return _node_died(view, event.node_id)
    if isinstance(event, NodeRegistered):
        return _node_registered(view, event.node)
    if isinstance(event, AlterPartition):
        return _alter_partition(view, event)
    if isinstance(event, CreatePartitions):
        return _create(view, event)
    if isinstance(event, Reassign):
        return _reassign(view, event)
    if isinstance(event, ReplicasOffline):
        return _replicas_offline(view, event)
    return _elect_leaders(view, event)


def advance(view: ClusterView, event: Event) -> tuple[ClusterView, Outcome]:
    """decide(), and the view after it: the changed partitions and the event's node liveness applied."""
    outcome = decide(view, event)
    nodes, offline = dict(view.nodes), dict(view.offline_replicas)
    if isinstance(event, NodeDied) and event.node_id in nodes:
        nodes[event.node_id] = replace(nodes[event.node_id], alive=False)
        offline.pop(event.node_id, None)
    elif isinstance(event, NodeRegistered):
        nodes[event.node.id] = replace(event.node, alive=True)
        offline.pop(event.node.id, None)  # a new process: it reports its own replicas
    elif isinstance(event, ReplicasOffline):
        offline[event.node_id] = event.replicas
    return replace(view, nodes=nodes, partitions={**view.partitions, **outcome.changes},
                   offline_replicas=offline), outcome


def _in_order(assignment: PartitionAssignment, members: set[int] | frozenset[int]) -> tuple[int, ...]:
    return tuple(r for r in assignment.replicas if r in members)


def _healthy_first(view: ClusterView, tp: TopicPartition, candidates: tuple[int, ...]) -> tuple[int, ...]:
    """`candidates` in their order, those whose nodes report their replica of `tp` offline last."""
    return tuple(sorted(candidates, key=lambda r: not view.serves(r, tp)))


def _guard(view: ClusterView, tp: TopicPartition, reg: PartitionRegistration) -> None:
    if reg.state.controller_epoch > view.controller_epoch:
        raise StaleControllerEpochError(
            f"partition {tp[0]}-{tp[1]} was written by controller epoch {reg.state.controller_epoch}, newer than "
            f"this controller's {view.controller_epoch}: it was deposed and may change nothing")


def _change(view: ClusterView, tp: TopicPartition, reg: PartitionRegistration, leader: int | None,
            isr: tuple[int, ...], kind: DecisionKind, out: Outcome) -> None:
    """Record the partition's new leader and ISR in `out` (nothing if both are unchanged)."""
    old = reg.state
    if (leader, isr) == (old.leader, old.isr):
        return
    _guard(view, tp, reg)
    new = LeaderAndIsr(leader, old.leader_epoch + (1 if leader != old.leader else 0), isr, old.partition_epoch + 1,
                       view.controller_epoch)
    out.changes[tp] = PartitionRegistration(reg.assignment, new)
    out.decisions.append(Decision(tp, kind, old, new))
    if kind is DecisionKind.UNCLEAN_ELECTED:
        log.warning("partition %s-%d: unclean election of node %s from outside the ISR %s; records the old ISR "
                    "acknowledged above this replica's log end may be lost", tp[0], tp[1], leader, list(old.isr))


def _elect(view: ClusterView, tp: TopicPartition, reg: PartitionRegistration, isr: tuple[int, ...],
           alive: frozenset[int], out: Outcome, unclean: bool | None = None) -> None:
    """For a partition without a live leader: elect the first alive ISR member in assignment order; else
    (unclean election on) the first alive replica with an ISR of itself; else it goes offline keeping its ISR.
    Either way a replica its node reports offline is chosen only if no other candidate is healthy."""
    clean = _healthy_first(view, tp, tuple(r for r in _in_order(reg.assignment, set(isr)) if r in alive))
    if clean:
        _change(view, tp, reg, clean[0], isr, DecisionKind.ELECTED, out)
        return
    candidates = _healthy_first(view, tp, _in_order(reg.assignment, alive))
    if (tp[0] in view.unclean_topics if unclean is None else unclean) and candidates:
        _change(view, tp, reg, candidates[0], (candidates[0],), DecisionKind.UNCLEAN_ELECTED, out)
    else:
        _change(view, tp, reg, None, isr, DecisionKind.OFFLINE, out)


def _node_died(view: ClusterView, node_id: int) -> Outcome:
    alive, out = view.alive() - {node_id}, Outcome()
    for tp, reg in sorted(view.partitions.items()):
        state = reg.state
        if node_id not in state.isr:
            continue
        isr = tuple(r for r in state.isr if r != node_id) or state.isr  # the last member stays
        if state.leader is None or state.leader == node_id:
            _elect(view, tp, reg, isr, alive, out)
        else:
            _change(view, tp, reg, state.leader, isr, DecisionKind.ISR_CHANGED, out)
    return out


def _node_registered(view: ClusterView, node: NodeInfo) -> Outcome:
    known = view.nodes.get(node.id)
    if known is not None and node.node_epoch <= known.node_epoch:
        raise StaleNodeEpochError(f"node {node.id} registered with epoch {node.node_epoch}, not newer than "
                                  f"{known.node_epoch}")
    died = Outcome()
    if known is not None:  # its old incarnation died: a bounce the leases did not see, or a lapse not yet expired
        view, died = advance(view, NodeDied(node.id))
    view = replace(view, nodes={**view.nodes, node.id: replace(node, alive=True)},
                   offline_replicas={i: r for i, r in view.offline_replicas.items() if i != node.id})
    out = Outcome(dict(died.changes), list(died.decisions))
    for tp, reg in sorted(view.partitions.items()):
        if reg.state.leader is None and node.id in reg.assignment.replicas:
            _elect(view, tp, reg, reg.state.isr, view.alive(), out)
    return out


def _alter_partition(view: ClusterView, req: AlterPartition) -> Outcome:
    tp = req.partition
    reg = view.partitions.get(tp)
    if reg is None:
        raise UnknownPartitionError(f"partition {tp[0]}-{tp[1]} is not a replicated partition")
    node, state = view.nodes.get(req.node_id), reg.state
    if node is None or node.node_epoch != req.node_epoch or not node.alive:
        raise StaleNodeEpochError(f"node {req.node_id} with node epoch {req.node_epoch} is not a live registration "
                                  "(a newer one fenced it, or its lease lapsed); register the node again")
    _guard(view, tp, reg)
    if state.leader != req.node_id:
        raise NotLeaderError(f"node {req.node_id} does not lead {tp[0]}-{tp[1]} (the leader is {state.leader})")
    if req.leader_epoch != state.leader_epoch:
        raise FencedLeaderEpochError(f"leader epoch {req.leader_epoch} of {tp[0]}-{tp[1]} is not the current "
                                     f"{state.leader_epoch}; refresh the partition state")
    if req.partition_epoch != state.partition_epoch:
        raise InvalidUpdateVersionError(f"partition epoch {req.partition_epoch} of {tp[0]}-{tp[1]} is stale (now "
                                        f"{state.partition_epoch}); refresh the partition state and decide again")
    wanted = set(req.isr)
    if len(wanted) != len(req.isr) or not wanted <= set(reg.assignment.replicas):
        raise IneligibleReplicaError(f"ISR {list(req.isr)} of {tp[0]}-{tp[1]} must be distinct replicas of "
                                     f"{list(reg.assignment.replicas)}")
    if req.node_id not in wanted:
        raise IneligibleReplicaError(f"leader {req.node_id} of {tp[0]}-{tp[1]} cannot leave its own ISR")
    dead = sorted(wanted - set(state.isr) - view.alive())
    if dead:
        raise IneligibleReplicaError(f"nodes {dead} are not alive, so they cannot join the ISR of {tp[0]}-{tp[1]}")
    offline = sorted(r for r in wanted - set(state.isr) if not view.serves(r, tp))
    if offline:
        raise IneligibleReplicaError(f"nodes {offline} report their replicas of {tp[0]}-{tp[1]} offline (storage "
                                     "failed, or damaged and not yet repaired), so they cannot join its ISR yet")
    out = Outcome()
    isr = _in_order(reg.assignment, wanted)
    if reg.assignment.target and set(reg.assignment.target) <= wanted:
        _complete_reassignment(view, tp, reg, isr, out)
    else:
        _change(view, tp, reg, state.leader, isr, DecisionKind.ISR_CHANGED, out)
    return out


def _reassign(view: ClusterView, event: Reassign) -> Outcome:
    tp, target = event.partition, event.target
    reg = view.partitions.get(tp)
    if reg is None:
        raise UnknownPartitionError(f"partition {tp[0]}-{tp[1]} is not a replicated partition")
    _guard(view, tp, reg)
    if not target or len(set(target)) != len(target):
        raise InvalidReplicationFactorError(f"the replicas of {tp[0]}-{tp[1]} must be distinct node ids, at least "
                                            f"one; got {list(target)}")
    unknown = sorted(set(target) - set(view.nodes))
    if unknown:
        raise InvalidReplicationFactorError(f"nodes {unknown} are not registered nodes; start them first")
    if reg.assignment.target:
        raise InvalidPartitionsError(f"partition {tp[0]}-{tp[1]} is being reassigned to "
                                     f"{list(reg.assignment.target)} already; wait until it is done (--verify)")
    out = Outcome()
    if target == reg.assignment.replicas:
        return out
    moving = PartitionAssignment(target + tuple(r for r in reg.assignment.replicas if r not in target), target)
    started = PartitionRegistration(moving, replace(reg.state, partition_epoch=reg.state.partition_epoch + 1,
                                                    controller_epoch=view.controller_epoch))
    if set(target) <= set(reg.state.isr):  # nothing to catch up: done at once
        _complete_reassignment(view, tp, started, reg.state.isr, out, before=reg)
        return out
    out.changes[tp] = started
    out.decisions.append(Decision(tp, DecisionKind.REASSIGNING, reg.state, started.state))
    return out


def _complete_reassignment(view: ClusterView, tp: TopicPartition, reg: PartitionRegistration, isr: tuple[int, ...],
                           out: Outcome, before: PartitionRegistration | None = None) -> None:
    """The replicas become the target and the ISR its in-sync members; a leader outside the target hands over
    to the first in-sync target replica that is alive (none alive: offline until one is)."""
    target, old = reg.assignment.target, reg.state
    kept = tuple(r for r in target if r in isr)
    successors = _healthy_first(view, tp, tuple(r for r in kept if r in view.alive()))
    leader = old.leader if old.leader in target else next(iter(successors), None)
    state = LeaderAndIsr(leader, old.leader_epoch + (1 if leader != old.leader else 0), kept,
                         old.partition_epoch + 1, view.controller_epoch)
    out.changes[tp] = PartitionRegistration(PartitionAssignment(target), state)
    out.decisions.append(Decision(tp, DecisionKind.REASSIGNED, (before or reg).state, state))


def _create(view: ClusterView, event: CreatePartitions) -> Outcome:
    alive, out = view.alive(), Outcome()
    for p, assignment in sorted(event.assignments.items()):
        tp = (event.topic, p)
        if tp in view.partitions:
            raise InvalidPartitionsError(f"partition {event.topic}-{p} exists already")
        unknown = sorted(set(assignment.replicas) - set(view.nodes))
        if unknown:
            raise InvalidReplicationFactorError(f"replicas {unknown} of {event.topic}-{p} are not registered nodes")
        isr = _in_order(assignment, alive)
        if not isr:
            raise InvalidReplicationFactorError(f"no replica of {event.topic}-{p} ({list(assignment.replicas)}) is "
                                                "alive; start the nodes or place the partition on live ones")
        state = LeaderAndIsr(isr[0], 0, isr, 0, view.controller_epoch)
        out.changes[tp] = PartitionRegistration(assignment, state)
        out.decisions.append(Decision(tp, DecisionKind.CREATED, None, state))
    return out


def _elect_leaders(view: ClusterView, event: ElectLeaders) -> Outcome:
    chosen = event.partitions or tuple(sorted(view.partitions))
    missing = [tp for tp in chosen if tp not in view.partitions]
    if missing:
        raise UnknownPartitionError(f"partitions {missing} are not replicated partitions")
    alive, out = view.alive(), Outcome()
    for tp in sorted(chosen):
        reg = view.partitions[tp]
        if event.election is Election.UNCLEAN:
            if tp[0] not in view.unclean_topics:
                raise InvalidConfigError(f"topic {tp[0]!r} does not enable unclean.leader.election.enable; set it "
                                         "to true first (records may be lost)")
            if reg.state.leader is None:
                _elect(view, tp, reg, reg.state.isr, alive, out, unclean=True)
            continue
        preferred = reg.assignment.preferred_leader
        if (reg.state.leader != preferred and preferred in alive and preferred in reg.state.isr
                and view.serves(preferred, tp)):
            _change(view, tp, reg, preferred, reg.state.isr, DecisionKind.ELECTED, out)
    return out


def _replicas_offline(view: ClusterView, event: ReplicasOffline) -> Outcome:
    """The node's offline replicas leave their ISRs, and those it leads move to a healthy alive ISR member (none:
    it keeps leading, the only copy there is to serve)."""
    node_id = event.node_id
    node = view.nodes.get(node_id)
    if node is None or node.node_epoch != event.node_epoch or not node.alive:
        raise StaleNodeEpochError(f"node {node_id} with node epoch {event.node_epoch} is not a live registration "
                                  "(a newer one fenced it, or its lease lapsed); register the node again")
    view = replace(view, offline_replicas={**view.offline_replicas, node_id: event.replicas})
    alive, out = view.alive(), Outcome()
    for tp in sorted(event.replicas):
        reg = view.partitions.get(tp)
        if reg is None or node_id not in reg.state.isr or reg.state.leader is None:
            continue  # deleted, out of the ISR already, or offline (a registration elects)
        others = tuple(r for r in reg.state.isr if r != node_id)
        if reg.state.leader != node_id:
            _change(view, tp, reg, reg.state.leader, others, DecisionKind.ISR_CHANGED, out)
            continue
        successors = [r for r in _in_order(reg.assignment, set(others)) if r in alive and view.serves(r, tp)]
        if successors:
            _change(view, tp, reg, successors[0], others, DecisionKind.ELECTED, out)
    return out
