"""The embedded fabric: a Broker in the client's own process, over a local directory; no server.

Every process that opens the directory (Spark executors, notebooks, the CLI) shares it safely. A process that
writes (appends or publishes) also runs the background log maintenance (fabric.storage.log_maintenance) on every
partition of the directory from its first write until it closes the fabric: retention and compaction then need
no further writes. Processes that only read, like the CLI's, run none. Where several writers' maintenance meets
on one partition, the partition lock and the cleaner's lock keep their passes apart.
"""
from __future__ import annotations

import os
import sqlite3
from typing import Callable, Mapping

import pyarrow as pa

from fabric.client.cluster import Cluster
from fabric.common.errors import InvalidConfigError
from fabric.common.types import TopicPartition
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.offsets_log import OffsetsPart
from fabric.server.broker import Broker
from fabric.server.instance import milliseconds
from fabric.server.publish import Staged
from fabric.storage.log_maintenance import DEFAULT_INTERVAL_MS, INTERVAL_KEY

INTERVAL_ENV = "FABRIC_LOG_RETENTION_CHECK_INTERVAL_MS"


def maintenance_interval(value: int | str | None = None) -> int:
    """How often a writing process maintains the logs (log.retention.check.interval.ms): `value` if given, else
    $FABRIC_LOG_RETENTION_CHECK_INTERVAL_MS, else Kafka's default, 300000."""
    if value is None:
        value = os.environ.get(INTERVAL_ENV) or DEFAULT_INTERVAL_MS
        return milliseconds(f"{INTERVAL_KEY} (${INTERVAL_ENV})", value)
    return milliseconds(INTERVAL_KEY, value)


class EmbeddedCluster(Broker, Cluster):
    """A fabric living in directory `root` (file:///root); metadata in root's own SQLite database unless a
    `coordinator` is given; at most `max_partitions` partitions per topic (default: $FABRIC_MAX_PARTITIONS,
    else 10,000); logs maintained every `retention_check_interval_ms` once it writes (maintenance_interval())."""

    appends_in_process = True

    def __init__(self, root: str, coordinator: Coordinator | None = None, max_partitions: int | None = None,
                 retention_check_interval_ms: int | None = None) -> None:
        self.retention_check_interval_ms = maintenance_interval(retention_check_interval_ms)
        try:
            super().__init__(root, coordinator, max_partitions)
        except (OSError, sqlite3.Error) as exc:  # a path that is no directory (a full disk is a StorageError)
            raise InvalidConfigError(
                f"cannot open an embedded fabric in {root!r} ({exc}); give a directory this process can create "
                "and write (file:///dir or a path)") from None
        self.url = f"file://{self.root}"

    def append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none", acks: str = "all",
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> int:
        self.start_maintenance(self.retention_check_interval_ms)
        return super().append(topic, partition, rows, codec, acks, producer_id, producer_epoch, base_sequence)

    def _publish(self, txn: str, staged: Mapping[TopicPartition, Staged], validate: Callable[[], None] = lambda: None,
                 offsets: OffsetsPart | None = None) -> dict[TopicPartition, int] | None:
        self.start_maintenance(self.retention_check_interval_ms)
        return super()._publish(txn, staged, validate, offsets)
