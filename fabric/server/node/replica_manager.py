"""The partitions one data node hosts (Kafka's ReplicaManager): a PartitionReplica (its role and leader epoch)
and a Log in the node's own data directory for each, as the controller's assignments say.

The data directory belongs to one node id (`__fabric/node.id`), so a restart with the same id and directory
finds its logs and rejoins, and a directory of another node is refused. Serving a partition means leading it
under the epoch the request quotes; a request for a partition the node does not know, or quoting a newer
epoch than it knows, first refreshes the assignment from the controller (`refresh`, set by the node), so a
node learns a decision as soon as a client has. A topic that disappears from the assignments was deleted: its
logs here are deleted too.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable

import pyarrow as pa

from fabric.common.errors import InvalidConfigError, NotLeaderError
from fabric.common.types import Fetched, NodeAssignment, PartitionState, TopicInfo, TopicPartition
from fabric.coordinator.disk import disk_errors
from fabric.server import partition_ops
from fabric.server.node.partition import PartitionReplica, Role
from fabric.storage.log import Log
from fabric.storage.log_manager import LogManager

log = logging.getLogger(__name__)
NODE_ID_FILE = "node.id"


class ReplicaManager:
    """The replicas of node `node_id` with their logs under `data_dir`."""

    def __init__(self, node_id: int, data_dir: str) -> None:
        self.node_id = node_id
        with disk_errors(data_dir, "open the node's data directory"):
            self.logs = LogManager(data_dir, lambda txn: False)  # a node never publishes transactions
            self._claim_directory()
        self.refresh: Callable[[], None] = lambda: None
        self.controller_epoch = 0
        self._replicas: dict[TopicPartition, PartitionReplica] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._lock = threading.Lock()

    def _claim_directory(self) -> None:
        path = os.path.join(self.logs.internal_dir, NODE_ID_FILE)
        if os.path.exists(path):
            with open(path) as handle:
                owner = handle.read().strip()
            if owner != str(self.node_id):
                raise InvalidConfigError(f"data directory {self.logs.root} belongs to node {owner}, not node "
                                         f"{self.node_id}; start it with --id {owner}, or give this node its own "
                                         "--data")
            return
        with open(path + ".tmp", "w") as handle:
            handle.write(f"{self.node_id}\n")
        os.replace(path + ".tmp", path)

    # -- the controller's assignments ----------------------------------------------------------------------
    def apply(self, assignment: NodeAssignment) -> None:
        """Take the controller's view of this node's partitions: roles move on (never back in epoch), new leaders
        open their logs, partitions of deleted topics are dropped with their data. The view of a controller older
        than one already heard from (deposed since) is ignored."""
        with self._lock:
            if assignment.controller_epoch < self.controller_epoch:
                log.info("node %d: ignoring the view of controller epoch %d (epoch %d is newer)", self.node_id,
                         assignment.controller_epoch, self.controller_epoch)
                return
            hosted = {tp[0] for tp in self._replicas}
            self.controller_epoch = assignment.controller_epoch
            self._topics = dict(assignment.topics)
            for tp, registration in sorted(assignment.partitions.items()):
                replica = self._replicas.setdefault(tp, PartitionReplica(tp, self.node_id))
                if replica.become(registration) and replica.state.role is Role.LEADER:
                    with disk_errors(self.logs.topic_dir(tp[0]), f"open partition {tp[0]}-{tp[1]}"):
                        self._log(tp).sync_tail_locked()
            for tp in sorted(set(self._replicas) - set(assignment.partitions)):
                self._replicas.pop(tp).fence("no longer assigned to this node")
            for topic in sorted(hosted - set(assignment.topics)):
                log.warning("topic %s was deleted: deleting its logs on node %d", topic, self.node_id)
                with disk_errors(self.logs.topic_dir(topic), f"delete the logs of topic {topic!r}"):
                    self.logs.delete_topic(topic)

    def fence_all(self, why: str) -> None:
        """Stop serving every partition (the node's registration lapsed): only the controller's next decisions,
        after the node registers again, bring them back."""
        with self._lock:
            for replica in self._replicas.values():
                replica.fence(why)

    def leaders(self) -> list[TopicPartition]:
        return sorted(tp for tp, r in self._replicas.items() if r.state.role is Role.LEADER)

    # -- serving ---------------------------------------------------------------------------------------------
    def _log(self, tp: TopicPartition) -> Log:
        return self.logs.log(self._topics[tp[0]], tp[1])

    def topic(self, name: str) -> TopicInfo:
        """The metadata of a topic this node hosts; NotLeaderError if it hosts none of it."""
        info = self._topics.get(name)
        if info is None:
            self.refresh()
            info = self._topics.get(name)
        if info is None:
            raise NotLeaderError(f"node {self.node_id} hosts no partition of topic {name!r}; refresh the metadata")
        return info

    def leader_log(self, topic: str, partition: int, leader_epoch: int | None) -> tuple[Log, PartitionReplica]:
        """The log of a partition this node leads under `leader_epoch` (None: whichever it leads under)."""
        tp = (topic, partition)
        replica = self._replicas.get(tp)
        if replica is None or (leader_epoch is not None and leader_epoch > replica.state.leader_epoch):
            self.refresh()  # a decision the client knows of and this node not yet
            replica = self._replicas.get(tp)
        if replica is None:
            raise NotLeaderError(f"node {self.node_id} hosts no replica of {topic}-{partition}; refresh the "
                                 "metadata")
        replica.check_leader(leader_epoch)
        with disk_errors(self.logs.topic_dir(topic), f"open partition {topic}-{partition}"):
            return self._log(tp), replica

    def append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none",
               leader_epoch: int | None = None) -> int:
        log_, replica = self.leader_log(topic, partition, leader_epoch)
        return partition_ops.append(log_, topic, partition, rows, codec, replica.state.leader_epoch)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int, end_offset: int | None = None,
              leader_epoch: int | None = None) -> list[Fetched]:
        return self.leader_log(topic, partition, leader_epoch)[0].fetch(offset, max_bytes, end_offset)

    def partition_state(self, topic: str, partition: int, leader_epoch: int | None = None) -> PartitionState:
        log_, replica = self.leader_log(topic, partition, leader_epoch)
        reg = replica.state.registration
        assert reg is not None  # a leader's state comes from a registration
        return partition_ops.state(log_, topic, partition, leader=reg.state.leader, replicas=reg.assignment.replicas,
                                   isr=reg.state.isr, leader_epoch=reg.state.leader_epoch)

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int,
                        leader_epoch: int | None = None) -> int | None:
        return partition_ops.offset_for_time(self.leader_log(topic, partition, leader_epoch)[0], timestamp_us)
