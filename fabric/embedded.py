"""The embedded fabric: logs and a SQLite coordinator in one local directory, no server.

Layout: <root>/<topic>/<partition>/ holds a partition's segments; <root>/__fabric/ holds the metadata
database and the sink's staging area.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Sequence

import pyarrow as pa

from coordinator.interface import Coordinator, TopicInfo, TopicPartition
from coordinator.sqlite_store import SqliteCoordinator
from fabric.cluster import Cluster, Fetched, PartitionState
from fabric.config import TopicConfig
from fabric.errors import InvalidPartitionsError, UnknownPartitionError
from fabric.names import validate_topic
from fabric.records import storage_schema
from fabric.storage import frame
from fabric.storage.frame import FrameHeader
from fabric.storage.log import Log

INTERNAL_DIR = "__fabric"
DEBUG_PAUSE_ENV = "FABRIC_DEBUG_PUBLISH_PAUSE_S"
ADOPT_BYTES = 4 << 20  # staged files at least this large become segments instead of being copied
Frame = tuple[FrameHeader, pa.Buffer]


class EmbeddedCluster(Cluster):
    """A fabric living in directory `root`, shared safely by every process that opens it; metadata in
    `coordinator` if given (the coordinator service's store), else in root's own SQLite database."""

    def __init__(self, root: str, coordinator: Coordinator | None = None) -> None:
        self.root = os.path.abspath(root)
        self.url = f"file://{self.root}"
        os.makedirs(os.path.join(self.root, INTERNAL_DIR), exist_ok=True)
        self.coordinator = coordinator or SqliteCoordinator(os.path.join(self.root, INTERNAL_DIR, "metadata.db"))
        self._logs: dict[TopicPartition, tuple[TopicInfo, Log]] = {}
        self._guard = threading.Lock()

    # -- paths and logs ----------------------------------------------------------------------------
    def topic_dir(self, topic: str) -> str:
        """The topic's directory; the validated name cannot leave the root."""
        path = os.path.join(self.root, validate_topic(topic))
        assert os.path.dirname(path) == self.root
        return path

    def log(self, topic: str, partition: int) -> Log:
        """The Log of one partition (cached; reloaded if the topic's metadata changed)."""
        info = self.coordinator.topic(topic)
        if not isinstance(partition, int) or not 0 <= partition < info.partitions:
            raise UnknownPartitionError(
                f"topic {topic!r} has partitions 0..{info.partitions - 1}; there is no partition {partition!r}")
        with self._guard:
            cached = self._logs.get((topic, partition))
            if cached is not None and cached[0] == info:
                return cached[1]
            log = Log(os.path.join(self.topic_dir(topic), str(partition)), storage_schema(info.value_schema),
                      TopicConfig(info.config), self.coordinator.transaction_committed)
            self._logs[(topic, partition)] = (info, log)
            return log

    # -- admin -------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, config: Mapping[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        directory = self.topic_dir(name)
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidPartitionsError(f"a topic needs at least 1 partition, got {partitions!r}")
        info = self.coordinator.create_topic(name, partitions, dict(config), value_schema)
        if os.path.exists(directory):  # left over from a crashed delete: never serve stale data
            shutil.rmtree(directory)
        for p in range(partitions):
            self.log(name, p).sync_tail_locked()
        return info

    def delete_topic(self, name: str) -> None:
        directory = self.topic_dir(name)
        self.coordinator.delete_topic(name)
        with self._guard:
            for key in [k for k in self._logs if k[0] == name]:
                del self._logs[key]
        shutil.rmtree(directory, ignore_errors=True)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        info = self.coordinator.topic(name)
        if not isinstance(total, int) or total <= info.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.partitions} partitions; the new total must be larger, got {total!r}")
        info = self.coordinator.set_partitions(name, total)
        for p in range(total):
            self.log(name, p).sync_tail_locked()
        return info

    # -- data --------------------------------------------------------------------------------------
    def append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none") -> int:
        log = self.log(topic, partition)
        return log.append(rows, codec, log.timestamp_type)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None) -> list[Fetched]:
        return [Fetched(o, b, t) for o, b, t in self.log(topic, partition).read(offset, max_bytes, end_offset)]

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        log = self.log(topic, partition)
        segs = log.segments()
        return PartitionState(topic, partition, log.start_offset, log.end_offset, len(segs),
                              sum(s.size for s in segs))

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        return self.log(topic, partition).offset_for_time(timestamp_us)

    def enforce_retention(self, topic: str) -> int:
        info = self.coordinator.topic(topic)
        return sum(self.log(topic, p).enforce_retention() for p in range(info.partitions))

    def publish(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                codec: str = "none") -> bool:
        if self.coordinator.transaction_committed(txn):
            return False
        frames = {}
        for key, batches in parts.items():
            ts_type = self.log(*key).timestamp_type
            encoded = [Log.encode(b, codec, ts_type) for b in batches if b.num_rows]
            frames[key] = [(None, [(frame.seal(template, payload), payload) for template, payload in encoded])]
        return self._publish(txn, frames)

    def publish_frames(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.Buffer]]) -> bool:
        return self._publish(txn, {key: [(None, frame.split_frames(buf)) for buf in buffers]
                                   for key, buffers in parts.items()})

    def publish_files(self, txn: str, parts: Mapping[TopicPartition, Sequence[str]],
                      adopt_bytes: int = ADOPT_BYTES) -> bool:
        """publish_frames() for staged segment files: files of at least `adopt_bytes` become segments of
        their partition as they are (renamed, not copied); smaller ones are copied, so small micro-batches
        do not make tiny segments."""
        if self.coordinator.transaction_committed(txn):
            return False
        staged = {}
        for key, paths in parts.items():
            staged[key] = []
            for path in paths:
                with pa.memory_map(path, "r") as mapped:
                    frames = frame.split_frames(mapped.read_buffer())
                staged[key].append((path if os.path.getsize(path) >= adopt_bytes else None, frames))
        return self._publish(txn, staged)

    def _publish(self, txn: str, staged: Mapping[TopicPartition, list[tuple[str | None, list[Frame]]]]) -> bool:
        """Lock the partitions in sorted order, write the sealed frames past each high watermark under a
        pending-publish marker (the partitions in parallel threads: copies and CRCs release the GIL),
        commit `txn` in the coordinator, then advance the watermarks. Each item of `staged` is
        (a staged file to adopt as a segment, or None to copy, its frames)."""
        if self.coordinator.transaction_committed(txn):
            return False
        keys = sorted(staged)
        self._recover_dead_attempts(txn, keys)
        logs = {key: self.log(*key) for key in keys}
        with contextlib.ExitStack() as stack:
            for key in keys:
                stack.enter_context(logs[key].lock)
            if self.coordinator.transaction_committed(txn):
                return False
            ends, bases = {}, {}
            for key in keys:
                logs[key].sync_tail()  # here, not in the threads: recovery may take the lock again
                bases[key] = logs[key].end_offset
                ends[key] = bases[key] + sum(h.record_count for _, frames in staged[key] for h, _ in frames)
                logs[key].begin_publish(txn, ends[key])
            try:
                with ThreadPoolExecutor(max(1, min(len(keys), os.cpu_count() or 1))) as pool:
                    for done in [pool.submit(_write_staged, logs[k], bases[k], staged[k]) for k in keys]:
                        done.result()
            except BaseException:
                for log in logs.values():
                    log.forget_tail()  # the next writer truncates what this publish wrote
                raise
            _debug_pause()
            self.coordinator.commit_transaction(txn)
            _debug_pause()
            for key in keys:
                logs[key].finish_publish(ends[key])
        return True

    def _recover_dead_attempts(self, txn: str, keys: list[TopicPartition]) -> None:
        """Recover the other partitions of these topics whose pending-publish marker names `txn`, while it is
        uncommitted. An earlier attempt of this publish died there; a replay of a Spark batch places null-key
        records on sticky partitions chosen anew, so it may not write those partitions. Recovered now, the dead
        frames are truncated; after the commit they would be rolled forward as if this attempt wrote them.
        Done before taking this publish's locks, which are taken in sorted order and never beside others."""
        for topic in sorted({t for t, _ in keys}):
            for p in range(self.coordinator.topic(topic).partitions):
                log = self.log(topic, p)
                if (topic, p) not in keys and (log.pending() or {}).get("txn") == txn:
                    log.sync_tail_locked()


def _write_staged(log: Log, base: int, items: list[tuple[str | None, list[Frame]]]) -> None:
    """Write one partition's part of a publish at `base`: adopt the large staged files, copy the rest."""
    for path, frames in items:
        count = sum(h.record_count for h, _ in frames)
        if not count or (path is not None and log.adopt_segment(path, frames, base)):
            base += count
            continue
        for header, payload in frames:
            if header.record_count:
                log.write_frame(header.rebased(base), payload)
                base += header.record_count


def _debug_pause() -> None:
    """Sleep $FABRIC_DEBUG_PUBLISH_PAUSE_S seconds inside publish (crash tests widen the kill window)."""
    pause = float(os.environ.get(DEBUG_PAUSE_ENV) or 0)
    if pause > 0:
        time.sleep(pause)
