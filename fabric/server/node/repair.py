"""Repairing a damaged range of a replica from another replica's copy, on a data node (fabric/storage/scrub.py
writes the bytes): what the scrubber finds (scrubber.py), and damage a read meets (a consumer's fetch, or a
follower's at the leader).

Sources, in order: the partition's in-sync replicas as this node knows them, then its other replicas; never this
node, nor a replica its node reports offline. Each is asked for its copy of exactly the damaged offsets
(`replica_range`, a node-to-node call that needs cluster_action, served below that replica's high watermark),
and the first whole, valid copy is written over the damage. A range no source could repair is tried again no
sooner than REPAIR_BACKOFF_S later, so a range every copy lacks does not cost a round of calls per read.

A damaged read (`read_repaired`) is served again once repaired. Otherwise the replica is DAMAGED (storage_health:
reported, so the controller moves its leadership to a healthy in-sync replica if one is alive) and the reader
gets KafkaStorageError (retriable: it reads from the new leader), unless every other replica answered without an
intact copy: then none exists anywhere, and the reader gets the CorruptRecordError naming the offsets to skip.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from fabric.common.errors import (
    CorruptRecordError,
    FabricError,
    InvalidFramesError,
    KafkaStorageError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
)
from fabric.common.types import TopicPartition
from fabric.server import wire
from fabric.server.connection import Call
from fabric.server.node.fetcher import Peer, call_node
from fabric.server.node.partition import PartitionReplica
from fabric.server.node.replica_fetch import NO_FRAMES
from fabric.server.node.storage_health import StorageHealth
from fabric.storage import scrub
from fabric.storage.scan import CorruptRangeError, Damage

log = logging.getLogger(__name__)
T = TypeVar("T")
RANGE_MAX_BYTES = 16 << 20  # of a copy one replica_range call answers
REPAIR_BACKOFF_S = 5.0
DAMAGED_READS = 8  # damaged ranges one read repairs before it gives up
# (node id, partition, first offset, end offset, topic id) -> that node's copy of the range (its frames)
Copy = Callable[[int, TopicPartition, int, int, str], pa.Buffer]
NO_COPY = (CorruptRecordError, InvalidFramesError, OffsetOutOfRangeError)  # a source answered without a copy


def range_call(tp: TopicPartition, start: int, end: int, topic_id: str) -> Call:
    """The replica_range action: a node's copy of offsets [start, end) of `tp`."""
    request = wire.action("replica_range", topic=tp[0], partition=tp[1], start_offset=start, end_offset=end,
                          max_bytes=RANGE_MAX_BYTES, topic_id=topic_id)

    def run(client: flight.FlightClient, options: flight.FlightCallOptions) -> pa.Buffer:
        results = list(client.do_action(request, options))
        return results[0].body if results else NO_FRAMES
    return run


def peer_copy(peer: Peer, addresses: Mapping[int, str]) -> Copy:
    """Copies asked of other nodes through `peer`, at their `addresses` (kept up to date by the caller)."""
    def copy(node_id: int, tp: TopicPartition, start: int, end: int, topic_id: str) -> pa.Buffer:
        address = addresses.get(node_id)
        if address is None:
            raise LeaderNotAvailableError(f"the address of node {node_id} is not known yet")
        buffer: pa.Buffer = call_node(peer, f"node {node_id}", address, range_call(tp, start, end, topic_id))
        return buffer
    return copy


class Repairer:
    """Repairs node `node_id`'s replicas with copies `copy` fetches (None: no other node is reachable, as in unit
    tests); `offline(tp)` are the replicas of `tp` their nodes report offline and `topic_id(topic)` the topic's
    id. Counts the ranges it repaired (`repaired`)."""

    def __init__(self, node_id: int, health: StorageHealth, copy: Copy | None,
                 offline: Callable[[TopicPartition], tuple[int, ...]], topic_id: Callable[[str], str]) -> None:
        self.node_id, self.health, self.copy = node_id, health, copy
        self.offline, self.topic_id = offline, topic_id
        self.repaired = 0
        self._failed: dict[tuple[TopicPartition, int], tuple[float, bool | None]] = {}  # -> (retry at, outcome)
        self._locks: dict[TopicPartition, threading.Lock] = {}
        self._guard = threading.Lock()

    def sources(self, replica: PartitionReplica) -> list[int]:
        """The nodes to ask for a copy: in-sync replicas first, then the others."""
        registration = replica.state.registration
        if registration is None:
            return []
        leader = replica.leader
        isr = leader.isr if leader is not None else registration.state.isr
        ordered = [*isr, *(r for r in registration.assignment.replicas if r not in isr)]
        return [r for r in ordered if r != self.node_id and r not in self.offline(replica.tp)]

    def repair(self, replica: PartitionReplica, damage: Damage) -> bool | None:
        """Repair `damage` of `replica` from another replica's copy: True once repaired (or gone), False if every
        source answered without an intact copy, None if some did not answer (or the range failed within
        REPAIR_BACKOFF_S: that outcome again)."""
        key = (replica.tp, damage.first_offset)
        with self._lock(replica.tp):
            retry_at, outcome = self._failed.get(key, (0.0, None))
            if time.monotonic() < retry_at:
                return outcome
            outcome = self._repair(replica, damage)
            if outcome:
                self._failed.pop(key, None)
                self.health.repaired(replica.tp, damage)
                return outcome
            log.log(logging.DEBUG if key in self._failed else logging.WARNING,  # once per range
                    "partition %s: no other replica %s an intact copy of %s; tried again every %.0f s",
                    replica.name, "gave" if outcome is None else "holds", damage.describe(), REPAIR_BACKOFF_S)
            self._failed[key] = (time.monotonic() + REPAIR_BACKOFF_S, outcome)
            return outcome

    def _repair(self, replica: PartitionReplica, damage: Damage) -> bool | None:
        sources = self.sources(replica)
        if self.copy is None or damage.next_offset is None:
            return None if sources and self.copy is None else False
        answered = True
        for node_id in sources:
            try:
                frames = self.copy(node_id, replica.tp, damage.first_offset, damage.next_offset,
                                   self.topic_id(replica.tp[0]))
                if not frames.size:
                    raise OffsetOutOfRangeError("it holds none of those offsets below its high watermark")
                written = scrub.repair(replica.log, damage, frames, f"node {node_id}")
            except NO_COPY as exc:
                log.debug("partition %s: node %d has no intact copy of %s (%s)", replica.name, node_id,
                          damage.describe(), exc)
                continue
            except FabricError as exc:
                log.debug("partition %s: node %d gave no copy of %s (%s)", replica.name, node_id, damage.describe(),
                          exc)
                answered = False
                continue
            self.repaired += written
            return True
        return False if answered else None

    def _lock(self, tp: TopicPartition) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(tp, threading.Lock())

    def read_repaired(self, replica: PartitionReplica, read: Callable[[], T]) -> T:
        """read(), served again once the damage it meets is repaired (see the module doc)."""
        for _ in range(DAMAGED_READS):
            try:
                return read()
            except CorruptRangeError as exc:
                damage, error = exc.damage, exc
            self.health.found(replica.tp, damage)
            outcome = self.repair(replica, damage)
            if outcome:
                continue
            self.health.damaged(replica.tp, damage)
            if outcome is False:
                raise error
            raise KafkaStorageError(f"node {self.node_id} cannot read partition {replica.name}: its copy of "
                                    f"{damage.describe()} is damaged and no other replica has given an intact copy "
                                    "yet; the controller moves the leadership to a healthy in-sync replica: refresh "
                                    "the metadata and retry")
        return read()
