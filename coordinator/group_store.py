"""Where group states live, and the group protocol served over any such store.

A `GroupStore` only reads and compare-and-sets one group's JSON state; `update` retries a transition on
conflict, after a jittered backoff (ZooKeeper: znode version; SQLite: a BEGIN IMMEDIATE transaction never
conflicts), and writes nothing when the transition changed nothing. `GroupService` runs `GroupCoordinator`
transitions through a store: the part of the Coordinator interface about groups.
"""
from __future__ import annotations

import logging
import random
import sqlite3
import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from typing import Any, Callable, TypeVar

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.errors import (
    CoordinatorUnavailableError,
    MembershipError,
    RebalanceInProgressError,
)
from fabric.common.types import GroupDescription, JoinRequest, JoinResult, SyncResult
from fabric.coordinator.groups import GroupCoordinator, GroupState, PartitionsOf, dead_state, heartbeat_slack_ms

T = TypeVar("T")
log = logging.getLogger(__name__)
MAX_ATTEMPTS = 64
CONFLICT_BACKOFF_S, CONFLICT_BACKOFF_MAX_S = 0.001, 0.05


def conflict_backoff(attempt: int) -> None:
    """Sleep before retrying a lost compare-and-set: exponential with full jitter, so concurrent writers
    of one group (or one partition state) spread out instead of colliding again in lockstep."""
    time.sleep(random.uniform(0, min(CONFLICT_BACKOFF_MAX_S, CONFLICT_BACKOFF_S * 2 ** attempt)))


def _log_transition(group: str, before: GroupState, after: GroupState | None) -> None:
    """Log a group's change of state (or its removal) once it is stored."""
    if after is None:
        log.info("group %s: forgotten", group)
    elif after.state != before.state or after.generation != before.generation:
        log.info("group %s: %s -> %s, generation %d, %d member(s)", group, before.state, after.state,
                 after.generation, len(after.members))


class GroupStore(ABC):
    """Persisted group states with optimistic concurrency."""

    @abstractmethod
    def read(self, group: str) -> tuple[GroupState | None, Any]:
        """The group's state (None if unknown) and a version token for `write`."""

    @abstractmethod
    def write(self, group: str, state: GroupState | None, version: Any) -> bool:
        """Store `state` (None: forget the group) if the version is unchanged; False on conflict."""

    @abstractmethod
    def list(self) -> list[str]:
        """Every stored group, sorted."""

    def load(self, group: str) -> GroupState | None:
        """The group's state, or None if the store never heard of it."""
        return self.read(group)[0]

    def update(self, group: str, fn: Callable[[GroupState], tuple[GroupState | None, T]]) -> T:
        """Atomically load the state (a fresh Empty one if unknown), apply `fn` and save what it returns,
        retrying `fn` on a concurrent change."""
        for attempt in range(MAX_ATTEMPTS):
            stored, version = self.read(group)
            before = stored or GroupState()
            after, result = fn(before)
            if after is not None and after.to_json() == before.to_json():
                return result
            if self.write(group, after, version):
                _log_transition(group, before, after)
                return result
            conflict_backoff(attempt)
        log.warning("group %s: %d conflicting updates in a row; giving up this call", group, MAX_ATTEMPTS)
        raise CoordinatorUnavailableError(f"group {group!r} changed {MAX_ATTEMPTS} times while updating it; retry")


class GroupService:
    """The group half of the Coordinator interface over a GroupStore; expiry is applied (and kept) on
    every call, even one that then fails with a protocol error."""

    def __init__(self, store: GroupStore, partitions_of: PartitionsOf,
                 clock: Clock = SYSTEM_CLOCK, machine: GroupCoordinator | None = None) -> None:
        self.store, self.partitions_of, self.clock = store, partitions_of, clock
        self.machine = machine or GroupCoordinator()

    def _call(self, group: str, op: Callable[[GroupState, int], tuple[GroupState | None, T]]) -> T:
        def apply(state: GroupState) -> tuple[GroupState | None, Any]:
            now = self.clock.now_ms()
            expired = self.machine.expire(state, now)
            try:
                return op(expired, now)
            except MembershipError as exc:  # the member must rejoin; the expiry is kept all the same
                return expired, exc
        result = self.store.update(group, apply)
        if isinstance(result, Exception):
            raise result
        return result

    def join_group(self, request: JoinRequest) -> JoinResult:
        return self._call(request.group, lambda s, now: self.machine.join(s, request, now, self.partitions_of))

    def sync_group(self, group: str, member_id: str, generation: int) -> SyncResult:
        return self._call(group, lambda s, now: self.machine.sync(s, member_id, generation, now))

    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        rebalance = self._call(group, lambda s, now: self.machine.heartbeat(
            s, member_id, generation, now, self.partitions_of))
        if rebalance:
            raise RebalanceInProgressError(f"group {group!r} is rebalancing; rejoin")

    def leave_group(self, group: str, member_id: str) -> None:
        self._call(group, lambda s, now: self.machine.leave(s, member_id, now))

    def delete_group(self, group: str) -> None:
        """Forget the group's membership state; GroupNotEmptyError while it has live members."""
        def forget(state: GroupState, now: int) -> tuple[None, None]:
            self.machine.delete(state)  # raises while the group has members
            return None, None
        self._call(group, forget)

    def liveness(self, group: str, now_ms: int) -> tuple[int | None, set[str]]:
        """When the group last had a live member (ms; 0: never, as a standalone consumer's group, or not recorded;
        None while it has one), and the topics its live members subscribe to. Members whose session ended since
        the state was written count as gone from their session's end: the state is not rewritten for it."""
        stored = self.store.load(group)
        if stored is None:
            return 0, set()
        live = self.machine.expire(stored, now_ms).members
        if live:
            return None, {t for m in live.values() for t in m.topics}
        if stored.members:
            return max(m.last_heartbeat_ms + m.session_timeout_ms + heartbeat_slack_ms(m)
                       for m in stored.members.values()), set()
        return stored.empty_since_ms, set()

    def validate_commit(self, group: str, member_id: str, generation: int, transactional: bool = False) -> None:
        """Raise unless this offset commit may be stored now (see GroupCoordinator.validate_commit). A group with
        no stored state (one that only commits: a standalone consumer, a Spark query) has nothing to expire."""
        stored = self.store.load(group)
        state = GroupState() if stored is None else self.machine.expire(stored, self.clock.now_ms())
        self.machine.validate_commit(state, member_id, generation, transactional)

    def describe_group(self, group: str) -> GroupDescription | None:
        """The group's state with timeouts applied, or None if the store never heard of it."""
        state = self.store.load(group)
        if state is None:
            return None
        return self.machine.describe(self.machine.expire(state, self.clock.now_ms()), group)

    def live_groups(self) -> list[str]:
        """Groups that have members now."""
        now = self.clock.now_ms()
        return [g for g in self.store.list()
                if self.machine.expire(self.store.load(g) or GroupState(), now).members]


class SqliteGroupStore(GroupStore):
    """Group states in the `groups` table of the embedded fabric's metadata database. With `kept` (the database's
    cache by metadata version, SqliteCoordinator._cached), states loaded to be checked are kept while no write of
    any process changed the database since they were read."""

    def __init__(self, db: Callable[[], sqlite3.Connection],
                 transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
                 kept: Callable[[dict, str, Callable[[sqlite3.Connection], GroupState | None]], GroupState | None]
                 | None = None) -> None:
        self._db, self._transaction, self._kept = db, transaction, kept
        self._states: dict[str, tuple[bytes, GroupState | None]] = {}  # group: (the version read under, state)
        db().execute("CREATE TABLE IF NOT EXISTS groups "
                     "(grp TEXT PRIMARY KEY, state TEXT NOT NULL, version INTEGER NOT NULL)")

    def read(self, group: str) -> tuple[GroupState | None, Any]:
        return _read(self._db(), group)

    def load(self, group: str) -> GroupState | None:
        """The group's state, kept (see the class) so that a commit's generation check reads no row and parses
        no JSON. Transitions copy the states they are given (GroupCoordinator), so a kept one never changes."""
        if self._kept is None:
            return super().load(group)
        return self._kept(self._states, group, lambda db: _read(db, group)[0])

    def write(self, group: str, state: GroupState | None, version: Any) -> bool:
        db = self._db()
        if state is None:
            db.execute("DELETE FROM groups WHERE grp=? AND version=?", (group, version))
            return True
        if version == 0:
            return db.execute("INSERT OR IGNORE INTO groups VALUES (?, ?, 1)",
                              (group, state.to_json())).rowcount == 1
        return db.execute("UPDATE groups SET state=?, version=version+1 WHERE grp=? AND version=?",
                          (state.to_json(), group, version)).rowcount == 1

    def list(self) -> list[str]:
        return [r[0] for r in self._db().execute("SELECT grp FROM groups ORDER BY grp")]

    def update(self, group: str, fn: Callable[[GroupState], tuple[GroupState | None, T]]) -> T:
        """Inside one BEGIN IMMEDIATE transaction (or the caller's, if one is open)."""
        if self._db().in_transaction:
            return super().update(group, fn)
        with self._transaction():
            return super().update(group, fn)


def _read(db: sqlite3.Connection, group: str) -> tuple[GroupState | None, int]:
    """A group's stored state and its row's version (None, 0 if it has none)."""
    row = db.execute("SELECT state, version FROM groups WHERE grp=?", (group,)).fetchone()
    return (GroupState.from_json(row[0]), row[1]) if row else (None, 0)


class GroupMembership:
    """The five group-membership methods of the Coordinator interface, for a store that keeps its
    GroupService in `self._groups` and can tell whether a group has committed offsets."""

    _groups: GroupService

    def _has_offsets(self, group: str) -> bool:
        raise NotImplementedError

    def limit_groups(self, max_session_timeout_ms: int, max_size: int) -> None:
        """Refuse joins asking for a longer session (group.max.session.timeout.ms; Kafka's default, 30 minutes,
        unless set) and new members past `max_size` (group.max.size; Kafka's default, no limit)."""
        self._groups.machine.max_session_timeout_ms = max_session_timeout_ms
        self._groups.machine.max_size = max_size

    def check_commit(self, group: str, member_id: str = "", generation: int = -1, transactional: bool = False
                     ) -> None:
        self._groups.validate_commit(group, member_id, generation, transactional)

    def join_group(self, request: JoinRequest) -> JoinResult:
        return self._groups.join_group(request)

    def sync_group(self, group: str, member_id: str, generation: int) -> SyncResult:
        return self._groups.sync_group(group, member_id, generation)

    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        self._groups.heartbeat(group, member_id, generation)

    def leave_group(self, group: str, member_id: str) -> None:
        self._groups.leave_group(group, member_id)

    def describe_group(self, group: str) -> GroupDescription:
        """Live state if the group has any; Empty if it only has offsets; Dead if it is unknown."""
        found = self._groups.describe_group(group)
        if found is not None:
            return found
        return GroupCoordinator.describe(GroupState() if self._has_offsets(group) else dead_state(), group)
