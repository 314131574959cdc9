"""The controller inside a coordinator instance: runs the ActiveController (coordinator/active_controller.py)
while the instance is the controller, and serves the data nodes' calls and describe_cluster.

States: IDLE (not the controller: the nodes' calls answer ControllerNotRunningError, so they retry at the
active instance; describe_cluster answers from the store, liveness unknown) -> STARTING (promoted: the controller
epoch is claimed, the leases granted; retried on every tick while the store refuses) -> RUNNING (an
ActiveController of that epoch) -> IDLE when demoted, or deposed (a write refused with
StaleControllerEpochError: a newer controller exists, so this one may change nothing).
A SQLite instance is promoted once at start with a freshly claimed epoch; a ZooKeeper instance on every
promotion of its election (the epoch it won), and demoted when it loses it.

A timer thread (`start_timer`, stopped by `stop`) expires the node leases every tick. Every controller call
holds one lock: decisions are taken one at a time, as Kafka's controller takes them on one thread.
"""
from __future__ import annotations

import enum
import hashlib
import logging
import threading
from typing import Callable, TypeVar

import msgspec
import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.errors import (
    CoordinatorUnavailableError,
    FabricError,
    InvalidRequestError,
    StaleControllerEpochError,
    UnknownTopicError,
)
from fabric.common.redaction import clip
from fabric.common.types import (
    ClusterDescription,
    LeaderAndIsr,
    NodeAssignment,
    NodeHeartbeat,
    NodeInfo,
    PartitionRegistration,
    TopicInfo,
    TopicPartition,
)
from fabric.coordinator.active_controller import ActiveController
from fabric.coordinator.controller import Decision, Election
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.node_leases import NodeLeases, check_interval_ms
from fabric.server.instance import check_address

log = logging.getLogger(__name__)
T = TypeVar("T")
# What a node's view is digested from: msgpack, C-encoded (the view as JSON, built field by field in Python, cost
# the controller 19 ms per heartbeat of a node hosting 1,000 partitions, 0.4 ms this way). A digest is opaque to
# the node (it only names it back), so only one controller's encoding has to be stable.
_DIGESTED = msgspec.msgpack.Encoder(enc_hook=lambda value: value.serialize().to_pybytes()
                                    if isinstance(value, pa.Schema) else repr(value))


class ControllerNotRunningError(CoordinatorUnavailableError):
    """This instance runs no controller now (starting, demoted or deposed): retry, at the active instance."""


class ControllerState(str, enum.Enum):
    IDLE = "Idle"
    STARTING = "Starting"
    RUNNING = "Running"


class ControllerDriver:
    """The controller of one coordinator instance over `store`; nodes are declared dead after
    `session_timeout_ms` (node.session.timeout.ms) without a heartbeat."""

    def __init__(self, store: Coordinator, session_timeout_ms: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.store, self.session_timeout_ms, self.clock = store, session_timeout_ms, clock
        self._lock = threading.RLock()
        self._claim: Callable[[], int] | None = None
        self._controller: ActiveController | None = None
        self._failure = ""  # why the controller last failed to start
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_decision: Callable[[Decision], None] = lambda decision: None  # told every decision stored
        self.on_start: Callable[[int], None] = lambda epoch: None  # told the epoch the controller runs under
        self.on_stop: Callable[[], None] = lambda: None  # told the controller stopped (demoted or deposed)
        # the high watermark each leader last reported (node_heartbeat), for group lag of replicated topics
        self.high_watermarks: dict[TopicPartition, int] = {}

    @property
    def state(self) -> ControllerState:
        if self._controller is not None:
            return ControllerState.RUNNING
        return ControllerState.STARTING if self._claim is not None else ControllerState.IDLE

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def promote(self, claim: Callable[[], int]) -> None:
        """This instance became the controller; `claim()` gives its controller epoch. It starts now if the store
        answers, else on a later tick."""
        with self._lock:
            self._controller, self._claim = None, claim
            self._start()

    def demote(self) -> None:
        """This instance is no longer the controller: it decides nothing more."""
        with self._lock:
            if self.state is not ControllerState.IDLE:
                log.info("controller stopped (demoted)")
            self._controller, self._claim = None, None
            self.on_stop()

    def _start(self) -> None:
        """STARTING -> RUNNING, if the store answers (caller holds the lock; a failure is logged once)."""
        if self._claim is None:
            return
        try:
            epoch = self._claim()
            self._controller = ActiveController(self.store, epoch, NodeLeases(self.session_timeout_ms, self.clock),
                                                on_decision=lambda decision: self.on_decision(decision))
        except FabricError as exc:
            if str(exc) != self._failure:
                log.warning("the controller could not start (%s); retrying every tick", exc)
            self._failure = str(exc)
            return
        self._claim, self._failure = None, ""
        log.info("controller running with controller epoch %d", epoch)
        self.on_start(epoch)

    def start_timer(self) -> None:
        """Expire node leases every tick (node_leases.check_interval_ms: a quarter of the session timeout, at most
        1 s), and as the first lease lapses if that is sooner (`next_tick_s`), until stop(). A tick that comes late
        by more than half a session is the controller's own pause, which the leases forgive (NodeLeases)."""
        interval = check_interval_ms(self.session_timeout_ms) / 1000
        self._thread = threading.Thread(target=self._tick_loop, args=(interval,), name="controller-timer",
                                        daemon=True)
        self._thread.start()

    def _tick_loop(self, interval: float) -> None:
        while not self._stopped.wait(self.next_tick_s(interval)):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 (the timer must survive; the next tick tries again)
                log.exception("controller tick failed")

    def next_tick_s(self, interval: float) -> float:
        """How long until the next tick: `interval`, or less where a lease lapses sooner, so a node that stopped
        heartbeating is declared dead as its session ends, not up to a tick later (a leadership's failover waits
        on it). A lease already lapsed but not expired (the last tick failed) waits the interval: a retry."""
        with self._lock:
            controller = self._controller
            lapse_ms = controller.leases.next_lapse_ms() if controller is not None else None
        if lapse_ms is None:
            return interval
        ahead_ms = lapse_ms + 1 - self.clock.monotonic_ms()  # (a lease lapses once the time is past it)
        return interval if ahead_ms <= 0 else min(interval, ahead_ms / 1000)

    def tick(self) -> None:
        """One tick: start a pending controller, declare dead the nodes whose lease lapsed."""
        with self._lock:
            self._start()
            if self._controller is not None:
                try:
                    self._call(lambda c: c.expire_nodes())
                except NotControllerError:
                    pass  # demoted while deciding
                except FabricError as exc:
                    log.warning("expiring node leases failed (%s); the next tick retries", exc)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the timer and the controller."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.demote()

    # -- calls -------------------------------------------------------------------------------------------------
    def _call(self, fn: Callable[[ActiveController], T]) -> T:
        """fn(the running controller), one at a time; NotControllerError unless running; a deposed controller
        (StaleControllerEpochError) stops."""
        with self._lock:
            controller = self._controller
            if controller is None:
                raise ControllerNotRunningError(
                    f"this coordinator instance is not running the controller ({self.state.value}"
                    f"{': ' + self._failure if self._failure else ''}); retry, at the active instance")
            try:
                return fn(controller)
            except StaleControllerEpochError:
                if self._controller is controller:
                    log.warning("controller epoch %d was superseded: this controller stops deciding",
                                controller.controller_epoch)
                    self._controller = None
                    self.on_stop()
                raise

    def register_node(self, node_id: int, address: str, rack: str | None = None, *, directory_id: str) -> NodeInfo:
        """A data node (re)registers from its data directory: a new node epoch, and the partitions it can lead
        elected to it; DuplicateNodeRegistrationError while a process on another directory holds the id's lease."""
        check_address("address", address)
        return self._call(lambda c: c.register_node(node_id, address, rack, directory_id=directory_id))

    def node_heartbeat(self, node_id: int, node_epoch: int,
                       high_watermarks: dict[TopicPartition, int] | None = None,
                       offline_replicas: list[TopicPartition] | None = None,
                       assignment_digest: str | None = None) -> NodeAssignment | NodeHeartbeat:
        """Renew the node's lease (StaleNodeEpochError if fenced: it must register again); answer what it hosts.
        A node reports the high watermarks of the partitions it leads (kept for consumer-group lag) and the
        replicas it cannot serve now (ActiveController.replicas_offline). A node that names the digest of the
        assignment it applied last ("" for none) is answered a NodeHeartbeat: the assignment only if it changed.
        (A node of an earlier release names none, and is answered the assignment itself.)"""
        assignment = self._assignment(node_id, node_epoch, high_watermarks, offline_replicas)
        if assignment_digest is None:
            return assignment
        digest = hashlib.blake2b(_DIGESTED.encode(assignment), digest_size=16).hexdigest()
        return NodeHeartbeat(digest, None if digest == assignment_digest else assignment)

    def _assignment(self, node_id: int, node_epoch: int, high_watermarks: dict[TopicPartition, int] | None,
                    offline_replicas: list[TopicPartition] | None) -> NodeAssignment:
        """node_heartbeat's lease renewal and reports, and the node's assignment."""
        offline = frozenset(offline_replicas or ())

        def beat(controller: ActiveController) -> tuple[int, dict[int, frozenset[TopicPartition]]]:
            controller.heartbeat(node_id, node_epoch)
            controller.replicas_offline(node_id, node_epoch, offline)
            return controller.controller_epoch, dict(controller.offline_replicas)
        epoch, reported = self._call(beat)
        self.high_watermarks.update(high_watermarks or {})
        mine = {tp: reg for tp, reg in sorted(self.store.partition_registrations().items())
                if node_id in reg.assignment.replicas}  # (in order: the same view has the same digest)
        topics: dict[str, TopicInfo] = {}
        for name in sorted({tp[0] for tp in mine}):
            try:
                topics[name] = self.store.topic(name)
            except UnknownTopicError:
                continue  # deleted meanwhile
        addresses = {n.id: n.address for n in self.store.registered_nodes()}
        partitions = {tp: reg for tp, reg in mine.items() if tp[0] in topics}
        unserved = {tp: found for tp, reg in partitions.items()
                    if (found := tuple(r for r in reg.assignment.replicas if tp in reported.get(r, ())))}
        return NodeAssignment(epoch, partitions, topics, addresses, unserved)

    def controlled_shutdown(self, node_id: int, node_epoch: int) -> int:
        """A stopping node's leaderships moved to other in-sync replicas and the node out of every ISR now
        (ActiveController.controlled_shutdown); how many partitions changed."""
        return len(self._call(lambda c: c.controlled_shutdown(node_id, node_epoch)))

    def alter_partition(self, topic: str, partition: int, node_id: int, node_epoch: int, leader_epoch: int,
                        partition_epoch: int, isr: tuple[int, ...]) -> LeaderAndIsr:
        """A leader's ISR change (Kafka's AlterPartition), refused unless it quotes the current node, leader and
        partition epochs; returns the partition's state after it."""
        return self._call(lambda c: c.alter_partition((topic, partition), node_id, node_epoch, leader_epoch,
                                                      partition_epoch, isr))

    def describe_cluster(self) -> ClusterDescription:
        """The nodes with their liveness and every replicated partition's assignment and state. While the
        controller is not running (starting, or its store refuses writes) the store still answers, every node's
        liveness unknown (alive False), so clients keep routing by the stored leaders."""
        with self._lock:
            controller = self._controller
            if controller is not None:
                live = controller.nodes()
                epoch, nodes = controller.controller_epoch, tuple(live[i] for i in sorted(live))
        if controller is None:
            epoch, nodes = self.store.controller_epoch(), tuple(self.store.registered_nodes())
        partitions = self.store.partition_registrations()
        topic_ids = {}
        for name in sorted({tp[0] for tp in partitions}):
            try:
                topic_ids[name] = self.store.topic(name).topic_id
            except UnknownTopicError:
                continue  # deleted meanwhile
        return ClusterDescription(epoch, nodes, partitions, topic_ids)

    def elect_leaders(self, election: str, partitions: tuple[TopicPartition, ...] = ()) -> dict[TopicPartition,
                                                                                                LeaderAndIsr]:
        """A preferred-leader election (each partition's first replica leads again, if alive and in sync) or an
        unclean one (offline partitions of topics that enable it lead from outside the ISR) of `partitions` (all
        when empty); returns the states of the partitions whose leader changed."""
        try:
            kind = Election(election)
        except ValueError:
            raise InvalidRequestError(f"election must be one of {', '.join(e.value for e in Election)}, got "
                                      f"{clip(election)}") from None
        decisions = self._call(lambda c: c.elect_leaders(kind, tuple(partitions)))
        return {d.partition: d.after for d in decisions}

    def reassign_partition(self, topic: str, partition: int, replicas: tuple[int, ...]) -> PartitionRegistration:
        """Start moving a partition to `replicas` (Kafka's reassignment): returns its registration, whose
        assignment's `target` stays set until the new replicas are in sync and the old ones have left."""
        return self._call(lambda c: c.reassign((topic, partition), replicas))

    def create_topic(self, name: str, partitions: int, replication_factor: int, config: dict[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        return self._call(lambda c: c.create_topic(name, partitions, replication_factor, config, value_schema))

    def add_partitions(self, name: str, total: int) -> TopicInfo:
        return self._call(lambda c: c.add_partitions(name, total))
