"""The embedded fabric: a Broker in the client's own process, over a local directory; no server.

Every process that opens the directory (Spark executors, notebooks, the CLI) shares it safely. A process that
writes (appends or publishes) also runs the background log maintenance (fabric.storage.log_maintenance) on every
partition of the directory from its first write until it closes the fabric: retention and compaction then need
no further writes. Processes that only read, like the CLI's, run none. Where several writers' maintenance meets
on one partition, the partition lock and the cleaner's lock keep their passes apart. Beside it, such a process
forgets the directory's abandoned groups as a coordinator does (offsets.retention.minutes,
fabric.server.offsets_retention), so groups that come and go do not pile up in a fabric no server looks after.
"""
from __future__ import annotations

import os
import sqlite3
from typing import Callable, Mapping

from fabric.client.cluster import Cluster
from fabric.common.errors import InvalidConfigError, StorageError
from fabric.common.types import TopicPartition
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.offsets_log import OffsetsPart
from fabric.coordinator.offsets_records import OFFSETS_TOPIC
from fabric.coordinator.offsets_topic import TopicOffsets
from fabric.server import offsets_retention
from fabric.server.broker import METADATA_DB, Broker
from fabric.server.instance import milliseconds, whole_number
from fabric.server.offsets_retention import (
    CHECK_INTERVAL_KEY,
    CHECK_INTERVAL_MS,
    OFFSETS_RETENTION_MINUTES,
    RETENTION_KEY,
)
from fabric.server.periodic import Periodic
from fabric.server.publish import Staged
from fabric.storage.batch_encoding import Rows
from fabric.storage.log_maintenance import DEFAULT_INTERVAL_MS, INTERVAL_KEY, LogMaintenance
from fabric.storage.log_manager import INTERNAL_DIR
from fabric.storage.producer_state import DEFAULT_EXPIRATION_MS

INTERVAL_ENV = "FABRIC_LOG_RETENTION_CHECK_INTERVAL_MS"
RETENTION_ENV = "FABRIC_OFFSETS_RETENTION_MINUTES"
CHECK_INTERVAL_ENV = "FABRIC_OFFSETS_RETENTION_CHECK_INTERVAL_MS"
# how long a commit waits for its offsets partition's lock (or the metadata's) that another process holds, as
# Kafka's commitSync waits default.api.timeout.ms: a process paused holding it fails the commit, retriable, then
COMMIT_WAIT_S = 60.0


def maintenance_interval(value: int | str | None = None) -> int:
    """How often a writing process maintains the logs (log.retention.check.interval.ms): `value` if given, else
    $FABRIC_LOG_RETENTION_CHECK_INTERVAL_MS, else Kafka's default, 300000."""
    if value is None:
        value = os.environ.get(INTERVAL_ENV) or DEFAULT_INTERVAL_MS
        return milliseconds(f"{INTERVAL_KEY} (${INTERVAL_ENV})", value)
    return milliseconds(INTERVAL_KEY, value)


def offsets_retention_settings() -> tuple[int, int]:
    """How a writing process forgets abandoned groups: (offsets.retention.minutes, offsets.retention.check.interval.ms)
    from $FABRIC_OFFSETS_RETENTION_MINUTES and $FABRIC_OFFSETS_RETENTION_CHECK_INTERVAL_MS, else Kafka's defaults
    (7 days, looked at every 10 minutes)."""
    minutes = whole_number(f"{RETENTION_KEY} (${RETENTION_ENV})",
                           os.environ.get(RETENTION_ENV) or OFFSETS_RETENTION_MINUTES, "minutes")
    interval = milliseconds(f"{CHECK_INTERVAL_KEY} (${CHECK_INTERVAL_ENV})",
                            os.environ.get(CHECK_INTERVAL_ENV) or CHECK_INTERVAL_MS)
    return minutes, interval


class EmbeddedCluster(Broker, Cluster):
    """A fabric living in directory `root` (file:///root); metadata in root's own SQLite database unless a
    `coordinator` is given; at most `max_partitions` partitions per topic (default: $FABRIC_MAX_PARTITIONS,
    else 10,000); logs maintained every `retention_check_interval_ms` once it writes (maintenance_interval())."""

    appends_in_process = True

    def __init__(self, root: str, coordinator: Coordinator | None = None, max_partitions: int | None = None,
                 retention_check_interval_ms: int | None = None) -> None:
        self.retention_check_interval_ms = maintenance_interval(retention_check_interval_ms)
        self.offsets_retention = offsets_retention_settings()
        self._forgetting: Periodic | None = None  # the offsets retention's pass, from the first write
        try:
            super().__init__(root, coordinator, max_partitions)
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", "") not in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
                raise self._unusable(root, exc) from None
            database = os.path.join(os.path.abspath(root), INTERNAL_DIR, METADATA_DB)
            raise StorageError(
                f"the metadata database {database} is damaged ({exc}); move it aside, then `fabric topics recover` "
                "registers the topics again from their data (the groups' committed offsets are kept apart, in "
                f"{OFFSETS_TOPIC})") from None
        except (OSError, sqlite3.Error) as exc:  # a path that is no directory (a full disk is a StorageError)
            raise self._unusable(root, exc) from None
        self.url = f"file://{self.root}"

    @staticmethod
    def _unusable(root: str, exc: Exception) -> InvalidConfigError:
        """The refusal of `root`, which this process cannot make a fabric of (`exc` says why)."""
        return InvalidConfigError(f"cannot open an embedded fabric in {root!r} ({exc}); give a directory this "
                                  "process can create and write (file:///dir or a path)")

    def start_maintenance(self, interval_ms: int, active: Callable[[], bool] | None = None,
                          producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS) -> LogMaintenance:
        """The log maintenance, and beside it the pass that forgets abandoned groups (once)."""
        if self.maintenance is not None:  # (every write asks)
            return self.maintenance
        started = super().start_maintenance(interval_ms, active, producer_id_expiration_ms)
        with self._maintenance_guard:
            if self._forgetting is None and isinstance(self.coordinator, TopicOffsets):
                self._forgetting = offsets_retention.start(self.coordinator, *self.offsets_retention, lambda: True)
        return started

    def stop_maintenance(self, timeout_s: float = 30.0) -> None:
        with self._maintenance_guard:
            forgetting, self._forgetting = self._forgetting, None
        if forgetting is not None:
            forgetting.stop(timeout_s)
        super().stop_maintenance(timeout_s)

    def append(self, topic: str, partition: int, rows: Rows, codec: str = "none", acks: str = "all",
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> int:
        self.start_maintenance(self.retention_check_interval_ms)
        return super().append(topic, partition, rows, codec, acks, producer_id, producer_epoch, base_sequence)

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        with self.lock_waits_within(COMMIT_WAIT_S):
            super().commit_offsets(group, offsets, metadata, generation, member_id)

    def _publish(self, txn: str, staged: Mapping[TopicPartition, Staged], validate: Callable[[], None] = lambda: None,
                 offsets: OffsetsPart | None = None) -> dict[TopicPartition, int] | None:
        self.start_maintenance(self.retention_check_interval_ms)
        return super()._publish(txn, staged, validate, offsets)
