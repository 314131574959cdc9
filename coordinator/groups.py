"""Kafka's consumer-group protocol as a pure state machine over persisted group state.

`GroupCoordinator`'s transitions take a `GroupState` and return a new one plus the answer, so any
transactional store can run them (SQLite in a transaction, ZooKeeper with compare-and-set). Timeouts are
evaluated lazily from `now_ms`: `expire` removes members whose session lapsed, and members that missed a
rebalance deadline. The assignment is computed here (server side, as KIP-848) when a rebalance completes.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable

from fabric.common.config import INT_MAX
from fabric.common.errors import (
    GroupMaxSizeReachedError,
    GroupNotEmptyError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    UnknownMemberError,
)
from fabric.common.names import validate_group, validate_topic
from fabric.common.types import (
    GroupDescription,
    GroupStatus,
    JoinRequest,
    JoinResult,
    MemberDescription,
    SyncResult,
    TopicPartition,
)
from fabric.coordinator.assignors import Subscription, assignor, withhold_moving

# Allowed state changes (Kafka's GroupMetadata). Dead is terminal: a store forgets a dead group.
TRANSITIONS: dict[GroupStatus, frozenset[GroupStatus]] = {
    GroupStatus.EMPTY: frozenset({GroupStatus.PREPARING_REBALANCE, GroupStatus.DEAD}),
    GroupStatus.PREPARING_REBALANCE: frozenset({GroupStatus.COMPLETING_REBALANCE, GroupStatus.EMPTY}),
    GroupStatus.COMPLETING_REBALANCE: frozenset({GroupStatus.STABLE, GroupStatus.PREPARING_REBALANCE}),
    GroupStatus.STABLE: frozenset({GroupStatus.PREPARING_REBALANCE}),
    GroupStatus.DEAD: frozenset(),
}

PartitionsOf = Callable[[str], int]  # topic -> partition count (0 for a topic that does not exist)
HEARTBEAT_SLACK_FRACTION = 5  # a stored heartbeat is refreshed once it is session_timeout_ms / 5 old
MAX_SESSION_TIMEOUT_MS = 1_800_000  # group.max.session.timeout.ms: Kafka's default, 30 minutes
# group.min.session.timeout.ms: a shorter session ends between a member's heartbeats and polls, so the group
# rebalances without end and its members read their records again and again (Kafka's default is 6000; the
# fabric's floor is lower, for the 1 to 2 s sessions of tests and local clusters)
MIN_SESSION_TIMEOUT_MS = 1000
MAX_SIZE = INT_MAX  # group.max.size: Kafka's default, no limit (KIP-389)


class IllegalStateTransition(RuntimeError):
    """A bug: the state machine tried a transition its table does not allow."""


@dataclass
class Member:
    """One member's persisted record. joined_generation is the generation it last joined (the pending one
    while a rebalance runs); synced_generation the last one whose assignment it fetched. last_heartbeat_ms
    is refreshed lazily (see heartbeat_slack_ms)."""

    instance_id: str
    client_id: str
    topics: list[str]
    assignors: list[str]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_heartbeat_ms: int
    joined_generation: int
    owned: list[list] = field(default_factory=list)
    synced_generation: int = -1


@dataclass
class GroupState:
    """A group's whole persisted state (JSON-serialisable)."""

    state: GroupStatus = GroupStatus.EMPTY
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    assignment: dict[str, list[list]] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    partition_counts: dict[str, int] = field(default_factory=dict)
    followup: bool = False  # a cooperative round withheld partitions: rebalance again once all synced
    empty_since_ms: int = 0  # when the last member left (offsets.retention.minutes counts from it); 0: unknown

    def to_json(self) -> str:
        """Canonical JSON (sorted keys), so equal states serialise identically."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GroupState:
        """The state `to_json` wrote, in this release or a later one: fields this release does not know are left
        out (a rolling upgrade's newer instance may have written them; each new field's default keeps the older
        meaning, as empty_since_ms's 0, "unknown", does)."""
        raw = _known(cls, json.loads(text))
        raw["members"] = {m: Member(**_known(Member, v)) for m, v in raw["members"].items()}
        raw["state"] = GroupStatus(raw["state"])
        return cls(**raw)

    def copy(self) -> GroupState:
        """A deep copy, so transitions never mutate their input (field by field: a JSON round trip cost a tenth
        of a millisecond on every commit's generation check)."""
        return replace(self, members={mid: replace(m, topics=list(m.topics), assignors=list(m.assignors),
                                                    owned=[list(tp) for tp in m.owned])
                                      for mid, m in self.members.items()},
                       assignment={mid: [list(tp) for tp in tps] for mid, tps in self.assignment.items()},
                       partition_counts=dict(self.partition_counts))

    def owned(self, member_id: str) -> tuple[TopicPartition, ...]:
        """The member's assignment in the current generation, as (topic, partition) pairs."""
        return tuple((t, p) for t, p in self.assignment.get(member_id, []))


def _known(kind: type, raw: dict[str, Any]) -> dict[str, Any]:
    """The items of `raw` that are fields of the dataclass `kind`."""
    names = {f.name for f in fields(kind)}
    return {k: v for k, v in raw.items() if k in names}


def heartbeat_slack_ms(m: Member) -> int:
    """How old a member's stored heartbeat may get before a heartbeat (or join/sync) rewrites it. Refreshing
    it on every call would rewrite the group state for nothing several times a second per member, starving
    real transitions and offset commits of compare-and-set wins; expiry adds the slack, so a live member is
    never expired early and a dead one at most this late."""
    return m.session_timeout_ms // HEARTBEAT_SLACK_FRACTION


def _touch(m: Member, now_ms: int) -> None:
    """Note that the member was heard of at now_ms, unless the stored time is within the slack."""
    if now_ms - m.last_heartbeat_ms >= heartbeat_slack_ms(m):
        m.last_heartbeat_ms = now_ms


def _to(s: GroupState, new: GroupStatus) -> None:
    if new not in TRANSITIONS[s.state]:
        raise IllegalStateTransition(f"group state {s.state} cannot go to {new}")
    s.state = new


def _member(s: GroupState, member_id: str) -> Member:
    if s.state == GroupStatus.DEAD:
        raise UnknownMemberError("the group was deleted; join again as a new member")
    found = s.members.get(member_id)
    if found is None:
        raise UnknownMemberError(f"member {member_id!r} is not in the group (it left, was fenced or its "
                                 "session timed out); rejoin with an empty member id")
    return found


def _common_assignors(members: list[Member], offered: list[str]) -> list[str]:
    common = list(offered)
    for m in members:
        common = [a for a in common if a in m.assignors]
    return common


def _validate_join(req: JoinRequest, max_session_timeout_ms: int) -> None:
    validate_group(req.group)
    if not isinstance(req.member_id, str) or not isinstance(req.group_instance_id, str):
        raise InvalidConfigError("member_id and group_instance_id must be strings ('' when unset)")
    if not req.topics or isinstance(req.topics, str):
        raise InvalidConfigError("a join needs a non-empty tuple of topics to subscribe to")
    for topic in req.topics:
        validate_topic(topic)
    if not req.assignors or isinstance(req.assignors, str):
        raise InvalidConfigError("a join needs a non-empty tuple of partition assignment strategies")
    for name in req.assignors:
        assignor(name)
    for key in ("session_timeout_ms", "rebalance_timeout_ms"):
        value = getattr(req, key)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= INT_MAX:
            raise InvalidConfigError(f"{key} must be a positive integer of milliseconds up to {INT_MAX} (Kafka's "
                                     f"int32), got {value!r}")
    if req.session_timeout_ms < MIN_SESSION_TIMEOUT_MS:
        raise InvalidSessionTimeoutError(
            f"session_timeout_ms {req.session_timeout_ms} is under the coordinator's group.min.session.timeout.ms "
            f"({MIN_SESSION_TIMEOUT_MS}): the member would be dropped between its heartbeats and the group "
            "rebalance without end, its records read again and again; use at least that (Kafka's default consumer "
            "session is 45000)")
    if req.session_timeout_ms > max_session_timeout_ms:
        raise InvalidSessionTimeoutError(
            f"session_timeout_ms {req.session_timeout_ms} is over this coordinator's group.max.session.timeout.ms "
            f"({max_session_timeout_ms}): a member that died would keep its partitions that long; use at most that "
            "(Kafka's default consumer session is 45000), or raise the coordinator's limit")
    for tp in req.owned:
        if len(tp) != 2 or not isinstance(tp[0], str) or not isinstance(tp[1], int):
            raise InvalidConfigError(f"owned partitions must be (topic, partition) pairs, got {tp!r}")


class GroupCoordinator:
    """The transitions. Each returns (new state, answer) and never mutates its input; protocol errors
    (unknown member, illegal generation, rebalance in progress) are raised with no state change."""

    def __init__(self, new_member_id: Callable[[str], str] | None = None,
                 max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS, max_size: int = MAX_SIZE) -> None:
        self._new_id = new_member_id or (lambda client: f"{client or 'consumer'}-{uuid.uuid4().hex[:16]}")
        self.max_session_timeout_ms = max_session_timeout_ms  # group.max.session.timeout.ms
        self.max_size = max_size  # group.max.size

    # -- membership changes ------------------------------------------------------------------------
    def join(self, state: GroupState, req: JoinRequest, now_ms: int,
             partitions_of: PartitionsOf) -> tuple[GroupState, JoinResult]:
        """Join, rejoin or take over a static member's slot; completes the rebalance when it can."""
        _validate_join(req, self.max_session_timeout_ms)
        s = state.copy()
        if s.state == GroupStatus.DEAD:
            raise UnknownMemberError("the group was deleted; join again")
        slot = req.member_id or self._static_slot(s, req.group_instance_id)
        if req.member_id:
            member = _member(s, req.member_id)
            if req.group_instance_id and member.instance_id != req.group_instance_id:
                raise UnknownMemberError(f"member {req.member_id!r} is not group.instance.id "
                                         f"{req.group_instance_id!r}; it was fenced")
        others = [m for mid, m in s.members.items() if mid != slot]
        if not _common_assignors(others, list(req.assignors)):
            raise InconsistentGroupProtocolError(
                f"no partition assignment strategy of {list(req.assignors)} is supported by every member of "
                f"group {req.group!r}; configure a strategy all members share")
        member_id, changed = self._upsert(s, req, slot, now_ms)
        if s.state == GroupStatus.PREPARING_REBALANCE:
            s.members[member_id].joined_generation = s.generation + 1
        elif changed:
            self._prepare(s, now_ms)
            s.members[member_id].joined_generation = s.generation + 1
        self._maybe_complete(s, now_ms, partitions_of)
        ready = (s.state in (GroupStatus.COMPLETING_REBALANCE, GroupStatus.STABLE)
                 and s.members[member_id].joined_generation == s.generation)
        return s, JoinResult(member_id, s.generation, ready, s.leader if ready else "",
                             s.protocol if ready else "", tuple(sorted(s.members)) if ready else ())

    @staticmethod
    def _static_slot(s: GroupState, instance_id: str) -> str:
        found = [mid for mid, m in s.members.items() if instance_id and m.instance_id == instance_id]
        return found[0] if found else ""

    def _upsert(self, s: GroupState, req: JoinRequest, slot: str, now_ms: int) -> tuple[str, bool]:
        """Record the member (a static rejoin gets a new id in the old slot, fencing the old id).
        Returns its id and whether the group must rebalance for it (new member or changed subscription)."""
        old = s.members.get(slot)
        if old is None and len(s.members) >= self.max_size:
            raise GroupMaxSizeReachedError(
                f"group {req.group!r} is full: this coordinator's group.max.size is {self.max_size} and it has "
                f"{len(s.members)}; use another group.id, stop a member first, or raise the coordinator's limit")
        member_id = req.member_id or self._new_id(req.client_id)
        fresh = Member(req.group_instance_id, req.client_id, list(req.topics), list(req.assignors),
                       req.session_timeout_ms, req.rebalance_timeout_ms, now_ms, -1,
                       [list(tp) for tp in req.owned])
        if old is None:
            s.members[member_id] = fresh
            return member_id, True
        changed = (old.topics, old.assignors) != (fresh.topics, fresh.assignors)
        fresh.joined_generation, fresh.synced_generation = old.joined_generation, old.synced_generation
        fresh.last_heartbeat_ms = old.last_heartbeat_ms
        _touch(fresh, now_ms)  # a waiting member re-asking to join changes nothing, so nothing is written
        del s.members[slot]
        s.members[member_id] = fresh
        if slot != member_id:
            if slot in s.assignment:
                s.assignment[member_id] = s.assignment.pop(slot)
            if s.leader == slot:
                s.leader = member_id
        return member_id, changed

    def leave(self, state: GroupState, member_id: str, now_ms: int) -> tuple[GroupState, None]:
        """The member leaves now; the rest rebalance."""
        s = state.copy()
        _member(s, member_id)
        self._remove(s, [member_id], now_ms)
        return s, None

    def expire(self, state: GroupState, now_ms: int) -> GroupState:
        """Remove members whose session timed out, and (past the rebalance deadline) members that did not
        rejoin; either starts a rebalance for the rest."""
        s = state.copy()
        gone = [mid for mid, m in s.members.items()
                if now_ms - m.last_heartbeat_ms > m.session_timeout_ms + heartbeat_slack_ms(m)]
        if s.state == GroupStatus.PREPARING_REBALANCE and now_ms >= s.rebalance_deadline_ms:
            gone += [mid for mid, m in s.members.items()
                     if m.joined_generation != s.generation + 1 and mid not in gone]
        if gone:
            self._remove(s, gone, now_ms)
        return s

    def delete(self, state: GroupState) -> GroupState:
        """Dead: only a group without members may be deleted (as Kafka's DeleteGroups)."""
        if state.members:
            raise GroupNotEmptyError(f"the group has {len(state.members)} live member(s); stop its consumers "
                                     "(or wait for their session timeout) before deleting it")
        s = state.copy()
        _to(s, GroupStatus.DEAD)
        return s

    # -- generation protocol -----------------------------------------------------------------------
    def sync(self, state: GroupState, member_id: str, generation: int, now_ms: int) -> tuple[GroupState, SyncResult]:
        """The member's assignment for `generation`; the group is Stable once every member has synced."""
        s = state.copy()
        member = _member(s, member_id)
        if s.state == GroupStatus.PREPARING_REBALANCE:
            raise RebalanceInProgressError("the group is rebalancing; rejoin")
        self._check_generation(s, generation)
        _touch(member, now_ms)
        member.synced_generation = generation
        synced = all(m.synced_generation == s.generation for m in s.members.values())
        if s.state == GroupStatus.COMPLETING_REBALANCE and synced:
            if s.followup:
                s.followup = False
                self._prepare(s, now_ms)
            else:
                _to(s, GroupStatus.STABLE)
        return s, SyncResult(s.owned(member_id))

    def heartbeat(self, state: GroupState, member_id: str, generation: int, now_ms: int,
                  partitions_of: PartitionsOf) -> tuple[GroupState, bool]:
        """Keep the member alive; answers True when it must rejoin (a rebalance is under way, or a
        subscribed topic gained partitions since the assignment was made)."""
        s = state.copy()
        member = _member(s, member_id)
        if generation > s.generation:
            self._check_generation(s, generation)
        _touch(member, now_ms)
        if s.state == GroupStatus.PREPARING_REBALANCE:
            return s, True
        if generation != s.generation:
            if member.joined_generation != s.generation or member.synced_generation == s.generation:
                self._check_generation(s, generation)
            return s, True  # joined the new generation, has not fetched it yet
        topics = {t for m in s.members.values() for t in m.topics}
        if len(s.members) > self.max_size or any(partitions_of(t) != s.partition_counts.get(t, 0) for t in topics):
            self._prepare(s, now_ms)  # over a lowered group.max.size: the rebalance keeps the first to rejoin
            return s, True
        return s, False

    def validate_commit(self, state: GroupState, member_id: str, generation: int, transactional: bool = False
                        ) -> None:
        """Reject offset commits from stale generations or unknown members. A "simple" commit (generation
        -1, no member id) is allowed only while the group has no members, as in Kafka, unless it is a producer
        transaction's (`transactional`): Kafka's TxnOffsetCommit takes one from a client that sends no member
        (kafka-python's send_offsets_to_transaction(offsets, group_id)) whatever the group's members."""
        if generation < 0 and not member_id:
            if state.members and not transactional:
                raise UnknownMemberError(
                    f"the group has {len(state.members)} live member(s), so only its members may commit "
                    "(with their generation and member id); stop the consumers to commit offsets by hand")
            return
        member = _member(state, member_id)
        self._check_generation(state, generation)
        if state.state == GroupStatus.COMPLETING_REBALANCE and member.synced_generation != generation:
            raise RebalanceInProgressError("the member has not fetched its assignment yet; sync first")

    @staticmethod
    def _check_generation(s: GroupState, generation: int) -> None:
        if generation != s.generation:
            raise IllegalGenerationError(
                f"generation {generation} is stale: the group is at generation {s.generation}; "
                "rejoin the group (the partitions may now belong to another member)")

    # -- rebalancing -------------------------------------------------------------------------------
    def _prepare(self, s: GroupState, now_ms: int) -> None:
        """Start a rebalance: every member must rejoin before the deadline."""
        if s.state == GroupStatus.PREPARING_REBALANCE:
            return
        _to(s, GroupStatus.PREPARING_REBALANCE)
        s.rebalance_deadline_ms = now_ms + max((m.rebalance_timeout_ms for m in s.members.values()), default=0)

    def _remove(self, s: GroupState, member_ids: list[str], now_ms: int) -> None:
        for mid in member_ids:
            s.members.pop(mid, None)
            s.assignment.pop(mid, None)
        self._prepare(s, now_ms)
        if not s.members:
            self._complete_empty(s)
            s.empty_since_ms = now_ms

    @staticmethod
    def _complete_empty(s: GroupState) -> None:
        s.generation += 1
        s.protocol, s.leader, s.assignment, s.partition_counts, s.followup = "", "", {}, {}, False
        _to(s, GroupStatus.EMPTY)

    def _maybe_complete(self, s: GroupState, now_ms: int, partitions_of: PartitionsOf) -> None:
        """Finish the rebalance once every member has rejoined (or the deadline removed the rest, or group.max.size
        members rejoined a group that was over a lowered limit: the rest are removed, as Kafka evicts the last to
        rejoin): bump the generation, pick the protocol and compute the assignment."""
        if s.state != GroupStatus.PREPARING_REBALANCE:
            return
        waiting = [mid for mid, m in s.members.items() if m.joined_generation != s.generation + 1]
        if waiting and now_ms < s.rebalance_deadline_ms and len(s.members) - len(waiting) < self.max_size:
            return
        for mid in waiting:
            s.members.pop(mid)
        if not s.members:
            self._complete_empty(s)
            return
        s.generation += 1
        s.protocol = self._choose_protocol(s)
        subs = {mid: Subscription(tuple(m.topics), tuple((t, p) for t, p in m.owned))
                for mid, m in s.members.items()}
        counts = {t: partitions_of(t) for t in sorted({t for m in s.members.values() for t in m.topics})}
        chosen = assignor(s.protocol)
        target = chosen.assign(subs, counts)
        s.followup = False
        if chosen.cooperative:
            target, s.followup = withhold_moving(target, subs)
        s.assignment = {mid: [list(tp) for tp in tps] for mid, tps in target.items()}
        s.partition_counts = counts
        if s.leader not in s.members:
            s.leader = min(s.members)
        _to(s, GroupStatus.COMPLETING_REBALANCE)

    @staticmethod
    def _choose_protocol(s: GroupState) -> str:
        """The first assignor in the members' preference lists (sorted by member id) that all support."""
        members = [s.members[mid] for mid in sorted(s.members)]
        common = _common_assignors(members, members[0].assignors)
        return common[0]

    # -- reading -----------------------------------------------------------------------------------
    @staticmethod
    def describe(state: GroupState, group: str) -> GroupDescription:
        """What `fabric groups describe` shows: state, generation, protocol, members and assignments."""
        members = tuple(MemberDescription(mid, m.instance_id, m.client_id, state.owned(mid))
                        for mid, m in sorted(state.members.items()))
        return GroupDescription(group, state.state, state.generation, state.protocol, members)


def dead_state() -> GroupState:
    """What describe shows for a group the coordinator has never heard of (Kafka says Dead)."""
    return GroupState(state=GroupStatus.DEAD)
