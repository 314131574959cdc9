"""The ZooKeeper coordinator store: metadata, offsets, transactions and group states in znodes (zk_layout).

Every change is one ZooKeeper transaction built from fresh reads and committed with compare-and-set on the
znode versions it read; a conflicting concurrent change makes the whole transaction fail, and the change is
re-read and retried (KazooRetry, which also rides out connection loss). With a fence (the instance's
ControllerElection, or a pinned EpochToken) each transaction first checks /controller_epoch, so a deposed
instance's writes are rejected by ZooKeeper itself (FencedError).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Callable, ContextManager, Iterator, Protocol, TypeVar

import pyarrow as pa
from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import WatchedEvent
from kazoo.retry import KazooRetry, RetryFailedError

from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import (
    CoordinatorUnavailableError,
    InvalidRequestError,
    TopicExistsError,
    UnknownTopicError,
)
from fabric.common.types import (
    CommittedOffset,
    LeaderAndIsr,
    PartitionAssignment,
    TopicInfo,
    TopicPartition,
    TransactionRecord,
)
from fabric.coordinator import transactions, validation
from fabric.coordinator import zk_layout as layout
from fabric.coordinator.election import EpochToken, FencedError
from fabric.coordinator.group_store import GroupMembership, GroupService, GroupStore
from fabric.coordinator.groups import GroupState
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.offsets_records import offsets_partition
from fabric.coordinator.offsets_topic import OffsetsTopic
from fabric.coordinator.transaction_offsets import TransactionOffsets
from fabric.coordinator.zk_replicas import ZkReplication
from fabric.coordinator.zk_watched_cache import Watch, ZkWatchedCache

T = TypeVar("T")
log = logging.getLogger(__name__)
_CONFLICTS = (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)
Assignment = Mapping[int, PartitionAssignment]


class Fence(Protocol):
    """Something that fences a transaction: with a controller epoch (ControllerElection or EpochToken, whose
    token the transaction's builder gets), or otherwise (fabric.server.offsets_ownership's ownership of an offsets
    partition: no token). `fenced` is told when the check failed, and may raise the error that says why."""

    def guard(self, txn: TransactionRequest) -> EpochToken | None: ...

    def fenced(self, token: Any) -> None: ...


class _Conflict(Exception):
    """A znode changed between our read and our write: re-read and try again."""


class _ConflictRetry(KazooRetry):
    RETRY_EXCEPTIONS = KazooRetry.RETRY_EXCEPTIONS + (_Conflict,)


class ZkWriter:
    """Builds, fences and commits transactions for one KazooClient (shared by the coordinator and groups)."""

    def __init__(self, client: KazooClient, fence: Fence | None = None, deadline_s: float = 30.0) -> None:
        self.client, self.fence, self.deadline_s = client, fence, deadline_s
        self._instead = threading.local()  # a calling thread's own fence (fenced_by)

    @contextlib.contextmanager
    def fenced_by(self, fence: Fence) -> Iterator[None]:
        """This thread's writes inside the block are fenced by `fence` instead of the writer's own."""
        self._instead.fence = fence
        try:
            yield
        finally:
            self._instead.fence = None

    def commit(self, txn: TransactionRequest, token: EpochToken | None, fence: Fence | None = None) -> bool:
        """Commit; False on a compare-and-set conflict; where `fence` guarded it and its check failed, what
        fence.fenced raises, else FencedError."""
        results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception)
                    and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
        if not failures:
            return True
        if fence is not None and isinstance(results[0], BadVersionError):
            fence.fenced(token)
            who = f"controller epoch {token.epoch} of instance {token.instance_id!r}" if token else "the fence"
            log.warning("write refused: %s is no longer current", who)
            raise FencedError(f"{who} is no longer current: a newer controller was elected; retry against it")
        if isinstance(failures[0], _CONFLICTS):
            return False
        raise failures[0]

    def _attempt(self, build: Callable[[TransactionRequest, EpochToken | None], T]) -> tuple[bool, T]:
        """One fenced transaction: the fence's check, then `build`'s fresh reads and ops; (committed, result)."""
        txn = self.client.transaction()
        fence = getattr(self._instead, "fence", None) or self.fence
        token = fence.guard(txn) if fence is not None else None
        fenced_ops = len(txn.operations)
        result = build(txn, token)
        return len(txn.operations) == fenced_ops or self.commit(txn, token, fence), result

    def _retrying(self, attempt: Callable[[], T], retry: KazooRetry) -> T:
        """Run `attempt` under `retry` (connection loss, and whatever else it retries) until the deadline."""
        try:
            return retry(attempt)
        except RetryFailedError:
            raise CoordinatorUnavailableError(
                f"a ZooKeeper update did not succeed within {self.deadline_s:g} s (connection lost or constant "
                "conflicting updates); check ZooKeeper and retry") from None

    def write(self, build: Callable[[TransactionRequest, EpochToken | None], T]) -> T:
        """Run `build` (fresh reads + ops added to the transaction) and commit, until no conflict."""
        def attempt() -> T:
            committed, result = self._attempt(build)
            if not committed:
                raise _Conflict()
            return result
        return self._retrying(attempt, _ConflictRetry(max_tries=-1, delay=0.005, backoff=1.6, max_delay=0.5,
                                                      deadline=self.deadline_s))

    def write_once(self, build: Callable[[TransactionRequest, EpochToken | None], object]) -> bool:
        """One attempt of `build` (retried only across connection loss): False on a compare-and-set conflict,
        for callers that re-read and decide again themselves."""
        return self._retrying(lambda: self._attempt(build)[0],
                              KazooRetry(max_tries=-1, delay=0.005, backoff=1.6, max_delay=0.5,
                                         deadline=self.deadline_s))

    def get_many(self, paths: list[str]) -> list[tuple[bytes, Any] | None]:
        """(data, stat) of each path, None where it does not exist: all reads in flight at once."""
        pending = [self.client.get_async(p) for p in paths]
        out: list[tuple[bytes, Any] | None] = []
        for result in pending:
            try:
                out.append(result.get())
            except NoNodeError:
                out.append(None)
        return out

    def children(self, path: str) -> list[str]:
        try:
            return self.client.retry(self.client.get_children, path)
        except NoNodeError:
            return []

    def subtree(self, path: str) -> list[str]:
        """`path` and every znode below it, children before parents (the order to delete them); [] if none."""
        if self.client.retry(self.client.exists, path) is None:
            return []
        out: list[str] = []
        for child in self.children(path):
            out.extend(self.subtree(f"{path}/{child}"))
        return out + [path]


def _leader_state(token: EpochToken | None, leader_epoch: int = 0) -> layout.LeaderState:
    if token is None:
        return layout.LeaderState("", leader_epoch, (), 0)
    return layout.LeaderState(token.instance_id, leader_epoch, (token.instance_id,), token.epoch)


class ZkGroupStore(GroupStore):
    """Group states as JSON in /consumers/<group>/state, written by compare-and-set on the znode version.

    A coordinator instance's store (`epoch`: its election epoch) keeps each state it read, or found absent, in
    memory (zk_watched_cache) while the epoch lasts, so a commit's generation check asks ZooKeeper nothing: only
    the active instance serves groups, so what it reads back is its own writes (each forgets what it wrote), and
    anything else's reaches it with the watch; a new epoch (this instance elected again, after others may have
    served the groups) starts afresh, and a stale state cannot outlive the epoch its commits are stamped with. A
    store without an epoch (a process of its own, beside others serving the same groups) reads every time."""

    def __init__(self, writer: ZkWriter, epoch: Callable[[], int] | None = None) -> None:
        self.writer = writer
        self._epoch, self._kept_epoch = epoch, -1
        self._kept: ZkWatchedCache[tuple[GroupState | None, Any]] = ZkWatchedCache(
            writer.client, self._read, layout.group_of_state, "group states")

    def read(self, group: str) -> tuple[GroupState | None, Any]:
        if self._epoch is None:
            return self._read(group, None)
        epoch = self._epoch()
        if epoch != self._kept_epoch:
            self._kept.clear()
            self._kept_epoch = epoch
        return self._kept.get(group)

    def keeps(self, group: str) -> bool:
        """Whether `group`'s state is kept in memory now (read() would ask ZooKeeper nothing)."""
        return self._epoch is not None and self._kept_epoch == self._epoch() and self._kept.holds(group)

    def close(self) -> None:
        self._kept.close()

    def _read(self, group: str, watch: Watch | None) -> tuple[GroupState | None, Any]:
        """The state and its znode version read now, `watch` set on the znode (on its creation if absent)."""
        path, client = layout.group_state(group), self.writer.client
        while True:
            try:
                data, stat = client.retry(client.get, path, watch=watch)
            except NoNodeError:  # (kept: a watch on its creation, which a read of nothing does not set)
                if watch is None or client.retry(client.exists, path, watch=watch) is None:
                    return None, None
                continue  # created in between: read it
            return GroupState.from_json(data.decode()), stat.version

    def write(self, group: str, state: GroupState | None, version: Any) -> bool:
        path = layout.group_state(group)
        if state is None and version is None:
            return True

        def build(txn: TransactionRequest, token: EpochToken | None) -> None:
            if state is None:
                txn.delete(path, version=version)
            elif version is None:
                if self.writer.client.exists(layout.group(group)) is None:
                    txn.create(layout.group(group))
                txn.create(path, state.to_json().encode())
            else:
                txn.set_data(path, state.to_json().encode(), version=version)
        try:
            return self.writer.write_once(build)
        finally:
            self._kept.forget(group)  # read back afresh: written, or changed by someone else

    def list(self) -> list[str]:
        return sorted(layout.name_of(g) for g in self.writer.children(layout.CONSUMERS)
                      if self.writer.client.exists(layout.group_state(layout.name_of(g))) is not None)


class ZkCoordinator(TransactionOffsets, GroupMembership, ZkReplication, Coordinator):
    """The Coordinator interface on ZooKeeper. `target` is a zk:// URL (this object owns the connection) or
    a started KazooClient (e.g. the one the instance's election uses); `fence` guards every write. The
    replicated cluster's nodes, assignments and states: zk_replicas."""

    def __init__(self, target: str | KazooClient, fence: Fence | None = None,
                 session_timeout: float = layout.DEFAULT_SESSION_TIMEOUT_S, offsets_dir: str | None = None,
                 epoch: Callable[[], int] | None = None) -> None:
        self._owned = isinstance(target, str)
        self.client = (layout.connect(target, session_timeout=session_timeout) if isinstance(target, str)
                       else target)
        self.writer = ZkWriter(self.client, fence)
        self._topics = ZkWatchedCache(self.client, self._read_for_cache, layout.topic_of, "topic metadata")
        self._state_cache: ZkWatchedCache[tuple[str, LeaderAndIsr]] = ZkWatchedCache(  # (read in bulk: get_many)
            self.client, None, lambda path: path, "partition states")
        self._group_states = ZkGroupStore(self.writer, epoch)
        self._groups = GroupService(self._group_states, self._partitions_of)
        self._offsets_dir, self._epoch = offsets_dir, epoch
        self._topic_of_offsets: OffsetsTopic | None = None
        # where each offsets partition has an instance of its own (fabric.server.offsets_ownership): the fence of
        # this instance's writes as the owner of one
        self.partition_fence: Callable[[int], Fence] | None = None

    @property
    def _offsets(self) -> OffsetsTopic:  # type: ignore[override]
        return self.offsets_topic

    def _as_owner_of(self, group: str) -> ContextManager[None]:
        if self.partition_fence is None:
            return contextlib.nullcontext()
        return self.writer.fenced_by(self.partition_fence(offsets_partition(group, self._offsets.partitions)))

    def use_offsets_topic(self, topic: OffsetsTopic) -> None:
        self._topic_of_offsets = topic

    @property
    def offsets_topic(self) -> OffsetsTopic:
        """The group offsets, in the offsets topic of the instances' shared data directory (`offsets_dir`),
        stamped with the instance's election epoch (`epoch`); opened, and the znodes migrated, on first use."""
        if self._topic_of_offsets is None:
            if self._offsets_dir is None:
                raise InvalidRequestError("this ZooKeeper coordinator was opened without an offsets directory; "
                                          "group offsets live in the offsets topic of the data directory: pass "
                                          "offsets_dir (a coordinator instance passes <data dir>/__fabric/"
                                          "__consumer_offsets)")
            self._topic_of_offsets = OffsetsTopic.in_directory(self._offsets_dir, self._epoch,
                                                                self._legacy_offsets,
                                                                resolve_pending=self.transaction_committed)
        return self._topic_of_offsets

    # -- topics --------------------------------------------------------------------------------------------
    def _read_topic(self, name: str, watch: Callable[[WatchedEvent], None] | None = None
                    ) -> tuple[TopicInfo, Any, dict[int, PartitionAssignment]]:
        """The topic, its znode's stat and (a replicated topic's) assignment, read now (`watch` set on its znode);
        UnknownTopicError."""
        try:
            data, stat = self.client.retry(self.client.get, layout.topic(name), watch=watch)
        except NoNodeError:
            raise UnknownTopicError(f"topic {name!r} does not exist; create it with "
                                    f"`fabric topics create {name}` or create_topic()") from None
        return layout.topic_info(name, data), stat, layout.topic_assignment(data)

    @staticmethod
    def _create_partitions(txn: TransactionRequest, name: str, states: Mapping[int, bytes]) -> None:
        for p, state in sorted(states.items()):
            txn.create(layout.partition(name, p))
            txn.create(layout.partition_state(name, p), state)

    def _create(self, info: TopicInfo, assignment: Assignment,
                states: Callable[[TransactionRequest, EpochToken | None], Mapping[int, bytes]]) -> TopicInfo:
        """Create the topic's znodes in one transaction: the topic, and each partition with its state."""
        def build(txn: TransactionRequest, token: EpochToken | None) -> TopicInfo:
            if self.client.exists(layout.topic(info.name)) is not None:
                raise TopicExistsError.of(info.name)
            txn.create(layout.topic(info.name), layout.topic_data(info, assignment))
            txn.create(layout.partitions(info.name))
            self._create_partitions(txn, info.name, states(txn, token))
            return info
        try:
            return self.writer.write(build)
        finally:
            self._topics.forget(info.name)

    def create_topic(self, name: str, partitions: int, config: dict[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        info = validation.new_topic(name, partitions, config, value_schema)
        return self._create(info, {}, lambda txn, token: dict.fromkeys(range(partitions),
                                                                        _leader_state(token).encode()))

    def delete_topic(self, name: str) -> None:
        def build(txn: TransactionRequest, token: EpochToken | None) -> None:
            _, stat, _ = self._read_topic(name)
            *below, top = self.writer.subtree(layout.topic(name))
            for path in below:
                txn.delete(path)
            txn.delete(top, version=stat.version)  # fails if the topic changed since we read it
        try:
            self.writer.write(build)
        finally:
            self._topics.forget(name)
        if self._offsets_dir is not None:
            self.offsets_topic.forget_topic(name)

    def topic_on_loop(self, name: str) -> bool:
        """While the topic is kept in memory (zk_watched_cache): reading it asks ZooKeeper nothing."""
        return self._topics.holds(name)

    def commits_on_loop(self, group: str, topics: Sequence[str]) -> bool:
        """While every topic of the commit (zk_watched_cache) and, where group states are znodes, the group's state
        are kept in memory (its checks then ask ZooKeeper nothing): with the offsets in the replicated offsets topic
        (appended from the loop) or in the instances' local one (appended at once, as a single directory's are).
        Otherwise a commit reads ZooKeeper on a worker, which keeps what it read for the next."""
        offsets = self._topic_of_offsets
        if offsets is None or not all(self._topics.holds(t) for t in topics):
            return False
        return not offsets.log.shared or self._group_states.keeps(group)

    def _cached_topic(self, name: str) -> tuple[TopicInfo, dict[int, PartitionAssignment]]:
        """The topic and its assignment as ZooKeeper last told this process (zk_watched_cache); UnknownTopicError."""
        return self._topics.get(name)

    def _read_for_cache(self, name: str, watch: Callable[[WatchedEvent], None]
                        ) -> tuple[TopicInfo, dict[int, PartitionAssignment]]:
        info, _, assignment = self._read_topic(name, watch)
        return info, assignment

    def topic(self, name: str) -> TopicInfo:
        return self._cached_topic(name)[0]

    def list_topics(self) -> list[str]:
        return sorted(layout.name_of(t) for t in self.writer.children(layout.TOPICS))

    def _update_topic(self, name: str, change: Callable[[TopicInfo, Assignment], tuple[TopicInfo, Assignment]],
                      extra: Callable[[TransactionRequest, TopicInfo, TopicInfo, EpochToken | None], None]
                      = lambda *_: None) -> TopicInfo:
        """Rewrite the topic znode (its info and assignment, as `change` makes them) by compare-and-set."""
        def build(txn: TransactionRequest, token: EpochToken | None) -> TopicInfo:
            info, stat, assignment = self._read_topic(name)
            new, new_assignment = change(info, assignment)
            txn.set_data(layout.topic(name), layout.topic_data(new, new_assignment), version=stat.version)
            extra(txn, info, new, token)
            return new
        try:
            return self.writer.write(build)
        finally:
            self._topics.forget(name)

    def alter_topic_config(self, name: str, config: dict[str, str | None]) -> TopicInfo:
        def change(info: TopicInfo, assignment: Assignment) -> tuple[TopicInfo, Assignment]:
            merged = validation.config_change(name, info.config, config)
            return replace(info, config=merged), assignment
        return self._update_topic(name, change)

    def set_partitions(self, name: str, total: int) -> TopicInfo:
        validation.partition_count(name, total)

        def change(info: TopicInfo, assignment: Assignment) -> tuple[TopicInfo, Assignment]:
            validation.partition_growth(name, info.partitions, total)
            validation.plain_growth(name, bool(assignment))
            return replace(info, partitions=total), assignment
        return self._update_topic(name, change, lambda txn, old, new, token: self._create_partitions(
            txn, name, dict.fromkeys(range(old.partitions, new.partitions), _leader_state(token).encode())))

    # -- partition leadership ------------------------------------------------------------------------------
    def leader_state(self, name: str, partition: int) -> layout.LeaderState:
        """The partition's {leader, leader_epoch, isr, controller_epoch}."""
        found = self.writer.get_many([layout.partition_state(name, partition)])[0]
        if found is None:
            raise UnknownTopicError(f"topic {name!r} has no partition {partition}")
        return layout.LeaderState.decode(found[0])

    def take_leadership(self) -> int:
        """Make this (fenced, active) instance the leader of every partition of the topics created without
        replication (the controller elects the replicated ones' leaders among their nodes), bumping each
        leader epoch, as a newly elected controller does; returns how many partition states changed."""
        paths = [layout.partition_state(t, p) for t in self.list_topics()
                 for p in range(self._partitions_of(t, replicated=False))]

        def build(chunk: list[str], txn: TransactionRequest, token: EpochToken | None) -> int:
            count = 0
            for path, found in zip(chunk, self.writer.get_many(chunk), strict=True):
                if found is None:
                    continue  # deleted meanwhile
                old = layout.LeaderState.decode(found[0])
                new = _leader_state(token, old.leader_epoch + 1)
                if (old.leader, old.controller_epoch) != (new.leader, new.controller_epoch):
                    txn.set_data(path, new.encode(), version=found[1].version)
                    count += 1
            return count
        changed = sum(self.writer.write(functools.partial(build, paths[start:start + layout.MAX_OPS]))
                      for start in range(0, len(paths), layout.MAX_OPS))
        if self._offsets_dir is not None and self._epoch is not None and self.offsets_topic.log.shared:
            self.offsets_topic.take_leadership(self._epoch())  # a deposed instance's commits are refused
        # (an owned, replicated offsets topic is taken by its loader: fabric.server.replicated_offsets)
        return changed

    # -- offsets: in the offsets topic (coordinator.offsets_topic); the znodes of earlier versions are migrated --
    def _legacy_offsets(self) -> Iterator[tuple[str, TopicPartition, CommittedOffset]]:
        """The offsets an earlier version kept in znodes under /consumers (moved to the offsets topic once)."""
        for g in self.writer.children(layout.CONSUMERS):
            group = layout.name_of(g)
            for t in self.writer.children(layout.group_offsets(group)):
                topic = layout.name_of(t)
                for p in self.writer.children(layout.group_topic_offsets(group, topic)):
                    found = self.writer.get_many([layout.offset(group, topic, int(p))])[0]
                    if found is not None:
                        yield group, (topic, int(p)), layout.committed_offset(found[0])

    # -- sink transactions ---------------------------------------------------------------------------------
    def transaction_record(self, transactional_id: str) -> TransactionRecord:
        transactional_id = validation.transactional_id(transactional_id)
        [found] = self.writer.get_many([layout.transaction_id(transactional_id)])
        return self._transaction(transactional_id, found)

    @staticmethod
    def _transaction(transactional_id: str, found: Any) -> TransactionRecord:
        if found is None:
            return transactions.from_json(transactional_id, -1, "")
        data = layout.loads(found[0])
        return transactions.from_json(transactional_id, data["sequence"], data.get("writers", ""))

    def _change_transaction(self, transactional_id: str, change: Callable[[TransactionRecord], TransactionRecord | None]
                            ) -> TransactionRecord | None:
        """Apply `change` to the transactional id's record by compare-and-set (re-read on a conflict)."""
        path = layout.transaction_id(transactional_id)

        def build(txn: TransactionRequest, token: EpochToken | None) -> TransactionRecord | None:
            [found] = self.writer.get_many([path])
            record = change(self._transaction(transactional_id, found))
            if record is None:
                return None
            data = layout.dumps({"sequence": record.committed_sequence, "commit_ms": SYSTEM_CLOCK.now_ms(),
                                 "writers": transactions.to_json(record)})
            if found is None:
                txn.create(path, data)
            else:
                txn.set_data(path, data, version=found[1].version)
            return record
        return self.writer.write(build)

    def _transaction_records(self) -> list[TransactionRecord]:
        names = [layout.name_of(n) for n in self.writer.children(layout.TRANSACTION_IDS)]
        found = self.writer.get_many([layout.transaction_id(name) for name in names])
        return [self._transaction(name, f) for name, f in zip(names, found, strict=True) if f is not None]

    def transaction_committed(self, txn: str) -> bool:
        transactional_id, sequence = validation.transaction(txn)
        try:
            data, _ = self.client.retry(self.client.get, layout.transaction_id(transactional_id))
            if layout.loads(data)["sequence"] >= sequence:
                return True
        except NoNodeError:
            pass
        return self.client.retry(self.client.exists, layout.legacy_transaction(txn)) is not None

    # -- group membership: the GroupCoordinator state machine over /consumers/<group>/state ------------
    def _partitions_of(self, topic: str, replicated: bool = True) -> int:
        """The topic's partition count (0 if it does not exist, or is replicated and `replicated` is False)."""
        try:
            info, assignment = self._cached_topic(topic)
        except UnknownTopicError:
            return 0
        return info.partitions if replicated or not assignment else 0

    def close(self) -> None:
        self._topics.close()
        self._state_cache.close()
        self._group_states.close()
        if self._owned:
            self.client.stop()
            self.client.close()
