"""The data node process (`fabric node start`, `python -m fabric.server.node`): registers with the controller,
keeps its heartbeat lease, learns the partitions it leads and serves them over Flight until SIGTERM.

States of a node: STARTING (not registered yet: the coordinator may still be starting, so registering is
retried until it answers) -> REGISTERED(node epoch) (heartbeats every node.heartbeat.interval.ms; each answer
says what it hosts) -> FENCED when the controller refuses a heartbeat (StaleNodeEpochError: its lease lapsed,
or a newer process of the id registered): it stops leading everything at once (the controller has declared it
dead) and registers again, under a new node epoch, -> REGISTERED. REGISTERED -> ISOLATED when no heartbeat was
answered for node.session.timeout.ms: it stops serving everything at once as well (the controller may have
declared it dead) but keeps its node epoch and goes on heartbeating: if the controller still holds its lease (it
was paused, not this node), the next answer brings it back -> REGISTERED under the same node epoch, its
partitions' leader epochs unchanged; a refusal -> FENCED. SIGTERM stops it within node.shutdown.timeout.ms
(fabric.server.shutdown). A restart with the same id and data directory registers again and finds its logs;
every registration carries the data directory's id (directory_id.py), and while another directory's process
holds the id's lease the controller refuses it (DuplicateNodeRegistrationError).

Each heartbeat reports the replicas the node cannot serve (storage_health: its storage failed), and one goes
out at once when that set changes. Besides heartbeats, a replication thread runs the ReplicaManager's rounds (ISR
changes through the controller's alter_partition, high-watermark checkpoints, probes of failed storage) every
MAINTAIN_INTERVAL_S; followers' fetchers reach other nodes
over the coordinator connection's clients and credentials. A LogMaintenance thread applies retention to the
partitions the node leads and cleans the replicas of compacted topics it hosts every
log.retention.check.interval.ms (ReplicaManager.maintained_partitions), each below its high watermark; it stops
with the node. A Scrubber thread checks every replica's frames in the background (scrubber.py).
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import os
import threading
import time
from typing import Any, Sequence

from fabric.common import pandas_probe
from fabric.common.errors import (
    DuplicateNodeRegistrationError,
    FabricError,
    InvalidConfigError,
    StaleNodeEpochError,
)
from fabric.common.types import LeaderAndIsr, NodeAssignment, NodeHeartbeat, NodeInfo, TopicPartition
from fabric.coordinator.disk import disk_errors
from fabric.server.arguments import OptionalArgument
from fabric.server.connection import Call, Connection, parse_url, server_token
from fabric.server.entry import server_main
from fabric.server.heap import QuietCollector
from fabric.server.metrics import ServerMetrics
from fabric.server.node.directory_id import directory_id
from fabric.server.node.leader import LeaderState
from fabric.server.node.metrics import ReplicationCollector
from fabric.server.node.replica_manager import ReplicaManager
from fabric.server.node.scrubber import Scrubber
from fabric.server.node.service import NodeService
from fabric.server.node.settings import NodeSettings, add_node_arguments, node_settings_from
from fabric.server.node.transaction_verification import TransactionVerification
from fabric.server.peer_calls import PeerCalls
from fabric.server.periodic import Periodic
from fabric.server.producer_owners import ProducerOwners
from fabric.server.shutdown import Interrupted, Shutdown, exit_now
from fabric.storage import lock
from fabric.storage.log_maintenance import LogMaintenance
from fabric.storage.log_manager import INTERNAL_DIR

log = logging.getLogger(__name__)
NODE_LOCK = "node.lock"  # in the data directory's __fabric: held by the node process serving it
MAINTAIN_INTERVAL_S = 0.25


class NodeState(str, enum.Enum):
    STARTING = "Starting"
    REGISTERED = "Registered"
    ISOLATED = "Isolated"
    FENCED = "Fenced"


class Node:
    """One data node: its registration and heartbeats (`connection` to the coordinator) from its data directory
    (`directory_id`), its replicas, its server."""

    def __init__(self, settings: NodeSettings, connection: Connection, replicas: ReplicaManager,
                 server: NodeService, directory_id: str) -> None:
        self.settings, self.connection, self.replicas, self.server = settings, connection, replicas, server
        self.directory_id = directory_id
        self.state = NodeState.STARTING
        self.stopping = threading.Event()
        self._beat_lock = threading.Lock()
        self._last_answer = self._last_beat = time.monotonic()  # last answered / last started heartbeat
        self._beat_due = threading.Event()  # heartbeat now: a replica's health changed
        # heartbeats name the view applied last (unless the coordinator refuses the argument)
        self._digests = OptionalArgument("assignment_digest", "every heartbeat brings the whole assignment")
        self._reported = ReportedHighWatermarks()
        replicas.refresh = self.refresh
        replicas.report = self._beat_due.set
        replicas.alter_partition = self.alter_partition
        replicas.transaction_record = lambda tid: self.connection.action("transaction_record", transactional_id=tid)
        replicas.verification = TransactionVerification(self.transaction_writer_registered)
        server.producer_owners = ProducerOwners(
            lambda producer_id: self.connection.action("producer_id_owner", producer_id=producer_id))

    def transaction_writer_registered(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                      tp: TopicPartition) -> bool:
        """The coordinator's answer: does the open transaction of `transactional_id` register this writer with
        partition `tp` (a transactional append that opens a transaction there is verified with it)?"""
        registered: bool = self.connection.action("verify_transaction_writer", transactional_id=transactional_id,
                                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                                  topic=tp[0], partition=tp[1])
        return registered

    def register(self) -> NodeInfo:
        """Register (a new node epoch, fencing older processes of the id), then learn what the node hosts."""
        node: NodeInfo = self.connection.action("register_node", node_id=self.settings.node_id,
                                                address=self.server.address, rack=self.settings.rack,
                                                directory_id=self.directory_id)
        self.server.node_epoch = node.node_epoch
        self._set(NodeState.REGISTERED)
        log.info("node %d registered at %s with node epoch %d", node.id, node.address, node.node_epoch)
        self._heartbeat()
        return node

    def _set(self, state: NodeState) -> None:
        if state is not self.state:
            log.info("node %d: %s -> %s", self.settings.node_id, self.state.value, state.value)
            self.state = state

    def _heartbeat(self) -> None:
        """One heartbeat: the node's reports out, the controller's view of its partitions in, applied. It names
        the digest of the view it applied last, so an unchanged view is neither sent nor applied again (unless
        the coordinator, of an earlier release, refuses the argument: then every answer is the whole view)."""
        high_watermarks, controller_epoch = self.replicas.leader_high_watermarks(), self.replicas.controller_epoch
        answer: NodeAssignment | NodeHeartbeat = self._digests.call(
            lambda args: self.connection.action("node_heartbeat", **args),
            {"node_id": self.settings.node_id, "node_epoch": self.server.node_epoch,
             "high_watermarks": self._reported.changed(high_watermarks, controller_epoch),
             "offline_replicas": self.replicas.health.unhealthy()}, self.replicas.applied_digest, "the coordinator")
        self._reported.heard(high_watermarks, controller_epoch)
        if isinstance(answer, NodeHeartbeat):
            if answer.assignment is not None:
                self.replicas.apply(answer.assignment, answer.digest)
        else:
            self.replicas.apply(answer)
        self._last_answer = time.monotonic()

    def beat(self) -> None:
        """One heartbeat (or registration, while fenced); fence every partition once the session has lapsed."""
        with self._beat_lock:
            self._beat_locked()

    def _beat_locked(self) -> None:
        self._last_beat = time.monotonic()
        try:
            if self.state in (NodeState.REGISTERED, NodeState.ISOLATED):
                self._heartbeat()
                self._set(NodeState.REGISTERED)  # an isolated node's lease was still alive: it serves again
            else:
                self.register()
        except StaleNodeEpochError as exc:
            self._fence(NodeState.FENCED, f"the controller refused the heartbeat ({exc}); registering again")
        except FabricError as exc:
            log.warning("node %d: heartbeat failed (%s); retrying", self.settings.node_id, exc)
        except Exception:  # noqa: BLE001 (a bug must not end the heartbeats: the session timeout fences below)
            log.exception("node %d: heartbeat failed; retrying", self.settings.node_id)
        silent_s = time.monotonic() - self._last_answer
        if self.state is NodeState.REGISTERED and silent_s * 1000 > self.settings.session_timeout_ms:
            self._fence(NodeState.ISOLATED, f"no heartbeat answered for {silent_s:.1f} s, over "
                        "node.session.timeout.ms; heartbeating on under node epoch "
                        f"{self.server.node_epoch}")

    def _fence(self, state: NodeState, why: str) -> None:
        self._set(state)
        self.replicas.fence_all(why)

    def controlled_shutdown(self, timeout_s: float) -> None:
        """Kafka's controlled shutdown, as the node stops (heartbeats stopped): the controller moves this node's
        leaderships to other in-sync replicas and takes it out of every ISR at once, instead of after its session
        times out; then every replica here is fenced, so clients go to the new leaders. Best effort, within
        `timeout_s`: if the controller does not answer, the session timeout does the same later."""
        with self._beat_lock:
            if self.state not in (NodeState.REGISTERED, NodeState.ISOLATED):
                return
            connection = Connection(dataclasses.replace(self.connection.options, timeout_s=max(timeout_s, 0.1)))
            try:
                changed = connection.action("controlled_shutdown", node_id=self.settings.node_id,
                                            node_epoch=self.server.node_epoch)
            except FabricError as exc:
                log.warning("node %d: controlled shutdown failed (%s); its partitions move once its session times "
                            "out", self.settings.node_id, exc)
                return
            finally:
                connection.close()
            self._fence(NodeState.FENCED, "the node is shutting down")
            log.info("node %d: controlled shutdown: the controller changed %d partition(s)", self.settings.node_id,
                     changed)

    def refresh(self) -> None:
        """Learn the controller's latest decisions now (a request showed this node is behind); requests asking at
        once share one heartbeat."""
        asked = time.monotonic()
        with self._beat_lock:
            if self.state is NodeState.REGISTERED and self._last_beat < asked:
                self._beat_locked()

    def alter_partition(self, tp: TopicPartition, leader: LeaderState, isr: tuple[int, ...]) -> LeaderAndIsr:
        """Ask the controller for a new ISR of a partition this node leads, quoting the epochs it leads under."""
        state: LeaderAndIsr = self.connection.action(
            "alter_partition", topic=tp[0], partition=tp[1], node_id=self.settings.node_id,
            node_epoch=self.server.node_epoch, leader_epoch=leader.leader_epoch,
            partition_epoch=leader.partition_epoch, isr=isr)
        return state

    def run_replication(self) -> None:
        """The ReplicaManager's rounds every MAINTAIN_INTERVAL_S until `stopping` is set."""
        while not self.stopping.wait(MAINTAIN_INTERVAL_S):
            if self.state is NodeState.REGISTERED:
                try:
                    self.replicas.maintain()
                except Exception:  # noqa: BLE001 (a bug must not end ISR maintenance: the next round tries again)
                    log.exception("node %d: a replication round failed; the next one tries again",
                                  self.settings.node_id)

    def run_heartbeats(self) -> None:
        """Heartbeat every node.heartbeat.interval.ms, and at once when a replica's health changed (so the
        controller moves its partitions on), until `stopping` is set."""
        while not self.stopping.is_set():
            self._beat_due.wait(self.settings.heartbeat_interval_ms / 1000)
            self._beat_due.clear()
            if not self.stopping.is_set():
                self.beat()


class ReportedHighWatermarks:
    """The high watermarks of the partitions this node leads, as the controller last heard them: a heartbeat
    reports only those that moved since (or whose leadership is new here), so a node leading thousands of idle
    partitions does not send, and the controller does not decode, all of them every beat. A controller of another
    epoch than the one that heard them (a new one keeps none of its predecessor's) is sent them all."""

    def __init__(self) -> None:
        self._heard: dict[TopicPartition, int] = {}
        self._epoch = -1  # the controller epoch that heard them

    def changed(self, now: dict[TopicPartition, int], controller_epoch: int) -> dict[TopicPartition, int]:
        """What a heartbeat reports of `now` (this node's leaders' high watermarks) under `controller_epoch`."""
        if controller_epoch != self._epoch:
            return now
        return {tp: hw for tp, hw in now.items() if self._heard.get(tp) != hw}

    def heard(self, reported: dict[TopicPartition, int], controller_epoch: int) -> None:
        """A heartbeat that reported from `reported` under `controller_epoch` was answered."""
        self._heard, self._epoch = reported, controller_epoch


def _register_until_answered(node: Node, shutdown: Shutdown) -> None:
    """Register, retrying while the coordinator is unavailable (it may be starting), and for two sessions while
    another data directory's process holds the id's lease: a process that died with it (a replaced disk, or one
    that exits on seeing its directory taken by this one) stops renewing it, so it lapses a session after its last
    renewal, which may come up to a session after this process's first try; refused after that, the holder is
    alive and this process exits. Other refusals raise."""
    session_s = 2 * node.settings.session_timeout_ms / 1000
    refused_since: float | None = None
    while True:
        try:
            node.register()
            return
        except DuplicateNodeRegistrationError as exc:
            refused_since = time.monotonic() if refused_since is None else refused_since
            if time.monotonic() - refused_since > session_s:
                raise DuplicateNodeRegistrationError(f"{exc} (refused for over twice node.session.timeout.ms, "
                                                     f"{session_s:g} s: that process is alive)") from None
            log.warning("node %d: %s; retrying until its session could have lapsed", node.settings.node_id, exc)
        except FabricError as exc:
            if not exc.retriable or shutdown.requested.is_set():
                raise
            log.warning("node %d: cannot register yet (%s); retrying", node.settings.node_id, exc)
        if shutdown.requested.wait(1.0):
            return


def _claim_data_dir(data_dir: str) -> int:
    """Lock the data directory for this process (the descriptor holding the lock): two node processes writing one
    directory, a node started twice by mistake, would corrupt its logs."""
    internal = os.path.join(data_dir, INTERNAL_DIR)
    with disk_errors(data_dir, "lock the node's data directory"):
        os.makedirs(internal, exist_ok=True)
        claimed = lock.claim(os.path.join(internal, NODE_LOCK))
    if claimed is None:
        raise InvalidConfigError(f"data directory {data_dir} is in use by another node process; stop that process "
                                 "first, or give this node its own --data")
    return claimed


def _guard_claim(claimed: int, data_dir: str) -> Periodic:
    """Exit at once, writing nothing more, once another lock file is at the data directory's (the directory deleted
    and made again under this process, and another node started on it): two processes must never write the same
    partitions' files. Its replicas are then as after a SIGKILL. A directory only deleted leaves the process
    serving, its replicas reported offline (storage_health), until it is restarted."""
    path = os.path.join(data_dir, INTERNAL_DIR, NODE_LOCK)

    def check() -> None:
        if lock.replaced(claimed, path):
            exit_now(f"data directory {data_dir}: {path} is not the lock file this node claimed (the directory was "
                     "deleted and made again while the node ran, and another node process started on it); exiting "
                     "without writing more, so that the two never write the same files", 1)
    return Periodic("node-data-dir-claim", MAINTAIN_INTERVAL_S, lambda: True, check,
                    "check of the data directory's lock").start()


def serve(settings: NodeSettings) -> None:
    """Run one data node until SIGTERM/SIGINT, then stop within settings.shutdown_timeout_ms."""
    pandas_probe.settle_without_pandas()
    claimed = _claim_data_dir(settings.data_dir)
    guard = _guard_claim(claimed, settings.data_dir)
    shutdown = Shutdown(settings.shutdown_timeout_ms / 1000)
    shutdown.install()
    options = parse_url(settings.coordinator)
    token = server_token(settings.token_file) if settings.token_file else options.token
    # a heartbeat must give up before the session lapses, so the node notices it is cut off in time
    connection = Connection(dataclasses.replace(options, token=token, timeout_s=min(
        options.timeout_s, settings.session_timeout_ms / 2000)))
    protocol = PeerCalls(connection)
    server = node = None
    scrubber: Scrubber | None = None
    maintenance: LogMaintenance | None = None
    collector = QuietCollector().start()  # (full collections kept out of the requests' way)
    try:
        def peer(address: str, call: Call) -> Any:
            return call(connection.client(address), connection.call_options)
        rate = settings.log_scrubber_io_max_bytes_per_second
        replicas = ReplicaManager(settings.node_id, settings.data_dir, peer, settings.fetch_settings(),
                                  settings.replica_lag_time_max_ms, verify_on_start=rate > 0, protocol=protocol)
        scrubber = Scrubber(replicas, rate, settings.log_scrubber_backoff_ms) if rate else None
        metrics = ServerMetrics()
        metrics.registry.register(ReplicationCollector(replicas, scrubber))
        metrics.serve(settings.metrics_host, settings.metrics_port, settings.metrics_token_file)
        server = NodeService(settings, replicas, metrics)
        node = Node(settings, connection, replicas, server, directory_id(settings.data_dir))
        _register_until_answered(node, shutdown)
        heartbeats = threading.Thread(target=node.run_heartbeats, name="node-heartbeat", daemon=True)
        heartbeats.start()
        threading.Thread(target=node.run_replication, name="node-replication", daemon=True).start()
        maintenance = LogMaintenance(replicas.maintained_partitions, settings.log_retention_check_interval_ms,
                                     name="node-log-maintenance",
                                     producer_id_expiration_ms=settings.producer_id_expiration_ms,
                                     expiring=replicas.hosted_partitions).start()
        if scrubber is not None:
            scrubber.start()
        shutdown.serve_until_requested(f"node {settings.node_id} serving {settings.data_dir} at {server.address} "
                                       f"(coordinator {', '.join(options.addresses)}, node epoch {server.node_epoch})")
    except Interrupted as stop:
        log.info("%s before the node was serving: stopping", stop)
    finally:
        _stop(shutdown, server, node, connection, maintenance, scrubber)
        protocol.close()
        guard.stop(MAINTAIN_INTERVAL_S)
        os.close(claimed)
        collector.stop()


def _stop(shutdown: Shutdown, server: NodeService | None, node: Node | None, connection: Connection,
          maintenance: LogMaintenance | None, scrubber: Scrubber | None) -> None:
    """Stop heartbeating, hand the node's leaderships over (controlled shutdown), stop scrubbing, cleaning and
    serving (calls in flight finish), within the deadline."""
    shutdown.begin()
    if node is not None:
        node.stopping.set()
        node.controlled_shutdown(shutdown.remaining() / 3)
        node.replicas.stop()
    if scrubber is not None:  # (it stops between two frames)
        scrubber.stop(timeout_s=max(shutdown.remaining() / 4, 0.1))
    if maintenance is not None:  # a pass in progress ends after its partition (a kill mid-swap is recovered)
        maintenance.stop(timeout_s=max(shutdown.timeout_s / 2, 0.1))
    finished = True
    if server is not None:
        finished = shutdown.wait("stop serving", shutdown.start("stop serving", server.shutdown))
    connection.close()
    shutdown.finish(finished)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fabric.server.node [options]`: the same options as `fabric node start`."""
    return server_main("python -m fabric.server.node", __doc__, add_node_arguments, node_settings_from, serve, argv)
