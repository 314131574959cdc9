"""The Broker: one fabric's data and metadata, in-process: the partition logs of a data directory
(fabric.storage) and a metadata store (fabric.coordinator).

The coordinator service serves a Broker over Arrow Flight; an embedded fabric (fabric.client.embedded) is a
Broker used in the client's own process. Many processes may open Brokers on one directory at once: appends
are serialized per partition by the partition lock, metadata changes by the store.

The Broker checks everything it is asked to do itself, whatever the caller checked: topic metadata (through
the store's rules), partition counts against its limit, what is written (fabric.server.admission), committed
offsets against the logs. A refused call changes nothing; a disk that refuses a write is a StorageError.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from fabric.common import checks
from fabric.common.config import INT_MAX
from fabric.common.errors import (
    CorruptRecordError,
    FabricError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownTopicError,
)
from fabric.common.names import OFFSETS_TOPIC, validate_new_topic
from fabric.common.redaction import clip
from fabric.common.types import (
    Fetched,
    PartitionState,
    ProducerIdentity,
    TopicInfo,
    TopicPartition,
    TopicRecovery,
    TransactionalOffsets,
)
from fabric.coordinator import transactions, validation
from fabric.coordinator.disk import disk_errors
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.offsets_log import OffsetsPart
from fabric.coordinator.producer_ids import ProducerIds
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.server import admission, partition_ops, publish, recovery
from fabric.server.publish import Frame, Staged
from fabric.server.security import ANONYMOUS
from fabric.storage import batch_encoding, frame
from fabric.storage.batch_encoding import Rows
from fabric.storage.cleaner import CleanReport
from fabric.storage.errors import told
from fabric.storage.log import Log
from fabric.storage.log_maintenance import LogMaintenance
from fabric.storage.log_manager import LogManager
from fabric.storage.producer_state import DEFAULT_EXPIRATION_MS

log = logging.getLogger(__name__)
ADOPT_BYTES = 4 << 20  # staged files at least this large become segments instead of being copied
METADATA_DB = "metadata.db"
DEFAULT_MAX_PARTITIONS = 10_000
MAX_PARTITIONS_ENV = "FABRIC_MAX_PARTITIONS"


def partition_limit(value: Any = None) -> int:
    """The per-topic partition limit: `value` if given, else $FABRIC_MAX_PARTITIONS, else 10,000."""
    source = "topic.max.partitions"
    if value is None:
        value, source = os.environ.get(MAX_PARTITIONS_ENV) or DEFAULT_MAX_PARTITIONS, f"${MAX_PARTITIONS_ENV}"
    try:
        limit = int(value)
    except (TypeError, ValueError):
        limit = 0
    if not 1 <= limit <= INT_MAX:
        raise InvalidConfigError(f"{source} must be a partition count from 1 to {INT_MAX}, "
                                 f"got {clip(value)}")
    return limit


def _topic_may_vanish(method: Callable[..., Any]) -> Callable[..., Any]:
    """A partition call (its topic the first argument) whose files vanished under it because the topic was deleted
    after the call found it answers UnknownTopicError, as if the deletion came first: a reader takes that for the
    deletion it is, where a FileNotFoundError would be a server failure. A file it cannot read (permissions, a
    directory in its place) is a StorageError naming it and the fix."""
    @functools.wraps(method)
    def call(self: Broker, topic: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, topic, *args, **kwargs)
        except FileNotFoundError:
            self._topic(topic)
            raise
        except OSError as exc:
            raise told(exc, self.root, f"read topic {topic}", misplaced=True) from exc
    return call


class Broker:
    """The fabric in directory `root`; metadata in `coordinator` if given (the coordinator service's store),
    else in root's own SQLite database. Topics may have at most `max_partitions` partitions (default:
    partition_limit())."""

    def __init__(self, root: str, coordinator: Coordinator | None = None, max_partitions: int | None = None) -> None:
        self.max_partitions = partition_limit(max_partitions)
        with disk_errors(root, "open the data directory"):
            self.logs = LogManager(root, self._transaction_committed)
        self.root = self.logs.root
        self.coordinator = coordinator or SqliteCoordinator(os.path.join(self.logs.internal_dir, METADATA_DB),
                                                            unknown_topic=self._unregistered)
        self.producer_ids = ProducerIds(self.coordinator)
        self.maintenance: LogMaintenance | None = None
        self._maintenance_guard = threading.Lock()

    def init_producer_id(self, principal: str = ANONYMOUS) -> ProducerIdentity:
        """A new idempotent producer's id (unique in the fabric, unpredictable) and epoch, owned by `principal`
        (the caller's, passed by the service; an embedded fabric has none): only it may append under the id."""
        return self.producer_ids.next(principal)

    def producer_id_owner(self, producer_id: int) -> str | None:
        """The principal `producer_id` was handed to; None if it was not handed out (data nodes ask, to refuse an
        append under another principal's id)."""
        return self.producer_ids.owner(producer_id)

    def verify_transaction_writer(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                                  partition: int) -> bool:
        """True if the open transaction of `transactional_id` has the producer at that epoch as a writer registered
        with the partition (a leader asks before a transactional batch opens a transaction there: KIP-890)."""
        return transactions.registered(self.coordinator.transaction_record(transactional_id), producer_id,
                                       producer_epoch, (topic, partition))

    def _transaction_committed(self, txn: str) -> bool:
        return self.coordinator.transaction_committed(txn)

    def _topic(self, name: str) -> TopicInfo:
        """The topic's metadata; UnknownTopicError, saying how to recover it if its data is still here."""
        try:
            return self.coordinator.topic(name)
        except UnknownTopicError:
            orphaned = self._unregistered(name)
            if orphaned is not None:
                raise UnknownTopicError(orphaned) from None
            raise

    def _unregistered(self, name: str) -> str | None:
        """Of a topic the metadata does not know: how to recover it, if its data is still here (else None)."""
        try:
            directory = self.logs.topic_dir(name)
        except FabricError:
            return None
        if os.path.isdir(directory) and not recovery.is_deleting(directory):
            return f"topic {name!r} is not registered: {recovery.orphan_hint(name, directory)}"
        return None

    def log(self, topic: str, partition: int) -> Log:
        """The Log of one partition (UnknownTopicError / UnknownPartitionError if there is none)."""
        return self._open(self._topic(topic), partition)

    def _open(self, info: TopicInfo, partition: int) -> Log:
        """The partition's Log; UnknownTopicError if its topic was deleted since `info` was read (its directory is
        never made again). A registered partition without a directory (a create under way in another process, or
        one removed by hand) gets an empty one, as a create makes."""
        try:  # (not disk_errors: no message built on the way of every request)
            return self.logs.log(info, partition, create=False)
        except FileNotFoundError:
            self._topic(info.name)
        except OSError:
            with self._opening(info, partition):
                raise
        with self._opening(info, partition):
            return self.logs.log(info, partition)

    def _opening(self, info: TopicInfo, partition: int) -> contextlib.AbstractContextManager[None]:
        """What opening one partition's Log raises on a disk problem (disk_errors)."""
        where = os.path.join(self.root, info.name, str(partition))
        return disk_errors(where, f"open partition {info.name}-{partition}")

    def _partitions(self, topic: str) -> int:
        return self._topic(topic).partitions

    def _check_limit(self, name: str, partitions: Any) -> None:
        """A partition count from 1 to max_partitions, else InvalidPartitionsError naming the limit."""
        if not checks.is_integer(partitions) or partitions < 1:
            validation.partition_count(name, partitions)
        if partitions > self.max_partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} cannot have {partitions} partitions: the limit is {self.max_partitions} per topic "
                f"(topic.max.partitions of the coordinator service, ${MAX_PARTITIONS_ENV} of an embedded fabric); "
                "ask for fewer or raise the limit")

    # -- admin -------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, config: Mapping[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        """Register the topic and create its partitions, all or nothing; never over data already there."""
        validate_new_topic(name)
        self._check_limit(name, partitions)
        checked = validation.topic(name, partitions, config, value_schema)
        directory = self.logs.topic_dir(name)
        self._claim_directory(name, directory)
        info = self.coordinator.create_topic(name, partitions, checked, value_schema)
        try:
            with disk_errors(directory, f"create the partitions of topic {name!r}"):
                self.logs.create_partitions(info)
        except BaseException:
            self._remove(name, directory)
            log.warning("topic %s: creating its partitions failed; its metadata and directory were removed", name)
            raise
        log.info("topic %s created with %d partition(s)", name, partitions)
        return info

    def _claim_directory(self, name: str, directory: str) -> None:
        """Make way for a new topic's directory: remove a crashed delete's leftover; refuse over anything else."""
        if not os.path.exists(directory):
            return
        if recovery.is_deleting(directory):
            log.warning("topic %s: removing %s, left behind by a delete that did not finish", name, directory)
            with disk_errors(directory, f"remove the leftover directory of topic {name!r}"):
                self.logs.delete_topic(name)
            return
        if name in self.coordinator.list_topics():
            raise TopicExistsError.of(name)
        raise TopicExistsError(f"cannot create topic {name!r}: {recovery.orphan_hint(name, directory)}")

    def delete_topic(self, name: str) -> None:
        """Mark the topic's directory as being deleted, forget its metadata, then remove the directory."""
        directory = self.logs.topic_dir(name)
        self._topic(name)
        with disk_errors(directory, f"delete topic {name!r}"):
            recovery.mark_deleting(directory)
        try:
            self.coordinator.delete_topic(name)
        except BaseException:
            recovery.unmark_deleting(directory)
            raise
        self.logs.delete_topic(name)
        log.info("topic %s deleted", name)

    def _remove(self, name: str, directory: str) -> None:
        """Undo a create that failed halfway: its metadata, then the directory it made (best effort: logged)."""
        try:
            recovery.mark_deleting(directory)
            self.coordinator.delete_topic(name)
        except Exception:  # noqa: BLE001 (the original failure is what the caller must see)
            log.exception("topic %s: could not remove the metadata of a failed create; delete the topic", name)
            return
        self.logs.delete_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow the topic to `total` partitions (more than it has)."""
        info = self._topic(name)
        if not checks.is_integer(total) or total <= info.partitions:
            raise InvalidPartitionsError(f"topic {name!r} has {info.partitions} partitions; the new total must be "
                                         f"larger, got {clip(total)}")
        return self.set_partitions(name, total)

    def set_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow the partition count to `total` (never shrinks) and create the new partitions."""
        self._check_limit(name, total)
        info = self.coordinator.set_partitions(name, total)
        with disk_errors(self.logs.topic_dir(name), f"create the partitions of topic {name!r}"):
            self.logs.create_partitions(info)
        return info

    def recover_topics(self, names: Sequence[str] | None = None) -> list[TopicRecovery]:
        """Register topic directories the metadata does not know (e.g. after losing __fabric/metadata.db) from
        their data (fabric.server.recovery); returns what was done with each."""
        if names is not None and (not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names)):
            raise InvalidRequestError("recover_topics takes a list of topic names, or None for every directory")
        with disk_errors(self.root, "register recovered topics"):
            return recovery.recover_topics(self.logs, self.coordinator, names, self.max_partitions)

    # -- data --------------------------------------------------------------------------------------
    def append(self, topic: str, partition: int, rows: Rows, codec: str = "none", acks: str = "all",
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> int:
        """Append to a single-directory partition: it has one replica, so every `acks` answers after the append.
        An idempotent producer's retry is not written twice (see Log.append). Its topic deleted meanwhile is
        UnknownTopicError, as for _topic_may_vanish's calls (written out: no call more on every append)."""
        partition_ops.check_acks(acks)
        try:
            return partition_ops.append(self.log(topic, partition), topic, partition, rows, codec,
                                        producer=partition_ops.producer_batch(producer_id, producer_epoch,
                                                                              base_sequence))
        except FileNotFoundError:
            self._topic(topic)
            raise
        except OSError as exc:
            raise told(exc, self.root, f"write partition {topic}-{partition}", misplaced=True) from exc

    @_topic_may_vanish
    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None, max_wait_ms: int = 0, client_rack: str | None = None,
              isolation_level: str = "read_committed") -> list[Fetched]:
        """Committed batches from `offset`, waiting up to `max_wait_ms` at the end of the log for some; the
        batches before damaged records come back, and CorruptRecordError is raised only when the first batch
        asked for is damaged (naming the offsets to seek past). One directory has one replica: the rack is moot;
        its batches are published whole, never as open transactions: the isolation level is too."""
        return partition_ops.fetch(self.log(topic, partition), offset, max_bytes, end_offset, max_wait_ms)

    @_topic_may_vanish
    def partition_state(self, topic: str, partition: int) -> PartitionState:
        return partition_ops.state(self.log(topic, partition), topic, partition)

    @_topic_may_vanish
    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        return partition_ops.offset_for_time(self.log(topic, partition), timestamp_us)

    @_topic_may_vanish
    def offset_after_records(self, topic: str, partition: int, offset: int, count: int,
                             end_offset: int | None = None, isolation_level: str = "read_committed") -> int:
        """Counted below the watermark, as fetch reads (the isolation level is checked, and counts aborted
        records only for read_uncommitted)."""
        return partition_ops.offset_after_records(self.log(topic, partition), offset, count, end_offset,
                                                  isolation_level)

    def enforce_retention(self, topic: str) -> int:
        """`fabric topics retain`: apply the topic's retention to every partition now; segments deleted."""
        with disk_errors(self.logs.topic_dir(topic), f"enforce the retention of topic {topic!r}"):
            return sum(self.log(topic, p).enforce_retention() for p in range(self._partitions(topic)))

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Kafka's DeleteRecords (`fabric topics delete-records`): move the partition's log start offset up to
        `before_offset` (-1: its high watermark) and delete the whole segments below it (Log.delete_records);
        returns the new log start offset (the low watermark). OffsetOutOfRangeError past the high watermark;
        InvalidConfigError on a topic whose cleanup.policy has no `delete` (Kafka refuses it there too: a
        compacted topic keeps every key's latest value)."""
        checks.integer(partition, "partition", 0, INT_MAX)
        partition_log = self.log(topic, partition)
        with disk_errors(self.logs.topic_dir(topic), f"delete records of {topic}-{partition}"):
            return partition_ops.delete_records(partition_log, topic, before_offset)

    def compact_topic(self, topic: str) -> list[CleanReport]:
        """`fabric topics compact`: roll each partition's active segment and clean everything cleanable now
        (Log.clean(force=True)); a report per partition. Refused, naming the fix, for a topic whose
        cleanup.policy does not compact."""
        info = self._topic(topic)
        partition_ops.check_compacted(info)
        with disk_errors(self.logs.topic_dir(topic), f"compact topic {topic!r}"):
            return [self._open(info, p).clean(force=True) for p in range(info.partitions)]

    # -- background maintenance ----------------------------------------------------------------------
    def maintained_partitions(self) -> list[tuple[str, Callable[[], Log]]]:
        """Every partition whose log lives in this directory, by name, with how to open it (what the background
        maintenance looks after)."""
        out: list[tuple[str, Callable[[], Log]]] = []
        for name in self.coordinator.list_topics():
            if not self._stored_here(name):
                continue
            try:
                info = self.coordinator.topic(name)
            except UnknownTopicError:
                continue  # deleted since it was listed
            out += [(f"{name}-{p}", functools.partial(self._open, info, p)) for p in range(info.partitions)]
        return out

    def _stored_here(self, topic: str) -> bool:
        """True if the topic's logs are in this directory (ClusterBroker: not for replicated topics)."""
        return True

    def start_maintenance(self, interval_ms: int, active: Callable[[], bool] | None = None,
                          producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS) -> LogMaintenance:
        """Start the background maintenance of this directory's logs every `interval_ms`, forgetting producers
        silent for `producer_id_expiration_ms` (once; later calls return the running one). With `active`, passes
        run only while it says so (a standby coordinator)."""
        if self.maintenance is not None:  # the embedded fabric asks on every write: no lock once it runs
            return self.maintenance
        with self._maintenance_guard:
            if self.maintenance is None:
                def partitions() -> list[tuple[str, Callable[[], Log]]]:
                    return self.maintained_partitions() if active is None or active() else []
                self.maintenance = LogMaintenance(partitions, interval_ms,
                                                  producer_id_expiration_ms=producer_id_expiration_ms).start()
            return self.maintenance

    def stop_maintenance(self, timeout_s: float = 30.0) -> None:
        """Stop the background maintenance, if it runs (waiting up to `timeout_s` for a partition in progress)."""
        with self._maintenance_guard:
            maintenance, self.maintenance = self.maintenance, None
        if maintenance is not None:
            maintenance.stop(timeout_s)

    # -- group offsets -------------------------------------------------------------------------------
    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        """Commit a group's offsets: each an int within its partition's [log start, log end], after the
        member's generation is checked (a fenced member hears first that it must rejoin)."""
        validation.offsets(group, offsets, metadata)
        self._check_offset_ranges(group, offsets, member_id, generation)
        self.coordinator.commit_offsets(group, dict(offsets), metadata, generation, member_id)  # checks it too

    def _check_offset_ranges(self, group: str, offsets: Mapping[TopicPartition, int], member_id: str,
                             generation: int, transactional: bool = False) -> None:
        """Each offset within its partition's range (shapes checked); on a refusal, a fenced member hears first
        that it must rejoin. The store's commit checks the member's generation itself."""
        logs = self._offset_logs(offsets)
        try:
            self._check_committable(offsets, logs)
        except OffsetOutOfRangeError:
            self.coordinator.check_commit(group, member_id, generation, transactional)  # a fenced member hears it first
            raise

    def _offset_logs(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, Log | None]:
        """The logs the committed `offsets` are checked against (None: not checked), each topic's metadata read
        once."""
        partitions: dict[str, list[int]] = {}
        for topic, partition in offsets:
            partitions.setdefault(topic, []).append(partition)
        return {(topic, partition): partition_log for topic, numbers in partitions.items()
                for partition, partition_log in self._committable_logs(topic, numbers).items()}

    @staticmethod
    def _check_committable(offsets: Mapping[TopicPartition, int], logs: Mapping[TopicPartition, Log | None]
                           ) -> None:
        """OffsetOutOfRangeError unless every offset is within its partition's [log start, log end]: the start read
        now, the end as this process last read it where that holds the offset (LogBounds.holding)."""
        for (topic, partition), offset in offsets.items():
            partition_log = logs[(topic, partition)]
            if partition_log is None:
                continue
            start, end = partition_log.bounds.holding(offset)
            if not start <= offset <= end:
                raise OffsetOutOfRangeError(
                    f"cannot commit offset {offset} for {topic}-{partition}: the partition holds offsets [{start}, "
                    f"{end}]; commit a position within them (reset with --to-earliest or --to-latest)")

    def _committable_logs(self, topic: str, partitions: list[int]) -> dict[int, Log | None]:
        """The logs committed offsets of `topic` are checked against (None: not checked), its metadata read
        once for all of them."""
        info = self._topic(topic)
        return {partition: self._open(info, partition) for partition in partitions}

    # -- transactions --------------------------------------------------------------------------------
    def publish(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                codec: str = "none") -> bool:
        """Append stored rows to several partitions atomically under `txn`, at most once."""
        if self.coordinator.transaction_committed(txn):
            return False
        return self._publish(txn, self._stage_batches(parts, codec)) is not None

    def publish_transaction(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                            codec: str = "none", offsets: TransactionalOffsets | None = None,
                            timeout_ms: int = 60_000) -> dict[TopicPartition, list[int]] | None:
        """A producer transaction's commit: publish() of `parts` and, with `offsets`, the group's offsets as one
        more partition of the same publish (the offsets topic's, in the coordinator's directory), so records and
        offsets become visible together at its commit point, or neither. The offsets are checked as
        commit_offsets checks them, under the publish's locks. Returns the base offset of each batch of each
        partition; None (nothing written) if `txn` had committed already: another producer with the same
        transactional id did. A publish is atomic, so it has no transaction timeout (`timeout_ms` is for a
        transaction on data nodes, Cluster.publish_transaction)."""
        if self.coordinator.transaction_committed(txn):
            return None
        staged = self._stage_batches(parts, codec)
        if offsets is None:
            bases = self._publish(txn, staged)
        else:
            part, validate = self._transaction_offsets(offsets)
            template, payload = batch_encoding.encode(part.rows)
            staged[(OFFSETS_TOPIC, part.partition)] = [(None, [(frame.seal(template, payload), payload)])]
            bases = self._publish(txn, staged, validate, part)
        if bases is None:
            return None
        counts = {key: [b.num_rows for b in batches if b.num_rows] for key, batches in parts.items()}
        return {key: [bases[key] + sum(sizes[:i]) for i in range(len(sizes))] for key, sizes in counts.items()}

    def commit_transaction(self, txn: str, writers: Sequence[int] | None = None,
                           offsets: TransactionalOffsets | None = None) -> None:
        """The coordinator's commit_transaction, a group's `offsets` first checked as commit_offsets checks them
        (each offset within its partition here, the member's generation by the store), so a refused commit
        commits nothing."""
        if offsets is not None:
            validation.transactional_offsets(offsets)
            self._check_offset_ranges(offsets.group, offsets.offsets, offsets.member_id, offsets.generation, True)
        self.coordinator.commit_transaction(txn, writers, offsets)

    def _transaction_offsets(self, offsets: TransactionalOffsets) -> tuple[OffsetsPart, Callable[[], None]]:
        """The offsets partition of a transaction's publish, and the check to run under its locks: the writing
        coordinator instance is still the active one, then the member's generation and each offset's range, as
        commit_offsets checks them."""
        validation.transactional_offsets(offsets)
        group, committed, generation = offsets.group, offsets.offsets, offsets.generation
        logs = self._offset_logs(committed)
        for partition_log in logs.values():
            if partition_log is not None:
                partition_log.end_offset  # noqa: B018 (recovers it now: read under the publish's locks, it takes no lock)
        self.coordinator.check_commit(group, offsets.member_id, generation, transactional=True)
        part = self.coordinator.transactional_offsets(group, dict(committed), offsets.metadata)

        def validate() -> None:
            part.check()
            self.coordinator.check_commit(group, offsets.member_id, generation, transactional=True)
            self._check_committable(committed, logs)
        return part, validate

    def _stage_batches(self, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]], codec: str
                       ) -> dict[TopicPartition, Staged]:
        """Stored batches checked for their partitions (fabric.server.admission) and encoded as sealed frames."""
        partition_ops.check_codec(codec)
        staged: dict[TopicPartition, Staged] = {}
        for key, batches in parts.items():
            partition_log = self._publish_log(key)
            for batch in batches:
                admission.check_rows(key[0], batch, partition_log.schema, partition_log.config["max.message.bytes"],
                                     partition_log.config)
            encoded = [batch_encoding.encode(b, codec, partition_log.timestamp_type, partition_log.clock)
                       for b in batches if b.num_rows]
            staged[key] = [(None, [(frame.seal(template, payload), payload) for template, payload in encoded])]
        return staged

    def publish_frames(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.Buffer]]) -> bool:
        """publish() for buffers of sealed frames laid end to end, appended as they are."""
        if self.coordinator.transaction_committed(txn):
            return False
        staged: dict[TopicPartition, Staged] = {}
        for key, buffers in parts.items():
            log = self._publish_log(key)
            staged[key] = [(None, self._admit(key, log, buffer, "a buffer of frames")) for buffer in buffers]
        return self._publish(txn, staged) is not None

    def publish_files(self, txn: str, parts: Mapping[TopicPartition, Sequence[str]],
                      adopt_bytes: int = ADOPT_BYTES) -> bool:
        """publish_frames() for staged segment files: files of at least `adopt_bytes` become segments of
        their partition as they are (renamed, not copied); smaller ones are copied, so small micro-batches
        do not make tiny segments."""
        if self.coordinator.transaction_committed(txn):
            return False
        staged: dict[TopicPartition, Staged] = {}
        for key, paths in parts.items():
            log = self._publish_log(key)
            staged[key] = []
            for path in paths:
                with pa.memory_map(path, "r") as mapped:
                    frames = self._admit(key, log, mapped.read_buffer(), f"staged file {path}", dense=True)
                staged[key].append((path if os.path.getsize(path) >= adopt_bytes else None, frames))
        return self._publish(txn, staged) is not None

    def _publish_log(self, key: Any) -> Log:
        """The Log a publish writes to; InvalidRequestError unless `key` is a (topic, partition) pair."""
        if not (isinstance(key, tuple) and len(key) == 2):
            raise InvalidRequestError(f"a publish is keyed by (topic, partition) pairs, got {clip(key)}")
        if key[0] == OFFSETS_TOPIC:
            raise InvalidRequestError(f"a publish cannot name {OFFSETS_TOPIC}: group offsets are written only by "
                                      "offset commits (commit_offsets, or a producer transaction's "
                                      "send_offsets_to_transaction)")
        return self.log(*key)

    @staticmethod
    def _admit(key: TopicPartition, log: Log, buffer: pa.Buffer, what: str, dense: bool = False) -> list[Frame]:
        """The CRC-checked frames of `buffer`, admitted for partition `key` (fabric.server.admission)."""
        try:
            frames = frame.split_frames(buffer)
        except frame.FrameError as exc:
            raise CorruptRecordError(f"{what} for {key[0]}-{key[1]} is not whole, valid frames ({exc}); nothing "
                                     "was written") from None
        admission.check_frames(key[0], frames, log.schema, log.config["max.message.bytes"], dense, log.config)
        return frames

    def _publish(self, txn: str, staged: Mapping[TopicPartition, Staged], validate: Callable[[], None] = lambda: None,
                 offsets: OffsetsPart | None = None) -> dict[TopicPartition, int] | None:
        """publish.publish() of `staged`; with `offsets`, the offsets topic's partitions are its Logs."""
        log_of, partitions_of = self.log, self._partitions
        if offsets is not None:
            def log_of(topic: str, partition: int) -> Log:
                return offsets.log(partition) if topic == OFFSETS_TOPIC else self.log(topic, partition)

            def partitions_of(topic: str) -> int:
                return offsets.partitions if topic == OFFSETS_TOPIC else self._partitions(topic)
        with disk_errors(self.root, f"publish transaction {clip(txn)}"):
            return publish.publish(self.coordinator, log_of, partitions_of, txn, staged, validate)

    def staging_dir(self, sink_id: str, batch: str | None = None) -> str:
        """<root>/__fabric/staging/<sink id>[/<batch>]: where the Spark sink stages a batch's frames."""
        path = os.path.join(self.logs.internal_dir, "staging", sink_id)
        return path if batch is None else os.path.join(path, batch)

    def close(self) -> None:
        """Stop the background maintenance, snapshot the producer states this process holds (so its next start
        walks no frames for them) and release the metadata store's connections."""
        self.stop_maintenance()
        self.logs.closing()
        self.coordinator.close()

