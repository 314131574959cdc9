"""A Log: one partition's ordered segments, its high watermark, its leader epochs and its lock.

Appends (from any process) take the partition lock, bring this process's view of the tail up to date,
recover it if a previous writer died mid-append (fabric.storage.recovery), write the frame, then advance the
high watermark. Reads take no lock: they read whole, CRC-checked frames below the high watermark
(fabric.storage.reader). The first use of a Log in a process recovers the partition (as Kafka recovers a log
when it loads it); where the directory cannot be written, reads go on from what recovery works out in memory.
A replica log (a data node's) also takes frames copied from its leader and is truncated to an offset.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import threading
from types import TracebackType
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.config import TopicConfig
from fabric.common.records import TIMESTAMP_TYPES
from fabric.common.types import Fetched, ProducerBatch
from fabric.storage import adopt, batch_encoding, frame, producer_state_load, reader, truncation, txn_index
from fabric.storage.cleaner import CleanReport, LogCleaner
from fabric.storage.cut_barrier import CutBarrier
from fabric.storage.errors import writes
from fabric.storage.flush_policy import FlushPolicy
from fabric.storage.frame import FrameHeader
from fabric.storage.index_repair import IndexRepair
from fabric.storage.leader_epochs import LeaderEpochCache
from fabric.storage.lock import PartitionLock, may_wait
from fabric.storage.log_bounds import LogBounds
from fabric.storage.log_retention import LogRetention
from fabric.storage.marker import (
    PENDING,
    PendingPublish,
    UnreadableMarkerError,
    read_marker,
    remove_marker,
    write_marker,
)
from fabric.storage.open_files import DIRECT, DirectFiles, OpenFiles
from fabric.storage.producer_state import ProducerEntry, ProducerStateTable
from fabric.storage.recent_frames import RecentFrames
from fabric.storage.recovery import RecoveryReport
from fabric.storage.replica_frames import check_copied
from fabric.storage.scan import frame_headers
from fabric.storage.segment import Segment, disk_usage
from fabric.storage.segment_listing import SegmentListing
from fabric.storage.segment_swap import CrashHook
from fabric.storage.tail import LogTail, TailState
from fabric.storage.transactions import TransactionState
from fabric.storage.watermark import HighWatermark

__all__ = ["PENDING", "Log", "TailState"]

log = logging.getLogger(__name__)


class Log(LogTail):
    """The partition log in `directory`, whose batches are stored with `schema`.

    Invariants, checked where frames are written: the frames of the segments are whole and contiguous (each
    starts at the offset the one before it ended at: Segment.append follows the tail this object recovered
    under the lock, and copied frames are checked by replica_frames.check_copied); the watermark file is
    written after the frames it covers; the leader-epoch cache (leader_epochs) has no epoch starting at or past
    the log end, and takes an epoch before the first frame stamped with it is written. The log start offset
    (start_offset) is the larger of the first segment's base offset and the log-start-offset checkpoint
    (log_start, moved up by delete_records and set by a follower's truncate_fully_and_start_at), at most the
    end: every read refuses offsets below it (OffsetOutOfRangeError), and the checkpoint is written before the
    whole segments below it are deleted, so a crash in between leaves segments that nothing reads and the next
    delete_records or retention removes.

    Opened with `create` False, a Log whose directory is gone (its topic deleted meanwhile) is FileNotFoundError,
    never a directory made again.

    Two modes, fixed when the Log is made:
    - embedded (replica=False, the `file://` fabric): the watermark is the commit point; frames past it were
      never acknowledged and recovery cuts them. Frames carry leader epoch -1.
    - replica (replica=True, a data node's): the log end offset is the end of the last whole, CRC-valid frame
      (the watermark file follows it and is only checked against the frames); frames past the replication high
      watermark, which the node keeps, are awaiting replication, and recovery keeps them all, cutting only a torn
      or invalid tail. Only truncate_to, as the leader-epoch protocol decides, removes valid frames. A leader
      stamps its epoch on what it appends (append(leader_epoch=)); a follower appends its leader's frames byte
      for byte (append_frames).

    A log that only its own process writes (`recent_bytes` > 0: a data node's, whose directory the node owns)
    keeps the frames it wrote last in memory (recent_frames) and serves reads at the tail from them: a leader
    answers its followers and consumers without reading back what it just wrote.
    """

    def __init__(self, directory: str, schema: pa.Schema, config: TopicConfig,
                 resolve_pending: Callable[[str], bool] | None = None, clock: Clock = SYSTEM_CLOCK,
                 replica: bool = False, recent_bytes: int = 0, create: bool = True) -> None:
        if not create and not os.path.isdir(directory):
            raise FileNotFoundError(errno.ENOENT, "no partition directory", directory)
        self.directory = directory
        self._name = f"{os.path.basename(os.path.dirname(directory))}-{os.path.basename(directory)}"
        self.replica = replica
        # a replica log's replication high watermark as its node knows it (set by the node's replica): the
        # cleaner never cleans at or past it, and cleans nothing while it is None
        self.replication_high_watermark: Callable[[], int] | None = None
        self.schema = schema
        self.config = config
        os.makedirs(directory, exist_ok=True)
        self.lock = PartitionLock(os.path.join(directory, ".lock"), keep_file=not replica)
        self.hw = HighWatermark(os.path.join(directory, "high-watermark"), self.trusted_tail)
        # an append's files, kept open to the next append (open_files); a data node's opened per write, so an
        # operator can remount a failing disk read-only under it
        self.files: DirectFiles = DIRECT if replica else OpenFiles(self.lock)
        self._resolve_pending = resolve_pending or (lambda txn: False)
        self._segments: dict[int, Segment] = {}
        self._listing = SegmentListing(directory)
        self._listed: tuple[tuple[int, ...], list[Segment]] | None = None  # segments() of the listing it names
        self._tail_state: TailState | None = None
        self._tail_epoch = -1
        self._recovered = False
        self._memory_end: tuple[bytes, int] | None = None  # (watermark bytes, end) recovered but not written
        # where this process alone writes the directory (a node's), reads at the tail are answered from memory
        self.recent = RecentFrames(recent_bytes) if recent_bytes > 0 else None
        self.last_recovery: RecoveryReport | None = None
        self._epochs: LeaderEpochCache | None = None  # loaded on first use (embedded logs never use it)
        self._producers: ProducerStateTable | None = None  # built on an idempotent producer's first append
        self._producer_scan = threading.Lock()  # one load of the producer state at a time (producer_state_load)
        self.cut_barrier = CutBarrier()  # lock-free walks kept out of the way of a truncation
        self._snapshot_segment = None
        self.states_dropped = 0  # how often the producer and transaction states were dropped (LogTail.drop_states)
        self._txns: TransactionState | None = None  # built when a transaction or a read_committed reader needs it
        self.appended = threading.Condition()  # notified whenever the end offset moves on in this process
        self._append_waiters: dict[Callable[[], None], int] = {}
        self.clock = clock
        self.flushes = FlushPolicy(self)  # flush.messages, flush.ms
        self.bounds = LogBounds(self)  # the start and end offsets, read together
        self.retention = LogRetention(self)
        self.indexes = IndexRepair(self)  # rebuilds broken or stale segment indexes

    @property
    def name(self) -> str:
        """topic-partition, as Kafka names a partition (from the directory <root>/<topic>/<partition>)."""
        return self._name

    def resolve_pending(self, txn: str) -> bool:
        """True if transaction `txn` committed (its frames past the watermark are rolled forward)."""
        return self._resolve_pending(txn)

    # -- segments ----------------------------------------------------------------------------------
    def segments(self, fresh: bool = False) -> list[Segment]:
        """The segments on disk now, oldest first, which callers never modify: objects are cached per base offset,
        and the list itself while the directory's listing is the one it was made from (a fetch of a partition of
        thousands of segments then costs no pass over them). `fresh`: the directory listed again whatever its time
        says (SegmentListing keeps a listing while the time is unchanged, which a clock stepped back can fool):
        for recovery, which must never take a segment it did not see for the log's last, and for a read that
        found the log end past the segments listed."""
        if fresh:
            self._listing.forget()
        bases = self._listing.bases()
        listed = self._listed
        if listed is not None and listed[0] is bases:  # (SegmentListing gives the object it kept, unchanged)
            return listed[1]
        cache = {b: self._segments.get(b) or Segment(self.directory, b, self.schema) for b in bases}
        self._segments = cache
        segs = list(cache.values())
        self._listed = (bases, segs)
        return segs

    def create_segment(self, base_offset: int) -> Segment:
        """A new, empty segment at `base_offset` (lock held)."""
        seg = Segment.create(self.directory, base_offset, self.schema)
        self._cache_segment(seg)
        return seg

    def forget_segments(self, bases: Iterable[int]) -> None:
        """Drop the cached objects of segments replaced or deleted by another writer (the cleaner's swap)."""
        for base in bases:
            self._segments.pop(base, None)
        self._listed = None
        self._listing.forget()

    def register(self, seg: Segment) -> None:
        """Cache a segment made outside this object (an adopted one)."""
        self._cache_segment(seg)

    def _cache_segment(self, seg: Segment) -> None:
        self._segments[seg.base_offset] = seg
        self._listed = None
        self._listing.forget()  # (made here: listed at once, whatever the directory's time says)

    @property
    def start_offset(self) -> int:
        """The log start offset: the first offset not yet deleted by retention or delete_records."""
        return self.bounds.range().start

    def log_range(self, end: int | None = None) -> reader.LogRange:
        """The segments, log start and end offset now, read once (LogBounds.range)."""
        return self.bounds.range(end)

    @property
    def timestamp_type(self) -> int:
        """CreateTime (0) or LogAppendTime (1), from the topic's message.timestamp.type."""
        return TIMESTAMP_TYPES[self.config["message.timestamp.type"]]

    def size_bytes(self) -> int:
        return disk_usage(self.segments())[1]

    # -- leader epochs -----------------------------------------------------------------------------
    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """The partition's leader-epoch cache, loaded on first use under the lock: checked against the frames
        (rebuilt from their headers if its file is damaged, missing or behind them) and cut to the log's range."""
        return self._epochs or self._load_epochs()

    @writes
    def _load_epochs(self) -> LeaderEpochCache:
        with self.lock:
            self.sync_tail()
            end = self.tail_end()
            found = self._last_frame(end)
            last = None if found is None else found[1].header
            cache = LeaderEpochCache.load(self.directory, self.name, -1 if last is None else last.leader_epoch,
                                          functools.partial(self.headers, end))
            cache.truncate_from_end(end)
            cache.truncate_from_start(self.start_offset)
            self._epochs = cache
        return cache

    def headers(self, end: int, last_segments: int | None = None) -> Iterator[FrameHeader]:
        """The headers of the data frames below offset `end` (of the last `last_segments` segments only, if
        given), in offset order (damaged frames left out)."""
        segs = self.segments()
        return frame_headers(segs[-last_segments:] if last_segments else segs, end)

    # -- appends -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def appending(self) -> Iterator[None]:
        """A hold of the partition lock whose holder only appends, with checks and bookkeeping of its own around
        each append() (the offsets topic's commits, each checked and cached under the lock): its appends keep
        the tail files open for the next hold, as a bare append's do (open_files)."""
        with self.lock:
            self.files.appending()
            yield

    @writes
    def append(self, batch: pa.RecordBatch | batch_encoding.Encoded, codec: str = "none", timestamp_type: int = 0,
               leader_epoch: int = -1, producer: ProducerBatch | None = None, transactional: bool = False) -> int:
        """Append a batch of stored rows (or rows encoded by their maker); returns the offset of its first row.
        A leader gives its `leader_epoch` (>= 0): it is stamped on the frame and taken by the leader-epoch cache
        first (InvalidLeaderEpochError, nothing written, if it is below the latest); -1, an embedded log's,
        stamps no epoch. An idempotent producer's batch (`producer`) is checked against the partition's producer
        state first (producer_state): a retry of a batch already written writes nothing and returns that batch's
        offset. An empty batch writes nothing (a frame holds at least one record, so every frame is copied to
        followers) and returns the log end. A `transactional` batch (an idempotent producer's) is part of the
        producer's transaction here, invisible to read_committed readers until a marker ends it (write_marker;
        fabric.storage.transactions)."""
        if transactional and producer is None:
            raise ValueError("a transactional append needs its producer's id, epoch and sequence")
        batch_encoding.check_keys(batch, self.config, self.name)
        if producer is not None and self._producers is None:
            self._load_producers_unlocked()
        template, payload = batch_encoding.encode(batch, codec, timestamp_type, self.clock)
        with self.lock:
            active = self.sync_tail()
            base = self.tail_end()
            if not batch.num_rows:
                return base
            fields: dict[str, int] = {"leader_epoch": leader_epoch} if leader_epoch != template.leader_epoch else {}
            if producer is not None:
                original = self._producer_state(base).check(producer, batch.num_rows)
                if original is not None:
                    log.info("%s: batch of producer %d from sequence %d is a retry of offset %d: not written again",
                             self.name, producer.producer_id, producer.base_sequence, original)
                    return original
                fields.update(producer_id=producer.producer_id, producer_epoch=producer.producer_epoch,
                              base_sequence=producer.base_sequence)
                if transactional:
                    fields["attributes"] = template.attributes | frame.ATTR_TRANSACTIONAL
            return self._write_one(template, payload, base, active, fields)

    def _write_one(self, template: FrameHeader, payload: pa.Buffer, base: int, active: Segment,
                   fields: dict[str, int] | None = None) -> int:
        """Seal and write one frame at `base`, the log end, with the header `fields` given (a leader's epoch, a
        producer's), and take it into the producer and transaction states (lock held); returns `base`."""
        leader_epoch = fields.get("leader_epoch", template.leader_epoch) if fields else template.leader_epoch
        if leader_epoch >= 0:
            self.leader_epochs.assign(leader_epoch, base)
        with self._recover_on_failure():
            header = frame.seal(template, payload, base, **(fields or {}))
            active = self.write_frame(header, payload, active, self.files)
            tail = self._tail_state  # (write_frame's: the frame ends the active segment)
            if self.recent is not None and tail is not None:  # (not a follower's copies: they point into its fetch)
                self.recent.wrote(active.base_offset, active.known_schema, tail.size - header.size, header, payload)
            self.commit(base + header.record_count, self.files)
            self._took(header)
        self._snapshot_once_per_segment(header)
        return base

    @writes
    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool, leader_epoch: int = -1) -> int:
        """End producer `producer_id`'s transaction here with a marker (one record readers never get): committed
        or aborted. A marker whose producer has no open transaction ends nothing but still moves its epoch
        (fencing a zombie's later writes); so writing one twice is harmless. Returns the marker's offset."""
        template, payload = batch_encoding.encode_marker(self.schema, self.clock, producer_id, producer_epoch,
                                                         commit, leader_epoch)
        self._load_producers_unlocked()
        with self.lock:
            active = self.sync_tail()
            base = self.tail_end()
            self._producer_state(base)  # loaded, so the marker's epoch fences what the producer sends after it
            return self._write_one(template, payload, base, active)

    @property
    def transactions(self) -> TransactionState:
        """The partition's open and aborted transactions, rebuilt on first use from the segments' transaction
        indexes and the frame headers past them (txn_index)."""
        return self._txns or self._load_transactions()

    def _load_transactions(self) -> TransactionState:
        with self.lock:
            if self._txns is None:
                self.sync_tail()
                end = self.tail_end()
                self._txns = txn_index.rebuild(self.name, self.segments(), end)
            return self._txns

    def last_stable_offset(self, end: int) -> int:
        """Where read_committed readers stop: the first offset of the oldest open transaction, at most `end`."""
        return self.transactions.last_stable_offset(end)

    def _producer_state(self, end: int) -> ProducerStateTable:
        """The producer state of the frames below `end`, the log end (lock held): loaded before the lock was
        taken (load_producer_state), else rebuilt here (producer_state_load.rebuild: from its snapshot and the
        frames after it, or from the headers of the last PRODUCER_STATE_SEGMENTS segments; a producer silent for
        longer is unknown: its next batch is refused with UnknownProducerIdError and the producer takes a new
        id)."""
        if self._producers is None:
            self._producers = producer_state_load.rebuild(self, self.segments(), end)
        return self._producers

    @writes
    def load_producer_state(self) -> bool:
        """Load the producer state if it is not loaded, reading the segments without holding the partition lock
        (producer_state_load), so appends and a follower's copies go on meanwhile; True once it is loaded (False:
        the log changed under the scan, and the next idempotent append builds it under the lock). A data node's
        follower loads it as it copies, so that it has it at hand if it is elected leader."""
        with self._producer_scan:
            return self._producers is not None or producer_state_load.Scan(self).read().install()

    def _load_producers_unlocked(self) -> None:
        """Before an idempotent append or a marker takes the lock: load the producer state if it is not loaded,
        unless the lock is held already or the append may not wait (an embedded producer's, made in place on
        the caller's thread, which must not queue behind another load): those build it under the lock."""
        if self._producers is None and not self.lock.held and may_wait():
            self.load_producer_state()

    @property
    def producer_state_loaded(self) -> bool:
        """Whether this process holds the partition's producer state (else the next idempotent append loads it)."""
        return self._producers is not None

    def take_producer_state(self, table: ProducerStateTable) -> None:
        """Make `table`, up to date with the log end, the partition's producer state (lock held)."""
        self._producers = table

    def expire_producers(self, expiration_ms: int) -> int:
        """Forget the idempotent producers that wrote nothing here for `expiration_ms` (producer.id.expiration.ms),
        except those with a transaction open here (see producer_state); how many. Nothing to do (no lock taken)
        where no idempotent producer wrote since the log was opened: the state is built on first use."""
        if self._producers is None:
            return 0
        with self.lock:
            table = self._producers
            if table is None:
                return 0
            return table.expire(self.clock.monotonic_ms(), expiration_ms,
                                lambda: self.transactions.open_transactions())

    def producers(self) -> list[tuple[int, ProducerEntry]]:
        """Every idempotent producer's state here, (producer id, entry) in the order of their last writes (Kafka's
        DescribeProducers reads it): loaded first where it was not, as an idempotent append loads it."""
        self._load_producers_unlocked()
        with self.lock:
            self.sync_tail()
            return self._producer_state(self.tail_end()).entries()

    @property
    def producer_ids(self) -> int:
        """How many idempotent producers' state this process holds for the partition (Kafka's ProducerIdCount)."""
        table = self._producers
        return 0 if table is None else len(table)

    def _recover_on_failure(self) -> _ForgetTailOnFailure:
        """A write that fails part-way (a frame written, its watermark not) drops the cached tail and epochs, so
        the next use recovers them from the files instead of writing a second frame at the same offset."""
        return _ForgetTailOnFailure(self)

    @writes
    def append_frames(self, data: pa.Buffer | bytes) -> int:
        """Append frames a follower copied from its leader, byte for byte (CRCs kept): each is checked (see
        replica_frames) before any is written, so a bad batch (InvalidFramesError; UnexpectedOffsetError if it
        does not start at the log end) writes nothing. They roll segments and are indexed as appends are, and
        their leader epochs go to the leader-epoch cache first. Returns the new log end offset."""
        buf = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
        with self.lock:
            active = self.sync_tail()
            end = self.tail_end()
            epochs = self.leader_epochs
            frames = check_copied(buf, end, epochs.latest_epoch, self.name)
            if not frames:
                return end
            with self._recover_on_failure():
                for header, _ in frames:
                    if header.leader_epoch >= 0:
                        epochs.assign(header.leader_epoch, header.base_offset)
                for header, payload in frames:
                    active = self.write_frame(header, payload, active)
                end = frames[-1][0].next_offset
                self.commit(end)
                for header, _ in frames:
                    self._took(header)
            self._snapshot_once_per_segment(frames[-1][0])
        return end

    @writes
    def truncate_to(self, offset: int) -> bool:
        """Remove every frame at and past `offset` (a follower whose tail diverged from its leader's, see
        truncation): the log becomes what a replica that copied only the frames below `offset` holds (later
        segments deleted, the last kept one cut with its indexes, the leader epochs from `offset` on
        forgotten). Logged at WARNING. False (nothing done) if `offset` is at or past the log end;
        OffsetOutOfRangeError below the log start and InvalidArgumentError inside a frame, with nothing changed."""
        with self.lock:
            self.sync_tail()
            end = self.tail_end()
            if offset >= end:
                return False
            self.forget_recent()
            self._tail_state = None  # (readers go to the files until the cut is done: see end_offset)
            active = truncation.truncate(self, offset, end)
            self.drop_states()
            self.remember_tail(active, offset)
        return True

    @writes
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Kafka's truncateFullyAndStartAt: remove every frame and start the log, empty, at `offset` (a follower
        whose log ends below its leader's log start; see truncation.truncate_fully)."""
        with self.lock:
            self.sync_tail()
            self._tail_state = None  # (readers go to the files until the cut is done: see end_offset)
            active = truncation.truncate_fully(self, offset)
            self.drop_states()
            self.remember_tail(active, offset)

    def flush(self) -> None:
        """fsync the partition's writes now (FlushPolicy.flush)."""
        self.flushes.flush()

    # -- publishes ---------------------------------------------------------------------------------
    def pending(self) -> PendingPublish | None:
        """The pending-publish marker a publish left here, if any (read without the lock it is a hint; recovery
        under the lock decides, and reports and removes one that cannot be read: None here)."""
        try:
            return read_marker(self.directory)
        except UnreadableMarkerError:
            return None

    @writes
    def begin_publish(self, txn: str, end_offset: int) -> None:
        """Mark that frames of transaction `txn` up to `end_offset` are being written (lock held)."""
        write_marker(self.directory, PendingPublish(txn, end_offset, self.end_offset))

    @writes
    def adopt_segment(self, path: str, frames: list[tuple[FrameHeader, pa.Buffer]], base_offset: int) -> bool:
        """Make the staged file `path` the new active segment at `base_offset` instead of copying it (lock held,
        under a pending-publish marker); False if it cannot be adopted (copy its frames then). See adopt."""
        return adopt.adopt_segment(self, path, frames, base_offset)

    def forget_before(self, offset: int) -> None:
        """Drop the loaded leader epochs and aborted transactions that end below `offset`, the new log start
        (lock held)."""
        if self._epochs is not None:
            self._epochs.truncate_from_start(offset)
        if self._txns is not None:
            self._txns.forget_before(offset)

    @writes
    def finish_publish(self, end_offset: int) -> None:
        """Make a committed transaction's frames visible and drop its marker (lock held)."""
        self.commit(end_offset)
        remove_marker(self.directory)

    # -- retention, DeleteRecords and cleaning (fabric.storage.log_retention, fabric.storage.cleaner) ----------
    @writes
    def enforce_retention(self) -> int:
        """Delete whole old segments past retention.ms / retention.bytes, and those below the log start offset;
        returns how many (LogRetention.enforce)."""
        return self.retention.enforce()

    @writes
    def delete_records(self, before_offset: int, crash: CrashHook | None = None,
                       high_watermark: int | None = None) -> int:
        """Kafka's DeleteRecords: move the log start offset up to `before_offset` (-1: the high watermark), so the
        records below it are gone for readers at once, then delete the whole segments below it (rolling the
        active segment first if every record goes). Returns the log start offset now (the low watermark; the
        same as before if it was already at or past `before_offset`). OffsetOutOfRangeError, nothing changed,
        past the high watermark. The checkpoint is written (durably) before any segment is deleted: see
        log_start. `crash` is a test hook called once the checkpoint is written ("checkpointed") and after each
        segment deleted ("deleted"). A leader's replica log gives its replication `high_watermark`, which bounds
        the offset as the log end bounds an embedded log's."""
        return self.retention.delete_records(before_offset, crash, high_watermark)

    @writes
    def roll(self) -> bool:
        """Close the active segment if it holds records, so the cleaner may compact them (a new, empty active
        segment starts at the log end). True if it rolled."""
        with self.lock:
            active = self.sync_tail()
            if active.first_frame() is None:
                return False
            end = self.tail_end()
            self.remember_tail(self.create_segment(end), end)
        return True

    @writes
    def clean(self, force: bool = False, crash: CrashHook | None = None) -> CleanReport:
        """One log-cleaner pass (fabric.storage.cleaner): compact the closed segments if due, or (`force`,
        `fabric topics compact`) roll the active segment and compact everything cleanable. `crash` is a test hook
        called at each swap step."""
        cleaner = LogCleaner(self, self.clock.now_ms(), crash) if crash else LogCleaner(self, self.clock.now_ms())
        return cleaner.run(force)

    def maintain(self) -> tuple[int, CleanReport]:
        """What the background maintenance does to a partition (LogRetention.maintain): retention, a roll of an
        old active segment, then a cleaner pass if one is due; segments deleted and the pass's report."""
        return self.retention.maintain()

    # -- reads -------------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, end_offset: int | None = None,
             isolation: str = reader.READ_COMMITTED) -> Iterator[Fetched]:
        """Committed batches from `offset`, up to about `max_bytes` of frames (at least one batch) and below
        `end_offset` (default: the watermark). Transaction markers are never returned, nor (`isolation`
        read_committed) the records of aborted transactions: the caller bounds a read_committed read by
        last_stable_offset. Damaged records raise CorruptRecordError (a CorruptRangeError naming them) when the
        read reaches them."""
        return reader.read(self, offset, max_bytes, end_offset, isolation)

    def fetch(self, offset: int, max_bytes: int, end_offset: int | None = None,
              isolation: str = reader.READ_COMMITTED, within: reader.LogRange | None = None) -> list[Fetched]:
        """read() as a list: the batches before damaged records are returned, and the error raised only when
        the first batch asked for is damaged (the next fetch, from the damaged offset, raises it). `within`: the
        log_range the caller looked at in this request (not read again)."""
        return reader.fetch(self, offset, max_bytes, end_offset, isolation, within)

    def offset_after_records(self, offset: int, count: int, end_offset: int | None = None,
                             isolation: str = reader.READ_COMMITTED) -> int:
        """The offset after the first `count` records a reader gets from `offset` (with `isolation`), below
        `end_offset` (default: the watermark), or that end if there are fewer: what a batch of `count` real
        records spans, across compaction's gaps, markers and (read_committed) aborted records. Counted from the
        frame headers (the offset index finds the first), never reading their values. OffsetOutOfRangeError if
        `offset` is outside the log."""
        return reader.offset_after_records(self, offset, count, end_offset, isolation)

    def wait_for_records(self, offset: int, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the end offset to pass `offset` (a long-polling reader at the end): woken by
        this process's appends at once, and by other processes' within reader.FOREIGN_APPEND_POLL_S. True if it did."""
        return reader.wait_for_records(self, offset, timeout_s)

    def read_frames(self, offset: int, max_bytes: int, end_offset: int | None = None,
                    within: reader.LogRange | None = None) -> pa.Buffer:
        """The raw bytes of whole, CRC-checked frames from the one holding `offset`, starting below `end_offset`
        (default: the log end), from one segment, about `max_bytes` (at least one frame): what a leader serves a
        follower, which appends them with append_frames. Empty at the end; CorruptRecordError if the first frame
        is damaged (the frames before damage are returned first). `within`: the log_range the caller read in this
        request (the files are not looked at again). A node's log answers from the frames it wrote last where
        they hold `offset` (`recent`: the same bytes, not read back)."""
        return reader.read_frames(self, offset, max_bytes, end_offset, within)

    def offset_for_time(self, timestamp_us: int) -> int | None:
        """The earliest committed offset whose timestamp is >= timestamp_us, or None."""
        return reader.offset_for_time(self, timestamp_us)


class _ForgetTailOnFailure:
    """Log._recover_on_failure's context: on an exception, the log forgets its cached tail (and lets it go on).
    A class, not a generator context manager: it is on every append's path, at a tenth of that one's cost."""

    __slots__ = ("log",)

    def __init__(self, log: Log) -> None:
        self.log = log

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:
            self.log.forget_tail()
