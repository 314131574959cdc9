"""The active controller: the partition state machine (controller.py) run against a coordinator store.

Each event is decided from a fresh read (registered nodes with the leases' liveness, the replicated partitions
concerned, which topics enable unclean election) and every change is written in one compare-and-set on the
partition epochs read. A lost race re-reads and decides again, at most MAX_ATTEMPTS times, then fails with
CoordinatorUnavailableError. Placement (placement.py) picks the replicas of new topics and partitions.
"""
from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import replace

import pyarrow as pa

from fabric.common.errors import (
    CoordinatorUnavailableError,
    DuplicateNodeRegistrationError,
    InvalidPartitionsError,
    UnknownTopicError,
)
from fabric.common.types import LeaderAndIsr, NodeInfo, PartitionRegistration, TopicInfo, TopicPartition
from fabric.coordinator import placement, validation
from fabric.coordinator.controller import (
    AlterPartition,
    ClusterView,
    CreatePartitions,
    Decision,
    Election,
    ElectLeaders,
    Event,
    NodeDied,
    NodeRegistered,
    Outcome,
    Reassign,
    ReplicasOffline,
    decide,
)
from fabric.coordinator.group_store import conflict_backoff
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.node_leases import NodeLeases

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 16


class ActiveController:
    """The controller of one controller epoch over `store`.

    Invariants: every state it writes carries its epoch `controller_epoch` (so once a newer controller exists,
    each of its writes fails with StaleControllerEpochError and it must be replaced); node liveness is its
    `leases`, granted afresh to every registered node when it starts; a partition changes only through
    controller.decide and a compare-and-set on the partition epoch the decision was made from. Each decision
    stored is logged and told to `on_decision` (the service's metrics count them). The replicas each live node
    reports offline (its heartbeats) are kept in memory, as its lease is: a new controller learns them from the
    next heartbeats."""

    def __init__(self, store: Coordinator, controller_epoch: int, leases: NodeLeases,
                 start_index: Callable[[int], int] = random.randrange,
                 on_decision: Callable[[Decision], None] = lambda decision: None) -> None:
        self.store, self.controller_epoch, self.leases = store, controller_epoch, leases
        self._start_index, self._on_decision = start_index, on_decision
        self.offline_replicas: dict[int, frozenset[TopicPartition]] = {}  # by node id, as last reported
        leases.grant_all((n.id, n.node_epoch) for n in store.registered_nodes())

    # -- reading -------------------------------------------------------------------------------------------
    def nodes(self) -> dict[int, NodeInfo]:
        """The registered nodes with their liveness."""
        return {n.id: replace(n, alive=self.leases.is_alive(n.id)) for n in self.store.registered_nodes()}

    def _unclean(self, topics: set[str]) -> frozenset[str]:
        enabled = set()
        for name in topics:
            try:
                if self.store.topic(name).settings["unclean.leader.election.enable"]:
                    enabled.add(name)
            except UnknownTopicError:
                continue  # deleted meanwhile
        return frozenset(enabled)

    def _view(self, topics: list[str] | None, nodes: Mapping[int, NodeInfo] | None = None) -> ClusterView:
        partitions = self.store.partition_registrations(topics)
        return ClusterView(self.controller_epoch, self.nodes() if nodes is None else nodes, partitions,
                           self._unclean({tp[0] for tp in partitions}), dict(self.offline_replicas))

    # -- deciding ------------------------------------------------------------------------------------------
    def _run(self, event: Event, topics: list[str] | None = None,
             nodes: Callable[[], Mapping[int, NodeInfo]] | None = None) -> tuple[ClusterView, Outcome]:
        """Decide `event` on a fresh view of `topics` (default: all) and store the changes; again on a lost
        race."""
        for attempt in range(MAX_ATTEMPTS):
            view = self._view(topics, nodes() if nodes is not None else None)
            outcome = decide(view, event)
            updates = {tp: (view.partitions[tp].state.partition_epoch,
                            reg if reg.assignment != view.partitions[tp].assignment else reg.state)
                       for tp, reg in outcome.changes.items()}
            if not updates or self.store.update_partition_states(updates):
                for d in outcome.decisions:
                    log.info("partition %s-%d: %s: %s -> %s", *d.partition, d.kind.value, d.before, d.after)
                    self._on_decision(d)
                return view, outcome
            log.info("%s: a partition changed while deciding (attempt %d); deciding again", event, attempt + 1)
            conflict_backoff(attempt)
        raise CoordinatorUnavailableError(f"{event}: partition states changed {MAX_ATTEMPTS} times while deciding; "
                                          "retry")

    # -- events --------------------------------------------------------------------------------------------
    def register_node(self, node_id: int, address: str, rack: str | None = None, *, directory_id: str) -> NodeInfo:
        """Register a node (a new node epoch, fencing its older processes) and elect it where it can lead.

        While the id's lease is alive only a process on the data directory that holds it may register it: that
        is a restart (the old process held the directory's lock, so it is gone) and fences the old one. A process
        on another directory is refused with DuplicateNodeRegistrationError, changing nothing (Kafka's
        DUPLICATE_BROKER_REGISTRATION); once the lease lapses (a replaced disk) it registers."""
        validation.node(node_id, address, rack, directory_id)
        previous = self.nodes()
        held = previous.get(node_id)
        if held is not None and held.alive and held.directory_id != directory_id:
            raise DuplicateNodeRegistrationError(
                f"node id {node_id} is held by a live node process at {held.address} (data directory id "
                f"{held.directory_id}, node epoch {held.node_epoch}); this process's data directory has id "
                f"{directory_id}. Stop the other process or give this node another --id; a node restarted on a "
                f"new disk registers once the old process's session ({self.leases.session_timeout_ms} ms) lapses")
        node = replace(self.store.register_node(node_id, address, rack, directory_id=directory_id), alive=True)
        self.leases.register(node.id, node.node_epoch)
        self.offline_replicas.pop(node_id, None)  # a new process: it reports its own replicas

        def known() -> dict[int, NodeInfo]:  # the view before this registration, as the event needs it
            current = self.nodes()
            current.pop(node_id)
            return {**current, **({node_id: previous[node_id]} if node_id in previous else {})}
        self._run(NodeRegistered(node), nodes=known)
        return node

    def heartbeat(self, node_id: int, node_epoch: int) -> None:
        self.leases.heartbeat(node_id, node_epoch)

    def controlled_shutdown(self, node_id: int, node_epoch: int) -> list[Decision]:
        """Kafka's controlled shutdown: the node (at `node_epoch`, StaleNodeEpochError otherwise) is stopping, so
        it dies now rather than when its lease lapses: its leaderships move to other in-sync replicas and it leaves
        every ISR (NodeDied). Its lease ends only once that is stored, so a failure leaves it to the lease."""
        self.leases.heartbeat(node_id, node_epoch)

        def without() -> dict[int, NodeInfo]:
            return {i: replace(n, alive=False) if i == node_id else n for i, n in self.nodes().items()}
        decisions = self._run(NodeDied(node_id), nodes=without)[1].decisions
        self.leases.release(node_id, node_epoch)
        self.offline_replicas.pop(node_id, None)
        log.info("node %d shut down under control: %d partition(s) changed", node_id, len(decisions))
        return decisions

    def expire_nodes(self) -> list[Decision]:
        """Declare dead the nodes whose lease lapsed, and move their partitions on."""
        decisions = []
        for node_id in self.leases.expire():
            self.offline_replicas.pop(node_id, None)
            decisions += self._run(NodeDied(node_id))[1].decisions
        return decisions

    def replicas_offline(self, node_id: int, node_epoch: int, replicas: frozenset[TopicPartition]) -> list[Decision]:
        """The replicas node `node_id` (at `node_epoch`) reports with its heartbeat that it cannot serve now
        (Kafka's offline log directories): they leave their ISRs and their leaderships move (ReplicasOffline), and
        they are kept until a report leaves them out. Decided again on every report naming some, so a leadership
        the node kept (no healthy replica was in sync) moves once one has joined the ISR."""
        known = self.offline_replicas.get(node_id, frozenset())
        if replicas != known:
            log.info("node %d reports %d offline replica(s)%s%s", node_id, len(replicas),
                     f"; offline now: {_names(replicas - known)}" if replicas - known else "",
                     f"; healthy again: {_names(known - replicas)}" if known - replicas else "")
        if not replicas:
            self.offline_replicas.pop(node_id, None)
            return []
        outcome = self._run(ReplicasOffline(node_id, node_epoch, replicas), sorted({tp[0] for tp in replicas}))[1]
        self.offline_replicas[node_id] = replicas
        return outcome.decisions

    def alter_partition(self, tp: TopicPartition, node_id: int, node_epoch: int, leader_epoch: int,
                        partition_epoch: int, isr: tuple[int, ...]) -> LeaderAndIsr:
        """The leader's ISR change (Kafka's AlterPartition); returns the partition's state after it."""
        view, outcome = self._run(AlterPartition(tp, node_id, node_epoch, leader_epoch, partition_epoch, isr),
                                  [tp[0]])
        return (outcome.changes.get(tp) or view.partitions[tp]).state

    def reassign(self, tp: TopicPartition, target: tuple[int, ...]) -> PartitionRegistration:
        """Move a partition's replicas to `target` (KIP-455): the new ones join as followers and catch up, then
        the old ones leave; returns the partition's registration after the start (or the end, if nothing had
        to catch up)."""
        view, outcome = self._run(Reassign(tp, target), [tp[0]])
        return outcome.changes.get(tp) or view.partitions[tp]

    def elect_leaders(self, election: Election, partitions: tuple[TopicPartition, ...] = ()) -> list[Decision]:
        topics = sorted({tp[0] for tp in partitions}) if partitions else None
        return self._run(ElectLeaders(election, partitions), topics)[1].decisions

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: dict[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        """Place the topic's replicas on the live nodes and create it with its first leaders."""
        view = self._view([])
        live = sum(n.alive for n in view.nodes.values())
        assignments = placement.assign(list(view.nodes.values()), range(partitions), replication_factor,
                                       self._start_index(max(live, 1)))
        outcome = decide(view, CreatePartitions(name, assignments))
        return self.store.create_replicated_topic(name, config, value_schema,
                                                  {tp[1]: reg for tp, reg in outcome.changes.items()})

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow a replicated topic to `total` partitions, placed as Kafka adds partitions."""
        view = self._view([name])
        existing = {tp[1]: reg.assignment for tp, reg in view.partitions.items()}
        if not existing or total <= len(existing):
            raise InvalidPartitionsError(f"topic {name!r} has {len(existing)} replicated partitions; it can only "
                                         "grow, and only a replicated topic grows here")
        assignments = placement.assign_added(list(view.nodes.values()), existing, total)
        outcome = decide(view, CreatePartitions(name, assignments))
        return self.store.add_replicated_partitions(name, {tp[1]: reg for tp, reg in outcome.changes.items()})


def _names(replicas: frozenset[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(replicas))
