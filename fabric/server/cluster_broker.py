"""The coordinator service's Broker in a cluster with data nodes (docs/replication.md).

Topics created without a replication factor (and with no default.replication.factor set) stay what they were:
partitions in the instance's data directory, served by the Broker as before. A replicated topic is placed on data
nodes
by the controller; its data lives only on them, so this Broker refuses every data call on it with
NotLeaderError (retriable: a routing client refreshes its metadata and goes to the leader) instead of opening
an empty log in its own directory. Adding partitions and deleting a replicated topic change only its metadata;
a committed offset in it is checked against the partition count (the logs are on the nodes). The data nodes
compact replicated compacted topics themselves, and their leaders apply retention (docs/replication.md,
"Retention and deleting records"): `fabric topics compact`, `retain` and `delete-records` go to each
partition's leader through a routing client, so this Broker answers them with NotLeaderError like the data
calls, and its background maintenance skips replicated topics.
"""
from __future__ import annotations

import logging
from typing import Mapping

import pyarrow as pa

from fabric.common import checks
from fabric.common.errors import (
    InvalidReplicationFactorError,
    InvalidTopicError,
    NotLeaderError,
    UnknownPartitionError,
)
from fabric.common.names import INTERNAL_TOPICS, validate_new_topic
from fabric.common.redaction import clip
from fabric.common.types import TopicInfo
from fabric.coordinator import validation
from fabric.coordinator.interface import Coordinator
from fabric.server.broker import Broker
from fabric.server.controller_driver import ControllerDriver
from fabric.storage.cleaner import CleanReport
from fabric.storage.log import Log

log = logging.getLogger(__name__)


class ClusterBroker(Broker):
    """A Broker over `root` and `coordinator` whose replicated topics are the `controller`'s."""

    def __init__(self, root: str, coordinator: Coordinator, max_partitions: int | None,
                 controller: ControllerDriver, default_replication_factor: int | None = None) -> None:
        super().__init__(root, coordinator, max_partitions)
        self.controller, self.default_replication_factor = controller, default_replication_factor

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str], value_schema: pa.Schema | None,
                     replication_factor: int | None = None) -> TopicInfo:
        """A topic in this instance's directory, or (with a replication factor, or the instance's
        default.replication.factor) placed on the data nodes."""
        if replication_factor is None:
            replication_factor = self.default_replication_factor
        if replication_factor is None:
            return super().create_topic(name, partitions, config, value_schema)
        validate_new_topic(name)
        self._check_limit(name, partitions)
        checked = validation.topic(name, partitions, config, value_schema)
        if not checks.is_integer(replication_factor) or replication_factor < 1:
            raise InvalidReplicationFactorError(f"replication factor must be an int of at least 1, got "
                                                f"{clip(replication_factor)}")
        info = self.controller.create_topic(name, partitions, replication_factor, checked, value_schema)
        log.info("topic %s created with %d partition(s), replication factor %d", name, partitions,
                 replication_factor)
        return info

    def delete_topic(self, name: str) -> None:
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"topic {name!r} is internal: it holds the groups' committed offsets and cannot be "
                                    "deleted; a group's offsets go when the group is deleted (delete_group)")
        if not self.coordinator.replicated(name):
            return super().delete_topic(name)
        self.coordinator.delete_topic(name)
        log.info("replicated topic %s deleted (its nodes stop serving it)", name)

    def set_partitions(self, name: str, total: int) -> TopicInfo:
        if not self.coordinator.replicated(name):
            return super().set_partitions(name, total)
        self._check_limit(name, total)
        return self.controller.add_partitions(name, total)

    def log(self, topic: str, partition: int) -> Log:
        if self.coordinator.replicated(topic):
            self._check_partition(topic, partition)
        self._on_nodes(topic)
        return super().log(topic, partition)

    def _check_partition(self, topic: str, partition: int) -> None:
        """UnknownPartitionError for a partition a replicated topic does not have (its logs are on the nodes)."""
        count = self._partitions(topic)
        if not 0 <= partition < count:
            raise UnknownPartitionError(f"topic {topic!r} has partitions 0..{count - 1}; there is no partition "
                                        f"{partition}")

    def _on_nodes(self, topic: str) -> None:
        """NotLeaderError for a replicated topic, whose data calls go to its partitions' leader nodes."""
        if self.coordinator.replicated(topic):
            raise NotLeaderError(
                f"topic {topic!r} is replicated: its partitions are served by their leader nodes, not by the "
                "coordinator; use a fabric client (fabric.connect), which routes to the leaders (`fabric topics "
                f"describe {topic}` shows them)")

    def compact_topic(self, topic: str) -> list[CleanReport]:
        self._on_nodes(topic)
        return super().compact_topic(topic)

    def _stored_here(self, topic: str) -> bool:
        return not self.coordinator.replicated(topic)

    def _committable_logs(self, topic: str, partitions: list[int]) -> dict[int, Log | None]:
        if not self.coordinator.replicated(topic):
            return super()._committable_logs(topic, partitions)
        for partition in partitions:
            self._check_partition(topic, partition)
        return dict.fromkeys(partitions)
