"""The replicated cluster's metadata in ZooKeeper, in Kafka's layout (zk_layout, docs/zookeeper-layout.md):
data nodes' registrations in persistent /brokers/ids/<id>, each replicated topic's assignment in its
/brokers/topics/<t> znode and each partition's LeaderAndIsr in its state znode.

Every write goes through the store's ZkWriter, so the active instance's fence (the /controller_epoch check)
heads each transaction; a store without a fence checks /controller_epoch's version itself. A state quoting a
controller epoch other than the current one is refused (StaleControllerEpochError); one whose partition epoch
changed since it was read loses the race (False), and the caller re-reads and decides again.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import NoNodeError

from fabric.common.errors import InvalidConfigError, UnknownTopicError
from fabric.common.types import (
    LeaderAndIsr,
    NodeInfo,
    PartitionAssignment,
    PartitionRegistration,
    TopicInfo,
    TopicPartition,
)
from fabric.coordinator import validation
from fabric.coordinator import zk_layout as layout
from fabric.coordinator.election import EpochToken
from fabric.coordinator.interface import StateUpdates
from fabric.coordinator.zk_watched_cache import Watch, ZkWatchedCache

if TYPE_CHECKING:
    from fabric.coordinator.zk_store import ZkWriter

log = logging.getLogger(__name__)
Assignment = Mapping[int, PartitionAssignment]


class _LostRace(Exception):
    """A partition epoch changed since it was read."""


class ZkReplication:
    """The replication methods of the Coordinator interface, for ZkCoordinator."""

    client: KazooClient
    writer: ZkWriter
    _read_topic: Callable[[str], tuple[TopicInfo, Any, dict[int, PartitionAssignment]]]
    _cached_topic: Callable[[str], tuple[TopicInfo, dict[int, PartitionAssignment]]]
    _topics: ZkWatchedCache[tuple[TopicInfo, dict[int, PartitionAssignment]]]
    _state_cache: ZkWatchedCache[tuple[str, LeaderAndIsr]]  # (topic id, state) by the state's znode path
    _create: Callable[..., TopicInfo]
    _update_topic: Callable[..., TopicInfo]
    _create_partitions: Callable[[TransactionRequest, str, Mapping[int, bytes]], None]
    list_topics: Callable[[], list[str]]

    # -- the controller epoch ----------------------------------------------------------------------------------
    def controller_epoch(self) -> int:
        found = self.writer.get_many([layout.CONTROLLER_EPOCH])[0]
        return int(found[0]) if found is not None else 0

    def _fenced_epoch(self, txn: TransactionRequest, token: EpochToken | None) -> int:
        """The controller epoch `txn` is fenced by: the token's (its check heads the transaction), else the
        current /controller_epoch, whose version `txn` then checks."""
        if token is not None:
            return token.epoch
        found = self.writer.get_many([layout.CONTROLLER_EPOCH])[0]
        if found is None:
            return 0
        txn.check(layout.CONTROLLER_EPOCH, found[1].version)
        return int(found[0])

    def claim_producer_id_block(self, block: int, principal: str) -> bool:
        """/producer_id_blocks/<block> created with its owner, unless it exists (a create that lost a race to
        another instance's re-reads and finds it taken)."""
        path = layout.producer_id_block(block)

        def build(txn: TransactionRequest, token: EpochToken | None) -> bool:
            if self.writer.get_many([path])[0] is not None:
                return False
            txn.create(path, layout.producer_id_block_data(principal))
            return True
        return self.writer.write(build)

    def producer_id_block_owner(self, block: int) -> str | None:
        found = self.writer.get_many([layout.producer_id_block(block)])[0]
        return None if found is None else layout.producer_id_block_owner(found[0])

    # -- nodes ---------------------------------------------------------------------------------------------
    def register_node(self, node_id: int, address: str, rack: str | None = None, *, directory_id: str) -> NodeInfo:
        validation.node(node_id, address, rack, directory_id)
        path = layout.data_node(node_id)

        def build(txn: TransactionRequest, token: EpochToken | None) -> NodeInfo:
            found = self.writer.get_many([path])[0]
            old = None if found is None else layout.node_info(node_id, found[0])
            if found is not None and (old is None or found[1].ephemeralOwner):
                raise InvalidConfigError(f"{path} is a coordinator instance's registration; give the data node "
                                         "another id")
            new = NodeInfo(node_id, address, rack, (old.node_epoch if old else 0) + 1, directory_id=directory_id)
            if found is None:
                txn.create(path, layout.node_data(new))
            else:
                txn.set_data(path, layout.node_data(new), version=found[1].version)
            return new
        registered = self.writer.write(build)
        log.info("node %d registered at %s (rack %s, data directory %s), node epoch %d", node_id, address, rack,
                 directory_id, registered.node_epoch)
        return registered

    def registered_nodes(self) -> list[NodeInfo]:
        ids = sorted(int(name) for name in self.writer.children(layout.BROKER_IDS) if name.isdigit())
        found = self.writer.get_many([layout.data_node(i) for i in ids])
        nodes = (layout.node_info(i, f[0]) for i, f in zip(ids, found, strict=True) if f and not f[1].ephemeralOwner)
        return [n for n in nodes if n is not None]

    # -- assignments and states ----------------------------------------------------------------------------
    def _states(self, txn: TransactionRequest, token: EpochToken | None, name: str, first: int,
                partitions: Mapping[int, PartitionRegistration]) -> dict[int, bytes]:
        validation.new_partitions(name, partitions, first, self._fenced_epoch(txn, token))
        return {p: layout.state_data(reg.state) for p, reg in partitions.items()}

    def create_replicated_topic(self, name: str, config: dict[str, str], value_schema: pa.Schema | None,
                                partitions: Mapping[int, PartitionRegistration]) -> TopicInfo:
        count = len(partitions) if isinstance(partitions, Mapping) else 0
        info = validation.new_topic(name, count, config, value_schema)
        validation.registrations(name, partitions, 0)
        return self._create(info, {p: reg.assignment for p, reg in partitions.items()},
                            lambda txn, token: self._states(txn, token, name, 0, partitions))

    def add_replicated_partitions(self, name: str, partitions: Mapping[int, PartitionRegistration]) -> TopicInfo:
        def change(info: TopicInfo, assignment: Assignment) -> tuple[TopicInfo, Assignment]:
            validation.replicated_growth(name, bool(assignment))
            validation.registrations(name, partitions, info.partitions)
            added = {p: reg.assignment for p, reg in partitions.items()}
            return replace(info, partitions=info.partitions + len(added)), {**assignment,
                                                                                                   **added}

        def extra(txn: TransactionRequest, old: TopicInfo, new: TopicInfo, token: EpochToken | None) -> None:
            self._create_partitions(txn, name, self._states(txn, token, name, old.partitions, partitions))
        return self._update_topic(name, change, extra)

    def replicated(self, name: str) -> bool:
        try:
            return bool(self._cached_topic(name)[1])
        except UnknownTopicError:
            return False

    def partition_registrations(self, topics: list[str] | None = None) -> dict[TopicPartition, PartitionRegistration]:
        """The registrations as ZooKeeper last told this process (topics and partition states are watched:
        zk_watched_cache), so the controller's answer to each node's heartbeat reads none of thousands of znodes
        again. A state is kept with the id of the topic it was read under, so a topic deleted and created again
        under its name is never given its predecessor's; a decision made on a state another process changed
        meanwhile loses its compare-and-set write (update_partition_states), which forgets what it read."""
        wanted: dict[str, tuple[TopicPartition, str, PartitionAssignment]] = {}  # by state path
        for name in self.list_topics() if topics is None else topics:
            try:
                info, assignment = self._cached_topic(name)
            except UnknownTopicError:
                continue  # deleted meanwhile
            wanted.update((layout.partition_state(name, p), ((name, p), info.topic_id, a))
                          for p, a in sorted(assignment.items()))

        def read() -> dict[str, tuple[str, LeaderAndIsr]]:
            return self._state_cache.get_many(list(wanted), lambda paths, watch: self._read_states(
                {path: wanted[path][1] for path in paths}, watch))
        found = read()
        stale = [path for path, (topic_id, _) in found.items() if topic_id != wanted[path][1]]
        if stale:  # kept from a topic of the name deleted since: read again
            for path in stale:
                self._state_cache.forget(path)
            found = read()
        return {tp: PartitionRegistration(assignment, found[path][1])
                for path, (tp, topic_id, assignment) in sorted(wanted.items(), key=lambda item: item[1][0])
                if path in found and found[path][0] == topic_id}

    def _read_states(self, topic_ids: dict[str, str], watch: Watch) -> dict[str, tuple[str, LeaderAndIsr]]:
        """The partition states at `topic_ids`' paths that exist, read at once (`watch` set on each), each with the
        id of the topic it is read for (whose znode was read first: the state is that topic's or a later one's)."""
        pending = [(path, self.client.get_async(path, watch=watch)) for path in topic_ids]
        out = {}
        for path, result in pending:
            try:
                out[path] = (topic_ids[path], layout.leader_and_isr(result.get()[0]))
            except NoNodeError:
                continue  # deleted meanwhile
        return out

    def update_partition_states(self, updates: StateUpdates) -> bool:
        items = sorted(updates.items())
        for start in range(0, len(items), layout.MAX_OPS):
            chunk = items[start:start + layout.MAX_OPS]
            try:
                if not self.writer.write_once(functools.partial(self._set_states, chunk=chunk)):
                    return False
            except _LostRace:
                return False
            finally:
                for tp, _ in chunk:  # what it wrote, or (a lost race) found changed, is read again next time
                    self._topics.forget(tp[0])  # (a reassignment rewrites the topic's znode)
                    self._state_cache.forget(layout.partition_state(*tp))
        return True

    def _set_states(self, txn: TransactionRequest, token: EpochToken | None,
                    chunk: list[tuple[TopicPartition, tuple[int, Any]]]) -> None:
        epoch = self._fenced_epoch(txn, token)
        topics = {}
        for name in sorted({tp[0] for tp, _ in chunk}):
            try:
                topics[name] = self._read_topic(name)
            except UnknownTopicError:
                continue  # deleted meanwhile
        found = self.writer.get_many([layout.partition_state(*tp) for tp, _ in chunk])
        reassigned: set[str] = set()
        for (tp, (expected, new)), f in zip(chunk, found, strict=True):
            if tp[0] not in topics or tp[1] not in topics[tp[0]][2] or f is None:
                raise UnknownTopicError(f"{tp[0]}-{tp[1]} is not a replicated partition (deleted?)")
            assignment = topics[tp[0]][2]
            stored = PartitionRegistration(assignment[tp[1]], layout.leader_and_isr(f[0]))
            if stored.state.partition_epoch != expected:
                raise _LostRace()
            reg = validation.state_update(tp, stored, new, epoch)
            txn.set_data(layout.partition_state(*tp), layout.state_data(reg.state), version=f[1].version)
            if reg.assignment != stored.assignment:
                assignment[tp[1]] = reg.assignment
                reassigned.add(tp[0])
        for name in sorted(reassigned):  # the assignment lives in the topic's znode, as in Kafka
            info, stat, assignment = topics[name]
            txn.set_data(layout.topic(name), layout.topic_data(info, assignment), version=stat.version)
