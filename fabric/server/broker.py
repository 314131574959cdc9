"""The Broker: one fabric's data and metadata, in-process: the partition logs of a data directory
(fabric.storage) and a metadata store (fabric.coordinator).

The coordinator service serves a Broker over Arrow Flight; an embedded fabric (fabric.client.embedded) is a
Broker used in the client's own process. Many processes may open Brokers on one directory at once: appends
are serialized per partition by the partition lock, metadata changes by the store.
"""
from __future__ import annotations

import logging
import os
from typing import Mapping, Sequence

import pyarrow as pa

from fabric.common.errors import InvalidPartitionsError
from fabric.common.types import Fetched, PartitionState, TopicInfo, TopicPartition
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.server import publish
from fabric.server.publish import Staged
from fabric.storage import frame
from fabric.storage.log import Log
from fabric.storage.log_manager import LogManager

log = logging.getLogger(__name__)
ADOPT_BYTES = 4 << 20  # staged files at least this large become segments instead of being copied
METADATA_DB = "metadata.db"


class Broker:
    """The fabric in directory `root`; metadata in `coordinator` if given (the coordinator service's store),
    else in root's own SQLite database."""

    def __init__(self, root: str, coordinator: Coordinator | None = None) -> None:
        self.logs = LogManager(root, self._transaction_committed)
        self.root = self.logs.root
        self.coordinator = coordinator or SqliteCoordinator(os.path.join(self.logs.internal_dir, METADATA_DB))

    def _transaction_committed(self, txn: str) -> bool:
        return self.coordinator.transaction_committed(txn)

    def log(self, topic: str, partition: int) -> Log:
        """The Log of one partition (UnknownTopicError / UnknownPartitionError if there is none)."""
        return self.logs.log(self.coordinator.topic(topic), partition)

    def _partitions(self, topic: str) -> int:
        return self.coordinator.topic(topic).partitions

    # -- admin -------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, config: Mapping[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        directory = self.logs.topic_dir(name)
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidPartitionsError(f"a topic needs at least 1 partition, got {partitions!r}")
        info = self.coordinator.create_topic(name, partitions, dict(config), value_schema)
        if os.path.exists(directory):  # left over from a crashed delete: never serve stale data
            log.warning("topic %s: removing the directory a crashed delete left behind", name)
            self.logs.delete_topic(name)
        self.logs.create_partitions(info)
        log.info("topic %s created with %d partition(s)", name, partitions)
        return info

    def delete_topic(self, name: str) -> None:
        self.logs.topic_dir(name)
        self.coordinator.delete_topic(name)
        self.logs.delete_topic(name)
        log.info("topic %s deleted", name)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        info = self.coordinator.topic(name)
        if not isinstance(total, int) or total <= info.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.partitions} partitions; the new total must be larger, got {total!r}")
        info = self.coordinator.set_partitions(name, total)
        self.logs.create_partitions(info)
        return info

    # -- data --------------------------------------------------------------------------------------
    def append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none") -> int:
        log = self.log(topic, partition)
        return log.append(rows, codec, log.timestamp_type)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None) -> list[Fetched]:
        """Committed batches from `offset`; the batches before damaged records come back, and CorruptRecordError
        is raised only when the first batch asked for is damaged (naming the offsets to seek past)."""
        return self.log(topic, partition).fetch(offset, max_bytes, end_offset)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        log = self.log(topic, partition)
        segs = log.segments()
        return PartitionState(topic, partition, log.start_offset, log.end_offset, len(segs),
                              sum(s.size for s in segs))

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        return self.log(topic, partition).offset_for_time(timestamp_us)

    def enforce_retention(self, topic: str) -> int:
        return sum(self.log(topic, p).enforce_retention() for p in range(self._partitions(topic)))

    # -- transactions --------------------------------------------------------------------------------
    def publish(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                codec: str = "none") -> bool:
        """Append stored rows to several partitions atomically under `txn`, at most once."""
        if self.coordinator.transaction_committed(txn):
            return False
        staged: dict[TopicPartition, Staged] = {}
        for key, batches in parts.items():
            partition_log = self.log(*key)
            encoded = [Log.encode(b, codec, partition_log.timestamp_type, partition_log.clock)
                       for b in batches if b.num_rows]
            staged[key] = [(None, [(frame.seal(template, payload), payload) for template, payload in encoded])]
        return self._publish(txn, staged)

    def publish_frames(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.Buffer]]) -> bool:
        """publish() for buffers of sealed frames laid end to end, appended as they are."""
        return self._publish(txn, {key: [(None, frame.split_frames(buf)) for buf in buffers]
                                   for key, buffers in parts.items()})

    def publish_files(self, txn: str, parts: Mapping[TopicPartition, Sequence[str]],
                      adopt_bytes: int = ADOPT_BYTES) -> bool:
        """publish_frames() for staged segment files: files of at least `adopt_bytes` become segments of
        their partition as they are (renamed, not copied); smaller ones are copied, so small micro-batches
        do not make tiny segments."""
        if self.coordinator.transaction_committed(txn):
            return False
        staged: dict[TopicPartition, Staged] = {}
        for key, paths in parts.items():
            staged[key] = []
            for path in paths:
                with pa.memory_map(path, "r") as mapped:
                    frames = frame.split_frames(mapped.read_buffer())
                staged[key].append((path if os.path.getsize(path) >= adopt_bytes else None, frames))
        return self._publish(txn, staged)

    def _publish(self, txn: str, staged: Mapping[TopicPartition, Staged]) -> bool:
        return publish.publish(self.coordinator, self.log, self._partitions, txn, staged)

    def staging_dir(self, sink_id: str, batch: str | None = None) -> str:
        """<root>/__fabric/staging/<sink id>[/<batch>]: where the Spark sink stages a batch's frames."""
        path = os.path.join(self.logs.internal_dir, "staging", sink_id)
        return path if batch is None else os.path.join(path, batch)

    def close(self) -> None:
        """Release the metadata store's connections."""
        self.coordinator.close()
