"""Group offsets as keyed records in a compacted internal topic, `__consumer_offsets` (Kafka 0.8.2's native
offset storage), with the latest of each in memory.

A commit appends one batch: a record per (group, topic, partition), whose key is that triple (JSON) and whose
value is the next offset to read, the commit's metadata and its time. Deleting a group appends a tombstone
(a null value) per key. The topic has OFFSETS_PARTITIONS partitions, a group's offsets all in partition
crc32(group) mod that count, so one group's commit is one append. It is compacted (cleanup.policy=compact),
so its size follows the number of keys, not the number of commits: a pass runs in the background each time a
partition rolls a segment.

The cache: each partition's latest offsets by group, read from the log on first use and brought up to date
from where it stopped before every answer (other processes of an embedded fabric append to the same logs: a
read of the high watermark tells whether there is anything new). A commit takes the partition's lock (a
flock), checks the member's generation (`validate`) and appends under it, so a commit checked against a
generation is never written after a newer commit of the same partition.

Fencing: a store whose instance holds an election epoch (the ZooKeeper-backed coordinator) stamps it on its
appends, and takes it on each partition when it becomes active: a deposed instance's late commit is refused.

Migration: the first time the topic is opened over a store that kept offsets itself (SQLite's `offsets` table,
ZooKeeper's znodes), those are appended first, under a lock file, and a marker file records that it is done.
The old copies are left where they were, unread.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.config import TopicConfig
from fabric.common.errors import CoordinatorUnavailableError, InvalidLeaderEpochError
from fabric.common.records import TIMESTAMP, storage_schema
from fabric.common.types import CommittedOffset, TopicPartition
from fabric.coordinator import validation
from fabric.coordinator.group_store import GroupService
from fabric.storage.log import Log

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 16  # Kafka's offsets.topic.num.partitions is 50; fixed once the topic exists
MIGRATED = ".migrated"
VALUE = pa.schema([("next_offset", pa.int64()), ("metadata", pa.string()), ("commit_ms", pa.int64())])
SCHEMA = storage_schema(VALUE)
# Kafka's offsets topic: compacted, 100 MiB segments (offsets.topic.segment.bytes); smaller here, so a pass runs
# sooner on a small fabric
SEGMENT_BYTES = 16 << 20
CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.5", "retention.ms": "-1"}
LegacyOffsets = Callable[[], Iterable[tuple[str, TopicPartition, CommittedOffset]]]


def offsets_partition(group: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The partition of the offsets topic that holds `group`'s offsets."""
    return zlib.crc32(group.encode()) % partitions


def _key(group: str, tp: TopicPartition) -> bytes:
    return json.dumps(["offset", group, tp[0], tp[1]], separators=(",", ":")).encode()


@dataclass
class _Cache:
    """What one partition's records say so far: every group's latest offsets, read up to `position`."""

    position: int = 0
    groups: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, batch: pa.RecordBatch) -> None:
        for key, value in zip(batch.column(1).to_pylist(), batch.column(3).to_pylist(), strict=True):
            parts = json.loads(key)
            if parts[0] != "offset":  # an instance's leadership record
                continue
            _, group, topic, partition = parts
            if value is None:
                offsets = self.groups.get(group, {})
                offsets.pop((topic, partition), None)
                if not offsets:
                    self.groups.pop(group, None)
            else:
                self.groups.setdefault(group, {})[(topic, partition)] = CommittedOffset(
                    value["next_offset"], value["metadata"], value["commit_ms"])


class OffsetsTopic:
    """The offsets topic in `directory` (its partitions are subdirectories). `epoch` gives the election epoch
    to stamp on appends (None: none, an embedded or single-instance store); `legacy` the offsets to migrate."""

    def __init__(self, directory: str, epoch: Callable[[], int] | None = None, legacy: LegacyOffsets | None = None,
                 clock: Clock = SYSTEM_CLOCK, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = directory
        self.clock = clock
        self._epoch = epoch
        os.makedirs(directory, exist_ok=True)
        self.partitions = self._partition_count()
        config = TopicConfig({**CONFIG, "segment.bytes": str(segment_bytes)})
        self._logs = [Log(os.path.join(directory, str(p)), SCHEMA, config, clock=clock)
                      for p in range(self.partitions)]
        self._caches = [_Cache() for _ in range(self.partitions)]
        self._cleaning: set[int] = set()
        self._guard = threading.Lock()
        if legacy is not None:
            self._migrate(legacy)

    def _partition_count(self) -> int:
        """The count the topic was created with (the group -> partition map depends on it), else the default."""
        found = [int(n) for n in os.listdir(self.directory) if n.isdigit()]
        return max(found) + 1 if found else OFFSETS_PARTITIONS

    # -- reads -------------------------------------------------------------------------------------------
    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        """`group`'s latest committed offsets (of `topics` only, if given)."""
        cache = self._caught_up(offsets_partition(group, self.partitions))
        with cache.lock:
            found = dict(cache.groups.get(group, {}))
        return {tp: c for tp, c in found.items() if topics is None or tp[0] in topics}

    def groups(self) -> list[str]:
        """Every group with committed offsets."""
        out: set[str] = set()
        for p in range(self.partitions):
            cache = self._caught_up(p)
            with cache.lock:
                out.update(cache.groups)
        return sorted(out)

    def _caught_up(self, partition: int) -> _Cache:
        """The partition's cache, after reading what was appended since it last looked."""
        cache, plog = self._caches[partition], self._logs[partition]
        with cache.lock:
            end = plog.end_offset
            while cache.position < end:
                fetched = plog.fetch(max(cache.position, plog.start_offset), 4 << 20, end)
                for batch in fetched:
                    cache.apply(batch.batch)
                    cache.position = batch.offset + batch.batch.num_rows
        return cache

    # -- writes ------------------------------------------------------------------------------------------
    def commit(self, group: str, offsets: dict[TopicPartition, int], metadata: str,
               validate: Callable[[], None] = lambda: None) -> None:
        """Append the commit as one batch, `validate()` (the generation check) first, both under the
        partition's lock; returns once it is written (fsynced as the topic's flush policy says)."""
        now = self.clock.now_ms()
        rows = [(_key(group, tp), {"next_offset": o, "metadata": metadata, "commit_ms": now})
                for tp, o in sorted(offsets.items())]
        self._append(offsets_partition(group, self.partitions), rows, validate)

    def delete_group(self, group: str) -> None:
        """Append a tombstone for each of `group`'s committed offsets."""
        keys = sorted(self.committed(group))
        if keys:
            self._append(offsets_partition(group, self.partitions), [(_key(group, tp), None) for tp in keys])

    def forget_topic(self, topic: str) -> None:
        """Append a tombstone for every group's offsets in `topic` (the topic was deleted)."""
        for p in range(self.partitions):
            cache = self._caught_up(p)
            with cache.lock:
                keys = [_key(g, tp) for g, offsets in cache.groups.items() for tp in offsets if tp[0] == topic]
            if keys:
                self._append(p, [(k, None) for k in sorted(keys)])

    def _append(self, partition: int, rows: Sequence[tuple[bytes, Mapping[str, object] | None]],
                validate: Callable[[], None] = lambda: None) -> None:
        plog = self._logs[partition]
        n = len(rows)
        batch = pa.RecordBatch.from_arrays(
            [pa.array([self.clock.now_us()] * n, TIMESTAMP), pa.array([k for k, _ in rows], pa.binary()),
             pa.nulls(n, SCHEMA.field("headers").type), pa.array([v for _, v in rows], SCHEMA.field("value").type)],
            schema=SCHEMA)
        epoch = self._epoch() if self._epoch is not None else -1
        try:
            with plog.lock:
                validate()
                plog.append(batch, leader_epoch=epoch)
        except InvalidLeaderEpochError:
            raise CoordinatorUnavailableError(
                f"this coordinator instance (epoch {epoch}) was deposed: a newer one stamped {OFFSETS_TOPIC}-"
                f"{partition}; nothing was written, retry on the active instance") from None
        if len(plog.segments()) > 1:
            self._clean_soon(partition)

    def take_leadership(self, epoch: int) -> None:
        """Stamp `epoch` on every partition now (an instance that became active): appends of older epochs, a
        deposed instance's, are refused from here on."""
        leader = pa.RecordBatch.from_arrays(
            [pa.array([self.clock.now_us()], TIMESTAMP), pa.array([json.dumps(["leader"]).encode()], pa.binary()),
             pa.nulls(1, SCHEMA.field("headers").type), pa.nulls(1, SCHEMA.field("value").type)], schema=SCHEMA)
        for plog in self._logs:
            plog.append(leader, leader_epoch=epoch)  # a record, so other processes see the log change and reload

    # -- compaction and migration -------------------------------------------------------------------------
    def _clean_soon(self, partition: int) -> None:
        """Run a cleaner pass on the partition in the background, unless one is running."""
        with self._guard:
            if partition in self._cleaning:
                return
            self._cleaning.add(partition)

        def run() -> None:
            try:
                report = self._logs[partition].clean()
                if report.cleaned:
                    log.info("%s", report.describe())
            except Exception:  # noqa: BLE001 (a failed pass is retried at the next roll)
                log.exception("compacting %s-%d failed; the next segment roll retries", OFFSETS_TOPIC, partition)
            finally:
                with self._guard:
                    self._cleaning.discard(partition)
        threading.Thread(target=run, name=f"offsets-cleaner-{partition}", daemon=True).start()

    def compact(self) -> list[str]:
        """Compact every partition now (rolling the active segments); what each pass did."""
        return [plog.clean(force=True).describe() for plog in self._logs]

    def size_bytes(self) -> int:
        return sum(plog.size_bytes() for plog in self._logs)

    def _migrate(self, legacy: LegacyOffsets) -> None:
        """Append the offsets the store kept itself, once (under a lock file; a marker says it is done)."""
        marker = os.path.join(self.directory, MIGRATED)
        if os.path.exists(marker):
            return
        fd = os.open(os.path.join(self.directory, ".migration-lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.path.exists(marker):
                return
            by_group: dict[str, list[tuple[TopicPartition, CommittedOffset]]] = {}
            for group, tp, committed in legacy():
                by_group.setdefault(group, []).append((tp, committed))
            for group, items in sorted(by_group.items()):
                rows = [(_key(group, tp), {"next_offset": c.offset, "metadata": c.metadata,
                                           "commit_ms": c.commit_ms}) for tp, c in sorted(items)]
                self._append(offsets_partition(group, self.partitions), rows)
            for plog in self._logs:
                plog.flush()
            with open(marker, "w") as f:
                f.write(json.dumps({"migrated_groups": len(by_group)}))
                f.flush()
                os.fsync(f.fileno())
            if by_group:
                log.warning("group offsets: %d group(s) moved to the %s topic in %s (the old copies are no longer "
                            "read)", len(by_group), OFFSETS_TOPIC, self.directory)
        finally:
            os.close(fd)


class TopicOffsets:
    """The offset methods of the Coordinator interface over an OffsetsTopic (`self._offsets`), for a store whose
    GroupService (`self._groups`) checks a commit's generation and knows the live groups."""

    _offsets: OffsetsTopic
    _groups: GroupService

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        validation.offsets(group, offsets, metadata)
        self._offsets.commit(group, dict(offsets), metadata,
                             lambda: self._groups.validate_commit(group, member_id, generation))

    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        return self._offsets.committed(group, topics)

    def _has_offsets(self, group: str) -> bool:
        return bool(self._offsets.committed(group))

    def list_groups(self) -> list[str]:
        return sorted(set(self._offsets.groups()) | set(self._groups.live_groups()))

    def delete_group(self, group: str) -> None:
        """Forget a group's offsets and state; GroupNotEmptyError while it has live members."""
        self._groups.delete_group(group)
        self._offsets.delete_group(group)
