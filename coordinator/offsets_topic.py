"""Group offsets as keyed records in a compacted internal topic, `__consumer_offsets` (Kafka 0.8.2's native
offset storage), with the latest of each in memory. Where the records are kept is an OffsetsLog: a local
directory (coordinator.offsets_log, shared by the processes that open it) or, on a cluster, replicated
partitions on the data nodes (fabric.server.replicated_offsets, injected by the coordinator service).

A commit appends one batch: a record per (group, topic, partition) (coordinator.offsets_records), whose value is
the next offset to read, the commit's metadata and its time. Deleting a group appends a tombstone (a null value)
per key. The topic has OFFSETS_PARTITIONS partitions, a group's offsets all in partition crc32(group) mod that
count, so one group's commit is one append.

The cache: each partition's latest offsets by group. Over a shared log it is read from the log on first use and
brought up to date before every answer (other processes append to the same logs), past damaged records (their
commits are lost, logged: coordinator.offsets_damage). Over a log this instance owns
(`shared` False: the replicated topic, written only by the active coordinator instance) it is the truth while
the instance is active: it is loaded from the log when the instance takes the leadership, and until then the
offsets are not served (CoordinatorUnavailableError, retriable: Kafka's COORDINATOR_LOAD_IN_PROGRESS; the
offsets that committed producer transactions left pending are applied before they are; an instance
that never took it, or resigned, answers NotControllerError, so clients go to the active one). A commit checks
the member's generation (`validate`) and appends under the partition's write lock, so a commit checked against a
generation is never written after a newer commit of the same partition.

Ownership is per partition: `take_leadership(epoch, partitions)` loads the partitions an instance takes (every one,
for the active instance today) and `resign(partitions)` stops serving them; a partition's offsets and groups are
served only where it was taken.

Fencing: an instance that takes partitions first stamps its epoch on each, and its appends carry it; the log
refuses appends of an older epoch to that partition (CoordinatorUnavailableError: a deposed owner's late commit).

Group states: over an owned log they are kept in the topic too (coordinator.topic_group_store, the topic's
`companion`, loaded with it and appending through `append`); over a shared log they stay in the store's own group
store.

Migration: the first time the topic is opened over a store that kept offsets itself (SQLite's `offsets` table,
ZooKeeper's znodes, or on a cluster the local offsets topic), those are appended first, once (the log records
that it is done). The old copies are left where they were, unread.
"""
from __future__ import annotations

import enum
import functools
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Collection, ContextManager, Iterable, Iterator, Protocol, Sequence, cast

import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.errors import (
    CoordinatorUnavailableError,
    GroupIdNotFoundError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InvalidConfigError,
)
from fabric.common.types import CommittedOffset, TopicPartition, TransactionalOffsets
from fabric.coordinator import commit_batch, validation
from fabric.coordinator.commit_batch import Queued
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.group_store import GroupService, GroupStore
from fabric.coordinator.offsets_damage import SkippingReader
from fabric.coordinator.offsets_log import LocalOffsetsLog, OffsetsPart
from fabric.coordinator.offsets_records import (
    OFFSETS_TOPIC,
    SEGMENT_BYTES,
    Row,
    batch,
    encoded,
    key_parts,
    offset_key,
    offset_rows,
    offsets_partition,
)
from fabric.coordinator.unstable_offsets import UnstableGroups
from fabric.storage.batch_encoding import Encoded

log = logging.getLogger(__name__)
LegacyOffsets = Callable[[], Iterable[tuple[str, TopicPartition, CommittedOffset]]]
# a committed transaction's offsets, whether its record still holds them, and what clears them (OffsetsTopic.
# apply_transaction); what rolls forward the pending ones with it (coordinator.transaction_offsets)
ApplyTransaction = Callable[[TransactionalOffsets, Callable[[], bool], Callable[[], None]], None]
RollForward = Callable[[ApplyTransaction, Sequence[int]], None]  # applies those of the groups in these partitions


class _Settled(Exception):
    """A transaction's offsets were applied by someone else meanwhile: nothing to append."""


class OffsetsLog(Protocol):
    """Where the offsets topic's records are kept: `partitions` partitions, each appended to under a write lock.
    `shared`: other processes append too (readers catch up before every answer), else only this instance does
    while it is active."""

    partitions: int
    shared: bool

    def read(self, partition: int, start: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(offset, batch) of what the partition holds from `start` to its end (its high watermark) now."""

    def append(self, partition: int, rows: Encoded, validate: Callable[[], None],
               written: Callable[[int], None]) -> None:
        """validate(), append `rows` (acknowledged as the log's durability says) and written(their offset), all
        under the partition's write lock; CoordinatorUnavailableError if the append was fenced or failed."""

    def write_queued(self, partition: int, queued: list[Queued]) -> None:
        """On a server's event loop: append the rows of the commits `queued` (coordinator.commit_batch) in order,
        as `append` would, settling each caller's `done` once written (now, or later without blocking the loop)."""

    def take_leadership(self, epoch: int, partitions: Sequence[int]) -> None:
        """Stamp `epoch` on each of `partitions`, so appends of older epochs to them are refused."""

    def migrating(self, what: str = "offsets") -> ContextManager[bool]:
        """Whether an earlier store's `what` ("offsets", or offsets_records.GROUPS: its group states) are still to
        be moved in; done once the block ends without error."""

    def demand(self) -> None:
        """A group request is waiting for a partition this instance loads: what the log creates on first need
        (a cluster's replicated topic) may be created now."""

    def exists(self) -> bool:
        """Whether the partitions exist (False: a cluster's replicated topic not created yet, which holds no
        offsets)."""


class Companion(Protocol):
    """State kept in an owned offsets topic beside the offsets (coordinator.topic_group_store: the group states),
    rebuilt from the records of the partitions this instance loads, each time it loads them."""

    def loading(self) -> None:
        """A load begins: forget what an earlier one gathered."""

    def apply(self, records: pa.RecordBatch) -> None:
        """Records the load read (each partition's in order)."""

    def loaded(self, partitions: Sequence[int]) -> None:
        """`partitions` were read and the offsets migrated: what the companion kept of their groups is replaced by
        what the load read; they are served once this returns."""


class Serving(str, enum.Enum):
    """Whether the offsets are served: always over a shared log; over an owned one once loaded."""

    IDLE = "idle"  # not the owner (never took the leadership, or resigned)
    LOADING = "loading"  # took it; reading the partitions
    READY = "ready"


@dataclass
class _Cache:
    """What one partition's records say so far: every group's latest offsets, read up to `position`."""

    position: int = 0
    groups: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def apply(self, offset: int, records: pa.RecordBatch) -> None:
        """The records read from the log at `offset`."""
        self.apply_rows(offset, list(zip(records.column(1).to_pylist(), records.column(3).to_pylist(), strict=True)))

    def apply_rows(self, offset: int, rows: Sequence[Row]) -> None:
        """The rows appended at `offset`, as they were built (this process's own commit: not read back)."""
        for key, value in rows:
            parts = key_parts(key)
            if parts[0] != "offset":  # a group's metadata, a leadership or a migration record
                continue
            _, group, topic, partition = parts
            if value is None:
                offsets = self.groups.get(group, {})
                offsets.pop((topic, partition), None)
                if not offsets:
                    self.groups.pop(group, None)
            else:
                self.groups.setdefault(group, {})[(topic, partition)] = CommittedOffset(
                    cast(int, value["next_offset"]), cast(str, value["metadata"]), cast(int, value["commit_ms"]))
        self.position = offset + len(rows)

    def skip(self, offset: int) -> None:
        """The records before `offset` could not be read (damaged: coordinator.offsets_damage): read on from it."""
        self.position = max(self.position, offset)


class OffsetsTopic:
    """The offsets topic over `log`; `legacy` gives the offsets an earlier store kept, to migrate (at once over a
    shared log, else when the instance takes the leadership); `roll_forward` applies the offsets committed
    transactions left pending, when an owned log is loaded (coordinator.transaction_offsets)."""

    def __init__(self, log: OffsetsLog, legacy: LegacyOffsets | None = None, clock: Clock = SYSTEM_CLOCK,
                 roll_forward: RollForward | None = None) -> None:
        self.log, self.clock, self._legacy, self._roll_forward = log, clock, legacy, roll_forward
        self.partitions = log.partitions
        self._caches = [_Cache() for _ in range(self.partitions)]
        self._reader = SkippingReader(log.read)  # the log's records, past damaged ones
        # each partition's: over an owned log, only those this instance took are served
        self._serving = [Serving.READY if log.shared else Serving.IDLE] * self.partitions
        self._load_failure = ""  # why the last take_leadership of an owned log failed
        self.companion: Companion | None = None  # loaded with an owned log (set by its owner)
        self.unstable = UnstableGroups()  # groups a producer transaction is committing offsets of
        if legacy is not None and log.shared:
            self._migrate(legacy)

    @classmethod
    def in_directory(cls, directory: str, epoch: Callable[[], int] | None = None,
                     legacy: LegacyOffsets | None = None, clock: Clock = SYSTEM_CLOCK,
                     segment_bytes: int = SEGMENT_BYTES,
                     resolve_pending: Callable[[str], bool] | None = None) -> OffsetsTopic:
        """The offsets topic in a local `directory` (coordinator.offsets_log), its appends stamped with `epoch`;
        `resolve_pending` says whether a publish's transaction committed (LocalOffsetsLog)."""
        return cls(LocalOffsetsLog(directory, epoch, clock, segment_bytes, resolve_pending), legacy, clock)

    # -- reads -------------------------------------------------------------------------------------------
    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        """`group`'s latest committed offsets (of `topics` only, if given), once no producer transaction is
        committing them (coordinator.unstable_offsets)."""
        cache = self._caught_up(offsets_partition(group, self.partitions))
        self.unstable.wait_stable(group)
        with cache.lock:
            found = dict(cache.groups.get(group, {}))
        return {tp: c for tp, c in found.items() if topics is None or tp[0] in topics}

    def groups(self) -> list[str]:
        """Every group with committed offsets in the partitions this instance serves (`served`)."""
        out: set[str] = set()
        for p in self.served():
            cache = self._caught_up(p)
            with cache.lock:
                out.update(cache.groups)
        return sorted(out)

    def served(self) -> list[int]:
        """The partitions this instance serves now (over a shared log, every one); raises as check_serving does
        while one it took is loading, or if it serves none."""
        if Serving.LOADING in self._serving:
            self.check_serving(self._serving.index(Serving.LOADING))
        served = [p for p, state in enumerate(self._serving) if state is Serving.READY]
        if not served:
            self.check_serving(0)
        return served

    def check_serving(self, partition: int) -> None:
        """Raise unless this instance serves the partition's offsets now: NotControllerError where it does not
        own it, retriable CoordinatorUnavailableError while it loads."""
        state = self._serving[partition]
        if state is Serving.IDLE:
            raise NotControllerError(f"this coordinator instance does not serve {OFFSETS_TOPIC}-{partition} (it is "
                                     "not the active instance, or another instance serves that partition); retry at "
                                     "the instance that does")
        if state is Serving.LOADING:
            self.log.demand()
            raise CoordinatorUnavailableError(
                f"the group offsets are loading from the {OFFSETS_TOPIC} topic (partition {partition}, which this "
                "instance just took"
                f"{'; last attempt: ' + self._load_failure if self._load_failure else ''}); retry shortly")

    def _caught_up(self, partition: int) -> _Cache:
        """The partition's cache; over a shared log, after reading what was appended since it last looked."""
        self.check_serving(partition)
        cache = self._caches[partition]
        if self.log.shared:
            with cache.lock:
                for offset, records in self._reader.read(partition, cache.position, cache.skip):
                    cache.apply(offset, records)
        return cache

    # -- writes ------------------------------------------------------------------------------------------
    def commit(self, group: str, offsets: dict[TopicPartition, int], metadata: str,
               validate: Callable[[], None] = lambda: None) -> None:
        """Append the commit as one batch, `validate()` (the generation check) first, both under the
        partition's write lock; returns once the log acknowledged it. Where a server is collecting its loop's
        commits (coordinator.commit_batch), the rows are queued there instead, and written with the others."""
        partition = offsets_partition(group, self.partitions)
        self.check_serving(partition)
        rows = offset_rows(group, offsets, metadata, self.clock.now_ms())
        records, written = self._prepared(partition, rows, lambda: None)
        if not commit_batch.queue((id(self), partition), functools.partial(self.log.write_queued, partition), records,
                                  validate, written):
            self.log.append(partition, records, validate, written)

    def apply_transaction(self, offsets: TransactionalOffsets, pending: Callable[[], bool],
                          applied: Callable[[], None]) -> None:
        """Append a committed transaction's `offsets` if its record still holds them (`pending()`), then
        `applied()` (which clears them), all under the partition's write lock: no commit of the group comes
        between, and a second applier finds them cleared and appends nothing."""
        self.check_serving(offsets_partition(offsets.group, self.partitions))
        self._apply(offsets, pending, applied)

    def _apply(self, offsets: TransactionalOffsets, pending: Callable[[], bool], applied: Callable[[], None]
               ) -> None:
        failures: list[Exception] = []

        def validate() -> None:
            if not pending():
                raise _Settled()

        def clear() -> None:
            """applied(), its error kept for this caller: an append may carry other commits' rows, whose callers
            must still be told (and cached) once it is written."""
            try:
                applied()
            except Exception as exc:  # noqa: BLE001 (raised below, in this caller's thread)
                failures.append(exc)
        rows = offset_rows(offsets.group, offsets.offsets, offsets.metadata, self.clock.now_ms())
        try:
            self.append(offsets_partition(offsets.group, self.partitions), rows, validate, clear)
        except _Settled:
            return
        if failures:  # written, but still pending in the record: a retry of the commit applies them again
            raise failures[0]

    def publish_part(self, group: str, offsets: dict[TopicPartition, int], metadata: str | dict[TopicPartition, str]
                     ) -> OffsetsPart:
        """The commit as a partition of a producer transaction's publish (OffsetsPart); InvalidConfigError when
        the topic is not kept in a local directory (a cluster's replicated one), which a publish cannot write."""
        self.check_serving(offsets_partition(group, self.partitions))
        if not isinstance(self.log, LocalOffsetsLog):
            raise InvalidConfigError(
                f"offsets in a producer transaction need {OFFSETS_TOPIC} in the coordinator's directory "
                "(file:// or a coordinator service without data nodes); this one keeps it replicated on data nodes: "
                "commit the offsets with the consumer after commit_transaction() instead")
        rows = offset_rows(group, offsets, metadata, self.clock.now_ms())
        partition, local = offsets_partition(group, self.partitions), self.log
        return OffsetsPart(partition, self.partitions, local.log, batch(rows, self.clock.now_us()),
                           lambda: local.check_epoch(partition))

    def newest_commits(self) -> dict[str, int]:
        """Each group's newest commit time (ms) in the partitions this instance serves now (none while it serves
        none)."""
        newest: dict[str, int] = {}
        for p in (p for p, state in enumerate(self._serving) if state is Serving.READY):
            cache = self._caught_up(p)
            with cache.lock:
                newest.update((g, max(c.commit_ms for c in offsets.values())) for g, offsets in cache.groups.items())
        return newest

    def settled(self) -> bool:
        """Whether this instance serves some partitions and loads none now."""
        return Serving.LOADING not in self._serving and Serving.READY in self._serving

    def serves_group(self, group: str) -> bool:
        """Whether this instance serves the group's offsets partition now."""
        return self._serving[offsets_partition(group, self.partitions)] is Serving.READY

    def expire_offsets(self, group: str, cutoff_ms: int, keep: Collection[str] = ()) -> list[TopicPartition]:
        """Append a tombstone for each of `group`'s offsets committed at or before `cutoff_ms`, but those of the
        topics in `keep`, checked again under the partition's write lock (if one of them was committed again
        meanwhile, none is: the next pass looks again); the partitions whose offsets went
        (offsets.retention.minutes)."""
        partition = offsets_partition(group, self.partitions)
        expiring = {tp: c for tp, c in self.committed(group).items() if tp[0] not in keep and c.commit_ms <= cutoff_ms}
        if not expiring:
            return []

        def validate() -> None:
            cache = self._caught_up(partition)
            with cache.lock:
                now = cache.groups.get(group, {})
                if any(now.get(tp) != c for tp, c in expiring.items()):
                    raise _Settled()
        try:
            self.append(partition, [(offset_key(group, tp), None) for tp in sorted(expiring)], validate)
        except _Settled:
            return []
        return sorted(expiring)

    def delete_offsets(self, group: str, partitions: Iterable[TopicPartition],
                       validate: Callable[[], None] = lambda: None) -> list[TopicPartition]:
        """Append a tombstone for each of `partitions` that `group` has committed, validate() first under the
        partition's write lock; those partitions, sorted."""
        gone = sorted(set(self.committed(group)).intersection(partitions))
        if gone:
            self.append(offsets_partition(group, self.partitions), [(offset_key(group, tp), None) for tp in gone],
                        validate)
        return gone

    def forget_topic(self, topic: str) -> None:
        """Append a tombstone for every group's offsets in `topic` (the topic was deleted) in the partitions this
        instance serves (logged, once, for those it is loading: the offsets stay there; not while the topic does
        not exist, as it holds none)."""
        loading = [p for p in range(self.partitions) if self._serving[p] is Serving.LOADING]
        if loading and self.log.exists():
            log.warning("the committed offsets of deleted topic %s stay in %s partitions %s: they are loading on this "
                        "instance", topic, OFFSETS_TOPIC, ", ".join(map(str, loading)))
        for p in range(self.partitions):
            if self._serving[p] is not Serving.READY:
                continue
            cache = self._caught_up(p)
            with cache.lock:
                keys = [offset_key(g, tp) for g, offsets in cache.groups.items() for tp in offsets if tp[0] == topic]
            if keys:
                self.append(p, [(k, None) for k in sorted(keys)])

    def append(self, partition: int, rows: Sequence[Row], validate: Callable[[], None] = lambda: None,
               then: Callable[[], None] = lambda: None) -> None:
        """Append `rows` under the partition's write lock, validate() before and then() once it is written."""
        records, written = self._prepared(partition, rows, then)
        self.log.append(partition, records, validate, written)

    def _prepared(self, partition: int, rows: Sequence[Row], then: Callable[[], None]
                  ) -> tuple[Encoded, Callable[[int], None]]:
        """The stored records of `rows` (encoded: what the log writes), and what to do once they are written at
        an offset: the cache takes them at once if it has read everything before them (always, over an owned
        log; over a shared one, unless another process appended since: it then reads them back with those), then
        then()."""
        records = encoded(rows, self.clock.now_us())

        def written(offset: int) -> None:
            cache = self._caches[partition]
            with cache.lock:
                if not self.log.shared or cache.position == offset:
                    cache.apply_rows(offset, rows)
            then()
        return records, written

    def take_leadership(self, epoch: int, partitions: Sequence[int] | None = None) -> None:
        """This instance owns `partitions` (None: every one) under `epoch`: stamp it on them (a deposed owner's
        appends to them are refused from here on); over an owned log they are then loaded (and the topic migrated
        into, once) before their offsets are served again. On an error they stay unserved (loading, the error
        said) until a retry succeeds."""
        taken = sorted(set(range(self.partitions) if partitions is None else partitions))
        if self.log.shared:
            self.log.take_leadership(epoch, taken)
            return
        for p in taken:
            self._serving[p] = Serving.LOADING
        try:
            self.log.take_leadership(epoch, taken)
            if self.companion is not None:
                self.companion.loading()
            for p in taken:
                cache = _Cache()
                for offset, records in self._reader.read(p, 0, cache.skip):
                    cache.apply(offset, records)
                    if self.companion is not None:
                        self.companion.apply(records)
                self._caches[p] = cache
            if self._legacy is not None and len(taken) == self.partitions:  # (it appends to every partition)
                self._migrate(self._legacy)
            if self.companion is not None:
                self.companion.loaded(taken)
            if self._roll_forward is not None:
                self._roll_forward(self._apply, taken)
        except Exception as exc:
            self._load_failure = str(exc)
            raise
        for p in taken:
            self._serving[p] = Serving.READY
        self._load_failure = ""
        log.info("group offsets loaded from %s (epoch %d, %d partition(s)): %d group(s)", OFFSETS_TOPIC, epoch,
                 len(taken), sum(len(self._caches[p].groups) for p in taken))

    def resign(self, partitions: Sequence[int] | None = None) -> None:
        """This instance no longer owns `partitions` (None: any): an owned log's offsets in them are not served
        any more."""
        if not self.log.shared:
            for p in range(self.partitions) if partitions is None else partitions:
                self._serving[p] = Serving.IDLE

    # -- migration -----------------------------------------------------------------------------------------
    def _migrate(self, legacy: LegacyOffsets) -> None:
        """Append the offsets an earlier store kept, once."""
        with self.log.migrating() as pending:
            if not pending:
                return
            by_group: dict[str, list[tuple[TopicPartition, CommittedOffset]]] = {}
            for group, tp, committed in legacy():
                by_group.setdefault(group, []).append((tp, committed))
            for group, items in sorted(by_group.items()):
                self.append(offsets_partition(group, self.partitions), [
                    (offset_key(group, tp), {"next_offset": c.offset, "metadata": c.metadata,
                                             "commit_ms": c.commit_ms}) for tp, c in sorted(items)])
            if by_group:
                log.warning("group offsets: %d group(s) moved to the %s topic (the old copies are no longer read)",
                            len(by_group), OFFSETS_TOPIC)


@dataclass(frozen=True)
class Expired:
    """What a pass of offsets retention forgot: whole groups, and partitions of groups that live on."""

    groups: list[str]
    partitions: dict[str, list[TopicPartition]]


class TopicOffsets:
    """The offset methods of the Coordinator interface over an OffsetsTopic (`self._offsets`), for a store whose
    GroupService (`self._groups`) checks a commit's generation and knows the live groups."""

    _offsets: OffsetsTopic
    _groups: GroupService

    @property
    def offsets_topic(self) -> OffsetsTopic:
        return self._offsets

    def use_offsets_topic(self, topic: OffsetsTopic) -> None:
        """Keep the offsets in `topic` from now on (a cluster's coordinator instance: the replicated one)."""
        self._offsets = topic

    @property
    def group_store(self) -> GroupStore:
        return self._groups.store

    def use_group_store(self, store: GroupStore) -> None:
        """Keep the group states in `store` from now on (a cluster's coordinator instance: the replicated offsets
        topic, coordinator.topic_group_store)."""
        self._groups.store = store

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        validation.offsets(group, offsets, metadata)
        self._offsets.commit(group, dict(offsets), metadata,
                             lambda: self._groups.validate_commit(group, member_id, generation))

    def transactional_offsets(self, group: str, offsets: dict[TopicPartition, int],
                              metadata: str | dict[TopicPartition, str] = "") -> OffsetsPart:
        validation.offsets(group, offsets, metadata)
        return self._offsets.publish_part(group, dict(offsets), metadata)

    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        return self._offsets.committed(group, topics)

    def _has_offsets(self, group: str) -> bool:
        return bool(self._offsets.committed(group))

    def list_groups(self) -> list[str]:
        return sorted(set(self._offsets.groups()) | set(self._groups.live_groups()))

    def delete_group(self, group: str) -> None:
        """Forget a group's offsets and state; GroupNotEmptyError while it has live members."""
        self._groups.delete_group(group)
        self._offsets.delete_offsets(group, self._offsets.committed(group))

    def delete_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        """Kafka's OffsetDelete (KIP-496), refused for the topics a live member subscribes to, which the check
        under the offsets partition's write lock sees too (a member joining meanwhile)."""
        named = validation.group_partitions(group, partitions)
        if group not in self.list_groups():
            raise GroupIdNotFoundError(f"consumer group {group!r} does not exist (no committed offsets and no live "
                                       "members); `fabric groups list` or list_groups() names the groups")

        def unsubscribed() -> None:
            since, subscribed = self._groups.liveness(group, self._offsets.clock.now_ms())
            held = sorted(subscribed.intersection(t for t, _ in named)) if since is None else []
            if held:
                raise GroupSubscribedToTopicError(
                    f"group {group!r} has live members subscribed to {', '.join(map(repr, held))}: they would "
                    "commit those offsets again; stop its consumers (or subscribe them elsewhere) first. Nothing "
                    "was deleted")
        unsubscribed()
        return self._offsets.delete_offsets(group, named, unsubscribed)

    def expire_groups(self, retention_ms: int) -> Expired:
        """Kafka's offsets.retention.minutes: forget the offsets and the state of each group served here that has
        had no live member, and no commit, for `retention_ms` (KIP-211), and, in a group with live members, the
        offsets committed that long ago of topics none of them subscribes to any more (KIP-496). A group whose
        member joins, or that commits, meanwhile keeps what it has (each step checks again under its lock).
        Nothing while this instance serves no partition, or loads one (the next pass looks)."""
        expired = Expired([], {})
        if not self._offsets.settled():
            return expired
        now = self._offsets.clock.now_ms()
        cutoff = now - retention_ms
        newest = self._offsets.newest_commits()
        stored = [g for g in self._groups.store.list() if g not in newest and self._offsets.serves_group(g)]
        for group in sorted({*newest, *stored}):
            since, subscribed = self._groups.liveness(group, now)
            if since is None:
                if group in newest and (gone := self._offsets.expire_offsets(group, cutoff, keep=subscribed)):
                    expired.partitions[group] = gone
                continue
            if newest.get(group, 0) > cutoff or since > cutoff:
                continue
            try:
                self._groups.delete_group(group)
            except GroupNotEmptyError:
                continue  # a member joined meanwhile
            if group not in newest or self._offsets.expire_offsets(group, cutoff):
                expired.groups.append(group)
        return expired
