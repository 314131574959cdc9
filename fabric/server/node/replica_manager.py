"""The partitions one data node hosts (Kafka's ReplicaManager): a PartitionReplica (its role, leader epoch, log
and high watermark) for each, as the controller's assignments say, and a ReplicaFetcher for each leader node
it follows partitions of (Kafka's addFetcherForPartitions / removeFetcherForPartitions; an idle one stops).

The data directory belongs to one node id (`__fabric/node.id`), so a restart with the same id and directory
finds its logs and rejoins, and a directory of another node is refused. Serving a partition means leading it
under the epoch the request quotes; a request for a partition the node does not know, or quoting a newer
epoch than it knows, first refreshes the assignment from the controller (`refresh`, set by the node), so a
node learns a decision as soon as a client has. A topic that disappears from the assignments was deleted: its
logs here are deleted too. `maintain` (run periodically by the node) asks the controller to shrink or expand
the ISR of each partition it leads (`alter_partition`, set by the node) and checkpoints high watermarks.
Replicas of compacted topics are cleaned by the node's log maintenance (`maintained_partitions`) and, at the
leader, on demand (`compact_partition`), each below its own high watermark. Retention runs at the leader only,
in the same maintenance and on demand (`enforce_retention`), as does DeleteRecords (`delete_records`), never
past the high watermark; followers take the leader's log start from their fetch answers. Each replica's health
(storage_health: its storage failed, or it is damaged and not yet repaired) is reported with the node's
heartbeats; reads that meet damage are repaired from another replica first (repair.py), and
`replica_range` serves this node's copy of a range to a replica repairing its own. The leader's transaction requests
(markers, open transactions) are transaction_markers.TransactionMarkers, which it inherits.
"""
from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any, Callable

import pyarrow as pa

from fabric.common.errors import (
    FabricError,
    InconsistentTopicIdError,
    InvalidRequestError,
    KafkaStorageError,
    NotLeaderError,
    UnknownTopicOrPartitionError,
)
from fabric.common.redaction import clip
from fabric.common.types import (
    EpochEndOffset,
    Fetched,
    LeaderAndIsr,
    NodeAssignment,
    PartitionState,
    TopicInfo,
    TopicPartition,
    TransactionRecord,
)
from fabric.coordinator.disk import disk_errors
from fabric.server import partition_ops
from fabric.server.held import Held
from fabric.server.node import directory_ids, follower_fetches
from fabric.server.node.fetcher import FetchSettings, Peer, ReplicaFetcher
from fabric.server.node.leader import LeaderState
from fabric.server.node.partition import PartitionReplica, Role
from fabric.server.node.producer_state_loader import ProducerStateLoader
from fabric.server.node.repair import RANGE_MAX_BYTES, Repairer, peer_copy
from fabric.server.node.replica_fetch import ReplicaFetch
from fabric.server.node.storage_health import Condition, Health, StorageHealth
from fabric.server.node.transaction_markers import TransactionMarkers
from fabric.server.node.transaction_verification import TransactionVerification
from fabric.server.peer_calls import PeerCalls
from fabric.storage import scrub
from fabric.storage.cleaner import CleanReport
from fabric.storage.log import Log
from fabric.storage.log_manager import LogManager
from fabric.storage.reader import READ_COMMITTED

log = logging.getLogger(__name__)


# the controller's answer to an ISR change: (partition, leader state it was asked for, ISR) -> the new state
AlterPartition = Callable[[TopicPartition, LeaderState, tuple[int, ...]], LeaderAndIsr]


def _replica_log(replica: PartitionReplica) -> Log:
    return replica.log


class ReplicaManager(TransactionMarkers):
    """The replicas of node `node_id` with their logs under `data_dir`; with a `peer` and `protocol` (Flight and
    fabric protocol calls to other nodes) it runs a fetcher for every partition it follows (without them, as in
    unit tests, followers stay idle)."""

    def __init__(self, node_id: int, data_dir: str, peer: Peer | None = None,
                 fetch_settings: FetchSettings = FetchSettings(), replica_lag_time_max_ms: int = 30000,
                 verify_on_start: bool = False, protocol: PeerCalls | None = None) -> None:
        self.node_id = node_id
        with disk_errors(data_dir, "open the node's data directory"):
            self.logs = LogManager(data_dir, lambda txn: False, replica=True)  # a node never publishes transactions
            directory_ids.claim(self.logs.internal_dir, self.logs.root, node_id)
        self.peer, self.protocol, self.fetch_settings = peer, protocol, fetch_settings
        self.lag_ms = replica_lag_time_max_ms
        self.refresh: Callable[[], None] = lambda: None
        self.report: Callable[[], None] = lambda: None  # heartbeat soon: a replica's health changed (set by the node)
        self.health = StorageHealth(node_id, self._partition_dir, lambda tp: tp in self._replicas)
        if verify_on_start:  # (the node scrubs them): reported from the first heartbeat on
            for tp in self.logs.partitions_on_disk():
                self.health.unverified(tp)
        self.health.on_change = self._health_changed
        self.alter_partition: AlterPartition | None = None
        # the coordinator's record of a transactional id (set by the node), which markers are checked against
        self.transaction_record: Callable[[str], TransactionRecord] | None = None
        self.verification: TransactionVerification | None = None  # of transactional appends (set by the node)
        self.controller_epoch = 0
        self.applied_digest = ""  # the controller's digest of the last view every partition took (apply)
        # The topics whose id could not be checked against their directory yet, as they were before (so the check
        # is tried again with the next view, against what the logs on disk belong to)
        self._id_unchecked: dict[str, TopicInfo | None] = {}
        self._replicas: dict[TopicPartition, PartitionReplica] = {}
        self._fetchers: dict[tuple[int, str], ReplicaFetcher] = {}  # by leader node id and address
        self._fetched_from: dict[TopicPartition, tuple[int, str]] = {}  # which fetcher copies a partition
        self._topics: dict[str, TopicInfo] = {}
        self._addresses: dict[int, str] = {}
        self._offline_replicas: dict[TopicPartition, tuple[int, ...]] = {}  # replicas their nodes report offline
        self._lock = threading.RLock()  # (a replica found offline while the assignment is applied takes it again)
        self.producer_states = ProducerStateLoader(node_id)  # the replicas' producer states, loaded in the background
        self.repairer = Repairer(node_id, self.health, peer_copy(peer, self._addresses) if peer else None,
                                 lambda tp: self._offline_replicas.get(tp, ()), self._topic_id)

    # -- the controller's assignments ----------------------------------------------------------------------
    def apply(self, assignment: NodeAssignment, digest: str = "") -> None:
        """Take the controller's view of this node's partitions: roles move on (never back in epoch), leaders
        and followers open their logs, followers fetch from their leader, partitions of deleted topics are
        dropped with their data. The view of a controller older than one already heard from (deposed since) is
        ignored. `digest` (the controller's, of this view) becomes `applied_digest` once every partition took
        it; a partition whose storage failed, or that could not take its role, leaves "" (the next heartbeat
        brings the whole view again)."""
        with self._lock:
            self.applied_digest = ""
            if assignment.controller_epoch < self.controller_epoch:
                log.info("node %d: ignoring the view of controller epoch %d (epoch %d is newer)", self.node_id,
                         assignment.controller_epoch, self.controller_epoch)
                return
            hosted = {tp[0] for tp in self._replicas}
            self.controller_epoch = assignment.controller_epoch
            known = {**self._topics, **self._id_unchecked}  # each topic as last checked
            self._topics = dict(assignment.topics)
            checked: set[str] = set()  # the topics whose id this view's first partition of each checked
            self._addresses.update(assignment.addresses)
            self._offline_replicas = dict(assignment.offline_replicas)
            whole = True
            try:
                for tp, registration in sorted(assignment.partitions.items()):
                    try:
                        with self.health.guard(tp, f"open partition {tp[0]}-{tp[1]}"):
                            if tp[0] not in checked:  # (before any replica of the topic is taken)
                                self._id_unchecked.setdefault(tp[0], known.get(tp[0]))
                                self._check_topic_id(assignment.topics[tp[0]], known.get(tp[0]))
                                self._id_unchecked.pop(tp[0])
                                checked.add(tp[0])
                            replica = self._replicas.get(tp)
                            if replica is None:
                                opener = self._opener(tp)
                                replica = self._replicas[tp] = PartitionReplica(tp, self.node_id, opener)
                                replica.wants_producer_state = functools.partial(
                                    self.producer_states.load, tp, functools.partial(opener, create=False))
                            if replica.become(registration):
                                self._follow(replica)
                    except KafkaStorageError:
                        whole = False
                        continue  # offline: reported with the heartbeats, and the controller moves it on
                    except OSError as exc:  # not a failure of the storage (a file where its directory goes, too
                        whole = False  # many open files): offline, and tried again with the next view
                        self.health.refused(tp, f"cannot take its role from the controller's view: {exc}")
                        continue
                    self.health.took_role(tp)
            finally:  # fetchers start once they have all their partitions: the first fetch asks for all of them,
                for fetcher in self._fetchers.values():  # instead of long-polling for the first alone
                    fetcher.start()
            for topic in set(self._id_unchecked) - set(assignment.topics):
                del self._id_unchecked[topic]
            for tp in set(self.health.unhealthy()) - set(assignment.partitions):
                self.health.forget(tp)  # (found on disk at start, or left the node)
            for tp in sorted(set(self._replicas) - set(assignment.partitions)):
                self._stop_fetcher(tp)
                self._replicas.pop(tp).fence("no longer assigned to this node")
                if tp[0] in assignment.topics:  # reassigned away: this copy is no longer needed
                    log.info("partition %s-%d was moved off node %d: deleting its log here", *tp, self.node_id)
                    with disk_errors(self.logs.topic_dir(tp[0]), f"delete partition {tp[0]}-{tp[1]}"):
                        self.logs.delete_partition(tp)
            for topic in sorted(hosted - set(assignment.topics)):
                log.warning("topic %s was deleted: deleting its logs on node %d", topic, self.node_id)
                with disk_errors(self.logs.topic_dir(topic), f"delete the logs of topic {topic!r}"):
                    self.logs.delete_topic(topic)
            if whole:
                self.applied_digest = digest

    def _check_topic_id(self, info: TopicInfo, known: TopicInfo | None) -> None:
        """A topic deleted and created again under its name is another topic (Kafka's topic ids): the logs of the
        old one, here since before a restart or not yet dropped, are deleted before the new one is served. The id
        is kept in the topic's directory (directory_ids). Topics without an id (older metadata) are not checked.
        `known` is the topic as the previous view had it. Lock held."""
        if not info.topic_id or (known is not None and known.topic_id == info.topic_id):
            return
        topic_dir = self.logs.topic_dir(info.name)
        stored = directory_ids.stored_topic_id(topic_dir)
        if stored is None:
            stored = known.topic_id if known is not None else ""
        if stored and stored != info.topic_id:
            log.warning("topic %s was deleted and created again (topic id %s, now %s): deleting the old one's logs "
                        "on node %d", info.name, stored, info.topic_id, self.node_id)
            for tp in sorted(tp for tp in self._replicas if tp[0] == info.name):
                self._stop_fetcher(tp)
                self._replicas.pop(tp).fence("its topic was deleted and created again")
            self.logs.delete_topic(info.name)
        directory_ids.write_topic_id(topic_dir, info.topic_id)

    def _opener(self, tp: TopicPartition) -> Callable[..., Log]:
        """What opens `tp`'s log; with create=False (a background task's) FileNotFoundError where its directory is
        gone (the topic deleted meanwhile), never creating it again."""
        def opened(create: bool = True) -> Log:
            info = self._topics.get(tp[0])
            if info is None:  # (an assignment without its topic is being applied: the replica is stopped next)
                raise UnknownTopicOrPartitionError(f"node {self.node_id} no longer hosts topic {tp[0]!r}: partition "
                                                   f"{tp[0]}-{tp[1]} was deleted or moved away from it")
            return self.logs.log(info, tp[1], create=create)
        return opened

    def _topic_id(self, topic: str) -> str:
        known = self._topics.get(topic)
        return known.topic_id if known is not None else ""

    def _partition_dir(self, tp: TopicPartition) -> str:
        return os.path.join(self.logs.topic_dir(tp[0]), str(tp[1]))

    def _health_changed(self, tp: TopicPartition, condition: Condition) -> None:
        """A replica went offline (its fetcher stops) or is healthy again (it fetches again); the node heartbeats
        at once, so the controller learns it."""
        with self._lock:
            self.applied_digest = ""  # the next heartbeat brings the whole view: its roles are taken again
            replica = self._replicas.get(tp)
            if replica is not None:
                self._follow(replica)
                for fetcher in self._fetchers.values():
                    fetcher.start()
        self.report()

    def _follow(self, replica: PartitionReplica) -> None:
        """Start (or stop) the replica's fetcher for its new role or health (lock held): an offline replica
        fetches nothing."""
        self._stop_fetcher(replica.tp)
        state = replica.state
        if (state.role is not Role.FOLLOWER or self.peer is None or self.protocol is None
                or state.registration is None or self.health.offline(replica.tp)):
            return
        leader = state.registration.state.leader
        assert leader is not None  # a follower has a leader
        address = self._addresses.get(leader)
        if address is None:
            log.warning("partition %s: the address of leader node %d is unknown; fetching once it is", replica.name,
                        leader)
            return
        source = (leader, address)
        fetcher = self._fetchers.get(source)
        if fetcher is None:
            fetcher = self._fetchers[source] = ReplicaFetcher(self.node_id, leader, address, self.peer, self.protocol,
                                                              self.refresh, self.fetch_settings, self.health.guard)
        fetcher.add(replica, state.leader_epoch, self._topics[replica.tp[0]].topic_id)
        self._fetched_from[replica.tp] = source

    def _stop_fetcher(self, tp: TopicPartition) -> None:
        """Stop copying `tp`; its leader's fetcher stops once it copies nothing else (lock held)."""
        source = self._fetched_from.pop(tp, None)
        fetcher = self._fetchers.get(source) if source is not None else None
        if source is not None and fetcher is not None and fetcher.remove(tp) and not len(fetcher):
            self._fetchers.pop(source).stop()

    def fence_all(self, why: str) -> None:
        """Stop serving and fetching every partition (the node's registration lapsed): only the controller's next
        decisions, after the node registers again, bring them back."""
        with self._lock:
            self.applied_digest = ""
            for tp, replica in self._replicas.items():
                self._stop_fetcher(tp)
                replica.fence(why)

    def stop(self) -> None:
        """Stop every fetcher and the producer state loader, then snapshot the producer states the node holds, so
        its next start walks no frames for them (the node is shutting down)."""
        self.producer_states.stop()
        with self._lock:
            for tp in list(self._fetched_from):
                self._stop_fetcher(tp)
        self.logs.closing()

    def fetchers(self) -> list[dict[str, object]]:
        """Each fetcher: the leader node it copies from, the partitions it copies there, and its fetch session's id
        there (0: none open)."""
        with self._lock:
            fetchers = sorted(self._fetchers.items())
        return [{"leader": leader, "address": address, "partitions": [list(tp) for tp in fetcher.partitions()],
                 "session": fetcher.session_id} for (leader, address), fetcher in fetchers]

    def topic_configs(self) -> dict[str, dict[str, str]]:
        """The config overrides of each topic this node hosts, as it applies them now (a change reaches the node
        with the controller's next view, so this is how far it got)."""
        return {name: dict(info.config) for name, info in sorted(self._topics.items())}

    def hosted(self) -> list[PartitionReplica]:
        with self._lock:
            return list(self._replicas.values())

    def hosts(self, replica: PartitionReplica) -> bool:
        """Whether `replica` is still the node's replica of its partition."""
        return self._replicas.get(replica.tp) is replica

    def hosted_replica(self, tp: TopicPartition) -> PartitionReplica | None:
        return self._replicas.get(tp)

    def hosted_topic(self, name: str) -> TopicInfo | None:
        """The metadata of topic `name` as this node knows it now (None: none), without asking the controller."""
        return self._topics.get(name)

    def leaders(self) -> list[TopicPartition]:
        return sorted(tp for tp, r in self._replicas.items() if r.state.role is Role.LEADER)

    def leader_high_watermarks(self) -> dict[TopicPartition, int]:
        """The high watermark of each partition this node leads (reported with its heartbeats)."""
        with self._lock:
            replicas = list(self._replicas.items())
        return {tp: r.hw for tp, r in replicas if r.leader is not None and r.hw >= 0}  # (leader: set while leading)

    # -- replication housekeeping --------------------------------------------------------------------------
    def maintain(self) -> None:
        """One round: ask the controller for each ISR change the partitions led here need, and checkpoint every
        high watermark that moved."""
        self.health.probe()
        with self._lock:
            replicas = list(self._replicas.values())
        for replica in replicas:
            if not replica.isr_upkeep_due(self.lag_ms) and not replica.checkpoint_due():  # (most replicas: the
                continue  # followers, and leaders whose every follower is in sync; a change racing it: next round)
            offline = self.health.offline(replica.tp)  # its leadership is moving: its ISR is kept meanwhile
            try:
                with self.health.guard(replica.tp, f"checkpoint partition {replica.name}"):
                    self._maintain_isr(replica)
                    if not offline:
                        replica.checkpoint()
            except KafkaStorageError as exc:  # logged once, as the replica went offline
                log.debug("partition %s: %s", replica.name, exc)
            except FabricError as exc:
                log.warning("partition %s: %s; retrying next round", replica.name, exc)

    def _maintain_isr(self, replica: PartitionReplica) -> None:
        if self.alter_partition is None:
            return
        wanted = replica.wanted_isr(self.lag_ms, self._offline_replicas.get(replica.tp, ()))
        if wanted is None:
            return
        leader, isr = wanted
        log.info("partition %s: asking the controller to change the ISR %s -> %s", replica.name, list(leader.isr),
                 list(isr))
        try:
            state = self.alter_partition(replica.tp, leader, isr)
        except FabricError:
            replica.isr_refused(leader)
            self.refresh()  # the controller may know a newer state (a stale partition or leader epoch)
            raise
        replica.isr_changed(leader, state)

    # -- serving ---------------------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicInfo:
        """The metadata of a topic this node hosts; NotLeaderError if it hosts none of it."""
        info = self._topics.get(name)
        if info is None:
            self.refresh()
            info = self._topics.get(name)
        if info is None:
            raise NotLeaderError(f"node {self.node_id} hosts no partition of topic {name!r}; refresh the metadata")
        return info

    def replica(self, topic: str, partition: int, leader_epoch: int | None, from_follower: bool = False,
                topic_id: str = "") -> PartitionReplica:
        """The replica of a partition this node leads under `leader_epoch` (None: whichever it leads under), or
        with `from_follower` also follows under it; of the topic with `topic_id`, if given (a topic deleted and
        created again under its name is another one: InconsistentTopicIdError until both sides agree)."""
        tp = (topic, partition)
        if self.behind(tp, leader_epoch, topic_id):
            self.refresh()
        replica = self._replicas.get(tp)
        if not self.same_topic(topic, topic_id):
            known = self._topics.get(topic)
            raise InconsistentTopicIdError(
                f"node {self.node_id} serves topic {topic!r} with id {known.topic_id if known else 'none'}, the "
                f"request names id {topic_id}: it was deleted and created again and one side is behind; refresh the "
                "metadata and retry")
        if replica is None:
            raise NotLeaderError(f"node {self.node_id} hosts no replica of {topic}-{partition}; refresh the "
                                 "metadata")
        replica.check_readable(leader_epoch, from_follower)
        return replica

    def behind(self, tp: TopicPartition, leader_epoch: int | None, topic_id: str) -> bool:
        """Whether a request for `tp` under `leader_epoch` (None: any) of the topic with `topic_id` ("": any) knows
        of a decision this node does not yet: it hosts no replica of `tp`, the epoch is newer, the topic id another
        (replica() asks the controller first)."""
        replica = self._replicas.get(tp)
        return (replica is None or (leader_epoch is not None and leader_epoch > replica.state.leader_epoch)
                or not self.same_topic(tp[0], topic_id))

    def same_topic(self, topic: str, topic_id: str) -> bool:
        """Whether `topic_id` ("": any) names the topic this node knows by that name, if it knows one."""
        known = self._topics.get(topic)
        return not topic_id or known is None or not known.topic_id or known.topic_id == topic_id

    def append(self, *args: Any, **kwargs: Any) -> int:
        """`append_held`, its answer waited for on this thread."""
        return int(self.append_held(*args, **kwargs).wait())

    def append_held(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none",
                    leader_epoch: int | None = None, acks: str = "all", timeout_ms: int = 30000,
                    producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1, topic_id: str = "",
                    transactional: bool = False, transactional_id: str = "") -> Held:
        """Append as the leader; the first offset is held until `acks` "0"/"1" have the leader's append, "all"
        (or "-1") until the ISR has the rows, up to `timeout_ms` (PartitionReplica.append_held: no thread waits).
        An idempotent producer's retry is not written twice; its `transactional` rows, of a transaction of
        `transactional_id` the coordinator verifies (`verification`), stay invisible to read_committed readers
        until write_markers ends them."""
        producer = partition_ops.producer_batch(producer_id, producer_epoch, base_sequence)
        acks = partition_ops.check_acks(acks)
        if transactional:
            partition_ops.check_transactional_id(transactional_id)
        timeout_s = partition_ops.wait_seconds("timeout_ms", timeout_ms)
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with self.health.writing((topic, partition), f"append to partition {topic}-{partition}"):
            if not transactional or producer is None or self.verification is None:
                return replica.append_held(rows, codec, leader_epoch, acks, timeout_s, producer, transactional)
            return self.verification.append(transactional_id, (topic, partition), producer, replica.log, lambda p: (
                replica.append_held(rows, codec, leader_epoch, acks, timeout_s, p, True)))

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, end_offset: int | None = None,
              leader_epoch: int | None = None, max_wait_ms: int = 0, from_follower: bool = False,
              topic_id: str = "", isolation_level: str = READ_COMMITTED) -> list[Fetched]:
        """Records below the high watermark (read_committed: the last stable offset), for consumers, waiting up
        to `max_wait_ms` for some at its end; a follower serves them too when asked `from_follower` under its
        leader epoch (KIP-392)."""
        wait_s = partition_ops.wait_seconds("max_wait_ms", max_wait_ms)
        isolation, max_bytes = partition_ops.isolation_level(isolation_level), partition_ops.fetch_bytes(max_bytes)
        replica = self.replica(topic, partition, leader_epoch, from_follower, topic_id)
        with self.health.guard((topic, partition), f"read partition {topic}-{partition}"):
            return self.repairer.read_repaired(replica, lambda: replica.read(
                offset, max_bytes, end_offset, leader_epoch, wait_s, from_follower, isolation))

    def replica_fetch(self, replica_id: int, partitions: list[tuple[str, int, int, int, str]],
                      max_bytes: int = follower_fetches.MAX_BYTES,
                      response_max_bytes: int = follower_fetches.RESPONSE_MAX_BYTES,
                      max_wait_ms: int = follower_fetches.MAX_WAIT_MS, omit_unchanged: bool = False
                      ) -> list[ReplicaFetch | FabricError | None]:
        """A follower's fetch of every partition it copies from this node, each (topic, partition, offset, leader
        epoch, topic id) (Kafka's replica FetchRequest): per partition, its progress recorded and its frames from
        the offset (up to `max_bytes`, and `response_max_bytes` over all), or the error that concerns it alone;
        with `omit_unchanged`, None where the answer would repeat the follower's last (follower_fetches).
        When none has frames, held up to max_wait_ms until one has, or a leadership among them ends."""
        return follower_fetches.serve(self, replica_id, partitions, max_bytes, response_max_bytes, max_wait_ms,
                                      omit_unchanged)

    def replica_range(self, topic: str, partition: int, start_offset: int, end_offset: int,
                      max_bytes: int = RANGE_MAX_BYTES, topic_id: str = "") -> pa.Buffer:
        """Another replica's repair (repair.py): this node's copy of the whole frames from the one holding
        `start_offset` to `end_offset`, below its high watermark, about `max_bytes` (at most RANGE_MAX_BYTES),
        whatever its role. CorruptRecordError if this copy is damaged there too."""
        if min(partition, start_offset, end_offset, max_bytes) < 0:
            raise InvalidRequestError(f"replica_range of {clip(topic, 60)}-{partition}: partition, offsets and "
                                      "max_bytes must be ints from 0")
        replica = self._replicas.get((topic, partition))
        if replica is None or not self.same_topic(topic, topic_id) or self.health.offline(replica.tp):
            raise NotLeaderError(f"node {self.node_id} holds no copy of {topic}-{partition} it can serve")
        with self.health.guard((topic, partition), f"read partition {topic}-{partition}"):
            return scrub.copy_range(replica.log, start_offset, min(end_offset, replica.hw),
                                    min(max_bytes, RANGE_MAX_BYTES))

    def offsets_for_leader_epoch(self, topic: str, partition: int, epoch: int, leader_epoch: int,
                                 topic_id: str = "") -> EpochEndOffset:
        """Where the leader's records of `epoch` end (KIP-101), asked by a follower under `leader_epoch`."""
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with self.health.guard((topic, partition), f"read partition {topic}-{partition}"):
            return replica.end_offset_for(epoch, leader_epoch)

    def partition_state(self, topic: str, partition: int, leader_epoch: int | None = None,
                        topic_id: str = "") -> PartitionState:
        """The partition's offsets (its end is the last stable offset: the high watermark unless a transaction is
        open below it), leader, replicas, ISR and epoch."""
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        reg = replica.state.registration
        assert reg is not None  # a leader's state comes from a registration
        leader = replica.leader
        isr = leader.isr if leader is not None else reg.state.isr
        with self.health.guard((topic, partition), f"read partition {topic}-{partition}"):
            return partition_ops.state(replica.log, topic, partition, replica.readable_end(), leader=reg.state.leader,
                                       replicas=reg.assignment.replicas, isr=isr, leader_epoch=reg.state.leader_epoch)

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int,
                        leader_epoch: int | None = None, topic_id: str = "") -> int | None:
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with self.health.guard((topic, partition), f"read partition {topic}-{partition}"):
            found = partition_ops.offset_for_time(replica.log, timestamp_us)
        return found if found is None or found < replica.hw else None

    def offset_after_records(self, topic: str, partition: int, offset: int, count: int,
                             end_offset: int | None = None, isolation_level: str = READ_COMMITTED,
                             leader_epoch: int | None = None, topic_id: str = "") -> int:
        """Counted below where a consumer's fetch with `isolation_level` stops (the high watermark, or the last
        stable offset), at the leader."""
        isolation = partition_ops.isolation_level(isolation_level)
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with self.health.guard((topic, partition), f"read partition {topic}-{partition}"):
            bound = replica.readable_end(isolation)
            return partition_ops.offset_after_records(replica.log, offset, count,
                                                      bound if end_offset is None else min(end_offset, bound),
                                                      isolation)

    # -- retention, DeleteRecords and compaction ------------------------------------------------------------
    def delete_records(self, topic: str, partition: int, before_offset: int, leader_epoch: int | None = None,
                       topic_id: str = "") -> int:
        """Kafka's DeleteRecords at the partition's leader (`fabric topics delete-records`): move its log start up
        to `before_offset` (-1: the high watermark), never past the high watermark; returns the low watermark.
        Followers take the new log start from their next fetch answer."""
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with self.health.writing((topic, partition), f"delete records of {topic}-{partition}"):
            return replica.delete_records(before_offset, leader_epoch)

    def enforce_retention(self, topic: str, partition: int, leader_epoch: int | None = None,
                          topic_id: str = "") -> int:
        """`fabric topics retain` at the partition's leader: apply retention now, below the high watermark;
        segments deleted (followers follow the new log start)."""
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with self.health.writing((topic, partition), f"enforce the retention of {topic}-{partition}"):
            return replica.enforce_retention(leader_epoch)

    def compact_partition(self, topic: str, partition: int, leader_epoch: int | None = None,
                          topic_id: str = "") -> CleanReport:
        """`fabric topics compact` at the partition's leader: roll the active segment and clean everything below
        the high watermark now (the followers clean their own copies on their own schedule). InvalidConfigError
        for a topic that is not compacted."""
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        partition_ops.check_compacted(self.topic(topic))
        with self.health.writing((topic, partition), f"compact partition {topic}-{partition}"):
            return replica.log.clean(force=True)

    def maintained_partitions(self) -> list[tuple[str, Callable[[], Log]]]:
        """The replicas the node's background maintenance looks after, by name, with how to open each log: those
        it leads (retention, below the high watermark; the log's retention bound checks the role again) and
        every replica of a compacted topic (each cleans its own copy below its high watermark). A follower of
        another topic has nothing to do: it takes its leader's log start from fetch answers."""
        with self._lock:
            return [(replica.name, functools.partial(_replica_log, replica)) for tp, replica in
                    sorted(self._replicas.items()) if not self.health.offline(tp) and (
                        replica.state.role is Role.LEADER or (
                            replica.state.role is Role.FOLLOWER and partition_ops.compacted(self._topics[tp[0]])))]

    def hosted_partitions(self) -> list[tuple[str, Callable[[], Log]]]:
        """Every replica the node can serve, by name, with how to open its log: whose idempotent producers the
        background maintenance forgets once silent for producer.id.expiration.ms, followers' too (a follower
        copies every producer's state, to recognise retries once it leads)."""
        return [(replica.name, functools.partial(_replica_log, replica)) for replica in self._servable()]

    def producer_state_loaded(self, tp: TopicPartition) -> bool:
        """Whether this node holds the producer state of `tp`, a partition it hosts (False if it hosts none)."""
        replica = self._replicas.get(tp)
        try:
            return replica is not None and replica.log.producer_state_loaded
        except (FabricError, OSError):  # (its storage failed: the append, on a worker, says so)
            return False

    def producer_ids(self) -> int:
        """The idempotent producers whose state this node's replicas hold in memory (Kafka's ProducerIdCount)."""
        return sum(replica.log.producer_ids for replica in self._servable())

    def _servable(self) -> list[PartitionReplica]:
        """The replicas whose storage is not offline, in partition order."""
        with self._lock:
            return [replica for tp, replica in sorted(self._replicas.items()) if not self.health.offline(tp)]

    def describe(self) -> list[dict[str, object]]:
        """Every hosted replica's role, epoch, high watermark and (as leader) ISR and followers' progress."""
        with self._lock:
            replicas = [self._replicas[tp] for tp in sorted(self._replicas)]
        described = []
        for replica in replicas:
            condition = self.health.condition(replica.tp)
            described.append({**replica.describe(with_log=condition.health is Health.HEALTHY),
                              "health": condition.health.value, **({"reason": condition.reason} if condition.reason
                                                                   else {})})
        return described
