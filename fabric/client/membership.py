"""A consumer's membership in a group: the join/sync loop, a heartbeat thread and the rebalance callbacks.

As in Kafka's consumer, rebalances are acted on in the polling thread (`poll()`), so callbacks run there;
the heartbeat thread only keeps the session alive and notes what the coordinator said. Eager assignors
revoke everything before rejoining; cooperative ones keep their partitions and revoke only what moved.
A member that misses `max_poll_interval_ms` leaves the group and loses its partitions (rejoining on the
next poll). Static members (group_instance_id) do not leave on close: they keep their slot for
session_timeout_ms so a restart does not rebalance (KIP-345).
"""
from __future__ import annotations

import enum
import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from fabric.common.errors import (
    FabricError,
    IllegalGenerationError,
    InvalidConfigError,
    MembershipError,
    RebalanceInProgressError,
    UnknownMemberError,
)
from fabric.common.types import JoinRequest, TopicPartition
from fabric.coordinator import assignors
from fabric.coordinator.interface import Coordinator

log = logging.getLogger(__name__)
JOIN_BACKOFF_S, JOIN_BACKOFF_MAX_S = 0.05, 0.25  # between join steps while waiting for a rebalance


class Phase(enum.Enum):
    """Where this member is in the group protocol.

    UNJOINED -> JOINING (first join step, or after being fenced) -> STABLE (assignment installed);
    STABLE -> JOINING when a heartbeat reports a rebalance or the subscription changes; any -> UNJOINED when
    fenced (stale generation, forgotten member, missed max_poll_interval_ms) or closed.
    """

    UNJOINED = "unjoined"
    JOINING = "joining"
    STABLE = "stable"

Callback = Callable[[list[TopicPartition]], None]


@dataclass(frozen=True)
class GroupMetadata:
    """A consumer's group membership now (Kafka's ConsumerGroupMetadata): generation -1 and member_id ""
    while it is not a member (not subscribed, or between being fenced and rejoining)."""

    group_id: str
    generation: int
    member_id: str
    group_instance_id: str


def _noop(partitions: list[TopicPartition]) -> None:
    """The default rebalance callback."""


class GroupMember:
    """One member of `group` subscribed to `topics`; call poll() from the consuming thread."""

    def __init__(self, coordinator: Coordinator, group: str, topics: Iterable[str], *, strategy: str = "range",
                 instance_id: str = "", client_id: str = "", session_timeout_ms: int = 45000,
                 heartbeat_interval_ms: int = 3000, max_poll_interval_ms: int = 300000,
                 on_assign: Callback | None = None, on_revoke: Callback | None = None,
                 on_lost: Callback | None = None) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise InvalidConfigError(
                f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be lower than session_timeout_ms "
                f"({session_timeout_ms}); Kafka recommends at most a third of it")
        self.coordinator, self.group, self.topics = coordinator, group, tuple(topics)
        self.strategy, self.instance_id, self.client_id = strategy, instance_id, client_id
        self.cooperative = assignors.assignor(strategy).cooperative
        self.session_timeout_ms, self.max_poll_interval_ms = session_timeout_ms, max_poll_interval_ms
        self.on_assign, self.on_revoke = on_assign or _noop, on_revoke or _noop
        self.on_lost = on_lost or self.on_revoke
        self.member_id, self.generation = "", -1
        self._owned: list[TopicPartition] = []
        self._phase = Phase.UNJOINED
        self._rejoin = self._fenced = False  # set by the heartbeat thread, acted on in poll()
        self._keep_id = False  # fenced for a stale generation only: rejoin under the same member id
        self._lock = threading.Lock()
        self._last_poll = time.monotonic()
        self._next_join, self._join_steps = 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeats, args=(heartbeat_interval_ms / 1000,),
                                        name=f"heartbeat-{group}", daemon=True)
        self._thread.start()

    def assignment(self) -> list[TopicPartition]:
        """The partitions this member owns now."""
        return list(self._owned)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Change the subscription; the next poll rejoins (and the group rebalances)."""
        self.topics = tuple(topics)
        with self._lock:
            self._rejoin = True

    # -- the polling thread ------------------------------------------------------------------------
    def poll(self) -> None:
        """Note the poll (max_poll_interval_ms), act on what heartbeats reported, and take one step of a
        pending join/sync (rate-limited, never blocking)."""
        with self._lock:  # (the heartbeat thread weighs _last_poll under it: see _heartbeat)
            self._last_poll = time.monotonic()
            fenced, keep_id, rejoin = self._fenced, self._keep_id, self._rejoin
            self._fenced = self._rejoin = self._keep_id = False
        if fenced:
            self._lose(keep_id)
        elif rejoin and self._phase == Phase.STABLE:
            self._start_rejoin()
        if self._phase != Phase.STABLE and time.monotonic() >= self._next_join:
            self._join_step()
            self._next_join = time.monotonic() + self._join_backoff()

    def _join_backoff(self) -> float:
        """Exponential backoff with jitter between the join steps of one rebalance, so members waiting for
        the others neither load the coordinator nor ask in lockstep."""
        ceiling = min(JOIN_BACKOFF_MAX_S, JOIN_BACKOFF_S * 2 ** self._join_steps)
        self._join_steps += 1
        return random.uniform(ceiling / 2, ceiling)

    def _start_rejoin(self) -> None:
        """Eager protocols give everything up before rejoining; cooperative ones keep what they own."""
        self._phase, self._next_join, self._join_steps = Phase.JOINING, 0.0, 0
        if not self.cooperative and self._owned:
            revoked, self._owned = self._owned, []
            self.on_revoke(revoked)

    def _lose(self, keep_id: bool = False) -> None:
        """Fenced or left: the partitions may already belong to someone else (no commit); start over, under the
        same member id if `keep_id` (a stale generation: the group still lists this member, so joining as a new
        one would leave it behind until its session lapsed, as Kafka's consumer keeps its id on
        ILLEGAL_GENERATION)."""
        lost, self._owned = self._owned, []
        self._next_join, self._join_steps = 0.0, 0
        with self._lock:
            self.member_id = self.member_id if keep_id else ""
            self.generation, self._phase = -1, Phase.UNJOINED
        if lost:
            self.on_lost(lost)

    def _join_step(self) -> None:
        request = JoinRequest(self.group, self.member_id, self.topics, (self.strategy,), self.instance_id,
                              self.client_id, self.session_timeout_ms, self.max_poll_interval_ms,
                              tuple(self._owned))
        try:
            joined = self.coordinator.join_group(request)
            with self._lock:
                self.member_id, self._phase = joined.member_id, Phase.JOINING
            if not joined.ready:
                return
            synced = self.coordinator.sync_group(self.group, joined.member_id, joined.generation)
        except UnknownMemberError:
            self._lose()
            return
        except MembershipError:
            return  # the group moved on meanwhile (a rebalance, a new generation): join again on the next step
        except FabricError as exc:
            if not exc.retriable:
                raise
            log.info("group %s: join step failed (%s); retrying", self.group, exc)
            return
        self._install(joined.generation, synced.assignment)

    def _install(self, generation: int, assignment: Iterable[TopicPartition]) -> None:
        new = sorted(set(assignment))
        revoked = [tp for tp in self._owned if tp not in new]
        added = [tp for tp in new if tp not in self._owned]
        with self._lock:
            self.generation = generation
        if revoked:
            self.on_revoke(revoked)
        self._owned = new
        with self._lock:
            self._phase = Phase.STABLE
        self.on_assign(added)

    # -- the heartbeat thread ----------------------------------------------------------------------
    def _heartbeats(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self._heartbeat()
            except Exception:  # noqa: BLE001 (this thread must outlive any failure: the next interval tries again)
                log.exception("group %s: a heartbeat failed unexpectedly; trying again in %.1f s", self.group,
                              interval_s)

    def _heartbeat(self) -> None:
        """One heartbeat of the member, its outcome noted for poll(); or, past max_poll_interval_ms without a
        poll, its leaving (fenced, even if the coordinator cannot be told). The overdue check and the fencing are
        one step under the lock poll() notes its time under: a poll either counts, or finds the member fenced and
        hands out nothing of the generation it is leaving."""
        with self._lock:
            member_id, generation, phase = self.member_id, self.generation, self._phase
            if phase == Phase.UNJOINED or self._fenced:
                return
            overdue = (time.monotonic() - self._last_poll) * 1000 > self.max_poll_interval_ms
            if overdue:
                self._fenced, self._keep_id = True, False
        if overdue:
            try:
                self._leave(member_id)
            except FabricError as exc:  # (the coordinator evicts it once its session times out)
                log.info("group %s: %s left (no poll for max.poll.interval.ms) without telling the coordinator: %s",
                         self.group, member_id, exc)
            return
        try:
            self.coordinator.heartbeat(self.group, member_id, generation)
        except RebalanceInProgressError:
            self._note(member_id, generation, fenced=False)
        except IllegalGenerationError:  # a stale generation: fenced, rejoining as the same member
            self._note(member_id, generation, fenced=True, keep_id=True)
        except MembershipError:  # a forgotten member: fenced, joining again as a new one
            self._note(member_id, generation, fenced=True)
        except FabricError as exc:  # try again next interval
            log.log(logging.INFO if exc.retriable else logging.WARNING,
                    "group %s: heartbeat of %s failed: %s", self.group, member_id, exc)

    def _note(self, member_id: str, generation: int, fenced: bool, keep_id: bool = False) -> None:
        """Record a heartbeat outcome unless the poll thread has moved to another generation meanwhile."""
        with self._lock:
            if (self.member_id, self.generation) == (member_id, generation):
                if fenced:
                    self._fenced, self._keep_id = True, keep_id
                elif self._phase == Phase.STABLE:
                    self._rejoin = True

    def _leave(self, member_id: str) -> None:
        try:
            self.coordinator.leave_group(self.group, member_id)
        except UnknownMemberError:
            pass  # already gone: nothing to leave

    def close(self) -> None:
        """Revoke the partitions (so the consumer can commit) and leave, unless static (KIP-345)."""
        self._stop.set()
        self._thread.join()
        if self._owned:
            revoked, self._owned = self._owned, []
            self.on_revoke(revoked)
        if self.member_id and not self.instance_id:  # fenced too: a stale generation's member is still listed
            self._leave(self.member_id)
        self.member_id, self._phase = "", Phase.UNJOINED
