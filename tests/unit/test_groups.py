"""The consumer-group state machine, its assignors and its SQLite store, without processes or threads."""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common.errors import (
    GroupMaxSizeReachedError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidConfigError,
    InvalidGroupError,
    InvalidSessionTimeoutError,
    InvalidTopicError,
    RebalanceInProgressError,
    UnknownMemberError,
)
from fabric.common.types import GroupStatus, JoinRequest
from fabric.coordinator.assignors import ASSIGNORS, Subscription, assignor, range_assign, roundrobin_assign
from fabric.coordinator.groups import (
    TRANSITIONS,
    GroupCoordinator,
    GroupState,
    IllegalStateTransition,
    _to,
    heartbeat_slack_ms,
)
from fabric.coordinator.sqlite_store import SqliteCoordinator

G = "g"


@pytest.fixture
def gc() -> GroupCoordinator:
    counter = itertools.count()
    return GroupCoordinator(new_member_id=lambda client: f"m{next(counter)}")


class Topics(dict):
    """Partition counts the tests can grow; unknown topics have 0 partitions."""

    def __call__(self, topic: str) -> int:
        return self.get(topic, 0)


def req(member_id: str = "", topics: tuple[str, ...] = ("t",), **kw) -> JoinRequest:
    return JoinRequest(G, member_id, topics, **kw)


def stable_pair(gc, parts, **kw) -> tuple[GroupState, str, str]:
    """Two members m0, m1 in a Stable generation 2."""
    s, r0 = gc.join(GroupState(), req(**kw), 0, parts)
    s, _ = gc.sync(s, r0.member_id, r0.generation, 0)
    s, r1 = gc.join(s, req(**kw), 1, parts)
    s, r0 = gc.join(s, req(r0.member_id, **kw), 2, parts)
    assert r0.ready and r0.generation == 2 and s.state == GroupStatus.COMPLETING_REBALANCE
    s, r1 = gc.join(s, req(r1.member_id, **kw), 3, parts)
    for r in (r0, r1):
        s, _ = gc.sync(s, r.member_id, r.generation, 4)
    assert s.state == GroupStatus.STABLE
    return s, r0.member_id, r1.member_id


# -- the transition table --------------------------------------------------------------------------------
def test_transition_table_covers_every_state_and_dead_is_terminal():
    assert set(TRANSITIONS) == set(GroupStatus)
    assert TRANSITIONS[GroupStatus.DEAD] == frozenset()
    for state, targets in TRANSITIONS.items():
        for target in set(GroupStatus) - targets:
            s = GroupState(state=state)
            with pytest.raises(IllegalStateTransition):
                _to(s, target)


def test_first_join_goes_empty_preparing_completing_then_sync_stable(gc):
    parts = Topics(t=3)
    s0 = GroupState()
    s, r = gc.join(s0, req(client_id="c"), 10, parts)
    assert s0.state == GroupStatus.EMPTY and s0.members == {}  # the input is never mutated
    assert (s.state, r.ready, r.generation, r.leader, r.protocol) == (
        GroupStatus.COMPLETING_REBALANCE, True, 1, "m0", "range")
    s, synced = gc.sync(s, "m0", 1, 11)
    assert s.state == GroupStatus.STABLE and synced.assignment == (("t", 0), ("t", 1), ("t", 2))


def test_new_member_triggers_rebalance_which_completes_when_all_rejoined(gc):
    parts = Topics(t=3)
    s, r0 = gc.join(GroupState(), req(), 0, parts)
    s, _ = gc.sync(s, "m0", 1, 0)
    s, r1 = gc.join(s, req(), 1, parts)
    assert s.state == GroupStatus.PREPARING_REBALANCE and not r1.ready and r1.member_id == "m1"
    s, rejoin = gc.heartbeat(s, "m0", 1, 2, parts)
    assert rejoin
    with pytest.raises(RebalanceInProgressError):
        gc.sync(s, "m0", 1, 2)
    s, r1 = gc.join(s, req("m1"), 3, parts)
    assert not r1.ready  # m0 has not rejoined yet
    s, r0 = gc.join(s, req("m0"), 4, parts)
    assert r0.ready and r0.generation == 2 and r0.members == ("m0", "m1")
    s, a0 = gc.sync(s, "m0", 2, 5)
    assert s.state == GroupStatus.COMPLETING_REBALANCE  # m1 has not fetched its assignment yet
    s, a1 = gc.sync(s, "m1", 2, 6)
    assert s.state == GroupStatus.STABLE
    assert (a0.assignment, a1.assignment) == ((("t", 0), ("t", 1)), (("t", 2),))


def test_leave_rebalances_and_last_leave_empties_the_group(gc):
    parts = Topics(t=2)
    s, m0, m1 = stable_pair(gc, parts)
    s, _ = gc.leave(s, m0, 5)
    assert s.state == GroupStatus.PREPARING_REBALANCE and set(s.members) == {m1}
    s, r = gc.join(s, req(m1), 6, parts)
    assert r.ready and r.generation == 3
    s, a = gc.sync(s, m1, 3, 7)
    assert a.assignment == (("t", 0), ("t", 1))
    s, _ = gc.leave(s, m1, 8)
    assert (s.state, s.generation, s.members, s.assignment) == (GroupStatus.EMPTY, 4, {}, {})
    with pytest.raises(UnknownMemberError):
        gc.leave(s, m1, 9)


def test_session_timeout_expires_member_lazily(gc):
    parts = Topics(t=2)
    s, m0, m1 = stable_pair(gc, parts, session_timeout_ms=1000)  # m0 stored at 0 (its later calls: in the slack)
    s, _ = gc.heartbeat(s, m1, 2, 900, parts)
    assert gc.expire(s, 1200).members.keys() == {m0, m1}
    s = gc.expire(s, 1201)  # session timeout + the 200 ms heartbeat slack after m0's stored heartbeat
    assert s.state == GroupStatus.PREPARING_REBALANCE and set(s.members) == {m1}
    with pytest.raises(UnknownMemberError):
        gc.heartbeat(s, m0, 2, 1006, parts)


def test_heartbeats_within_the_slack_write_nothing_and_expiry_allows_for_it(gc):
    parts = Topics(t=2)
    s, m0, _ = stable_pair(gc, parts, session_timeout_ms=1000)  # m0's heartbeat stored at 0
    slack = heartbeat_slack_ms(s.members[m0])
    assert slack == 200
    beaten, rejoin = gc.heartbeat(s, m0, 2, slack - 1, parts)
    assert beaten.to_json() == s.to_json() and not rejoin  # nothing to store
    assert m0 in gc.expire(beaten, slack - 1 + 1000).members  # alive a full session after its real heartbeat
    assert m0 not in gc.expire(beaten, 1000 + slack + 1).members
    beaten, _ = gc.heartbeat(s, m0, 2, slack, parts)
    assert beaten.members[m0].last_heartbeat_ms == slack


def test_a_waiting_member_asking_again_to_join_changes_nothing(gc):
    parts = Topics(t=2)
    s, m0, _ = stable_pair(gc, parts)
    s, _ = gc.join(s, req(), 10, parts)  # a third member starts a rebalance
    s, r0 = gc.join(s, req(m0), 11, parts)
    again, r0_again = gc.join(s, req(m0), 12, parts)
    assert not r0.ready and r0_again == r0 and again.to_json() == s.to_json()


def test_rebalance_timeout_removes_members_that_did_not_rejoin(gc):
    parts = Topics(t=2)
    s, m0, m1 = stable_pair(gc, parts, rebalance_timeout_ms=500, session_timeout_ms=60000)
    s, r2 = gc.join(s, req(rebalance_timeout_ms=500, session_timeout_ms=60000), 100, parts)
    assert s.rebalance_deadline_ms == 600
    s, r0 = gc.join(s, req(m0, rebalance_timeout_ms=500, session_timeout_ms=60000), 200, parts)
    s, r2 = gc.join(s, req(r2.member_id, rebalance_timeout_ms=500, session_timeout_ms=60000), 599, parts)
    assert not r2.ready and s.state == GroupStatus.PREPARING_REBALANCE
    s = gc.expire(s, 600)
    assert m1 not in s.members
    s, r2 = gc.join(s, req(r2.member_id, rebalance_timeout_ms=500, session_timeout_ms=60000), 601, parts)
    assert r2.ready and r2.members == (m0, r2.member_id) and s.generation == 3


def test_subscription_change_triggers_rebalance(gc):
    parts = Topics(t=2, u=2)
    s, m0, _ = stable_pair(gc, parts)
    same, r = gc.join(s, req(m0), 10, parts)
    assert same.state == GroupStatus.STABLE and r.ready and r.generation == 2  # unchanged rejoin: no rebalance
    s, r = gc.join(s, req(m0, topics=("t", "u")), 10, parts)
    assert s.state == GroupStatus.PREPARING_REBALANCE and not r.ready


def test_topic_gaining_partitions_is_detected_on_heartbeat(gc):
    parts = Topics(t=2)
    s, m0, m1 = stable_pair(gc, parts)
    s, rejoin = gc.heartbeat(s, m0, 2, 10, parts)
    assert not rejoin and s.state == GroupStatus.STABLE
    parts["t"] = 4
    s, rejoin = gc.heartbeat(s, m1, 2, 11, parts)
    assert rejoin and s.state == GroupStatus.PREPARING_REBALANCE
    s, _ = gc.join(s, req(m0), 12, parts)
    s, _ = gc.join(s, req(m1), 13, parts)
    assert s.partition_counts == {"t": 4} and sum(len(a) for a in s.assignment.values()) == 4


def test_static_member_takes_over_its_slot_without_rebalance(gc):
    parts = Topics(t=4)
    s, m0, m1 = stable_pair(gc, parts, group_instance_id="")
    s, rs = gc.join(s, req(group_instance_id="box-1"), 20, parts)
    s, _ = gc.join(s, req(m0), 21, parts)
    s, _ = gc.join(s, req(m1), 22, parts)
    static = rs.member_id
    for m in (m0, m1, static):
        s, _ = gc.sync(s, m, 3, 23)
    before = (s.generation, s.owned(static))
    s, again = gc.join(s, req(group_instance_id="box-1"), 30, parts)  # a restarted process
    assert again.ready and again.member_id != static and s.state == GroupStatus.STABLE
    assert (s.generation, s.owned(again.member_id)) == before
    with pytest.raises(UnknownMemberError):  # the old instance is fenced
        gc.heartbeat(s, static, 3, 31, parts)
    s, changed = gc.join(s, req(topics=("t", "u"), group_instance_id="box-1"), 32, parts)
    assert s.state == GroupStatus.PREPARING_REBALANCE and not changed.ready  # a new subscription does rebalance


def test_heartbeat_and_sync_reject_unknown_members_and_stale_generations(gc):
    parts = Topics(t=2)
    s, m0, _ = stable_pair(gc, parts)
    for call in (lambda: gc.sync(s, "nobody", 2, 9), lambda: gc.heartbeat(s, "nobody", 2, 9, parts)):
        with pytest.raises(UnknownMemberError):
            call()
    for call in (lambda: gc.sync(s, m0, 1, 9), lambda: gc.heartbeat(s, m0, 1, 9, parts),
                 lambda: gc.heartbeat(s, m0, 7, 9, parts)):
        with pytest.raises(IllegalGenerationError):
            call()
    with pytest.raises(UnknownMemberError):
        gc.join(s, req("nobody"), 9, parts)


def test_offset_commit_validation(gc):
    parts = Topics(t=2)
    gc.validate_commit(GroupState(), "", -1)  # a simple commit to a group without members
    s, m0, m1 = stable_pair(gc, parts)
    gc.validate_commit(s, m0, 2)
    with pytest.raises(IllegalGenerationError):
        gc.validate_commit(s, m0, 1)
    with pytest.raises(UnknownMemberError):
        gc.validate_commit(s, "", -1)
    gc.validate_commit(s, "", -1, transactional=True)  # a producer transaction's, as Kafka's TxnOffsetCommit
    with pytest.raises(UnknownMemberError):
        gc.validate_commit(s, "ghost", 2)
    with pytest.raises(IllegalGenerationError):  # a member's own transactional commit is fenced as any
        gc.validate_commit(s, m0, 1, transactional=True)
    s, r = gc.join(s, req(), 5, parts)
    s, _ = gc.join(s, req(m0), 6, parts)
    s, _ = gc.join(s, req(m1), 7, parts)
    assert s.state == GroupStatus.COMPLETING_REBALANCE
    with pytest.raises(RebalanceInProgressError):  # m0 has not fetched generation 3's assignment
        gc.validate_commit(s, m0, 3)
    s, _ = gc.sync(s, m0, 3, 8)
    gc.validate_commit(s, m0, 3)


@pytest.mark.parametrize("bad, error", [
    (dict(topics=()), InvalidConfigError),
    (dict(topics=("bad topic",)), InvalidTopicError),
    (dict(assignors=("fastest",)), InconsistentGroupProtocolError),
    (dict(assignors=()), InvalidConfigError),
    (dict(session_timeout_ms=0), InvalidConfigError),
    (dict(rebalance_timeout_ms=-5), InvalidConfigError),
    (dict(session_timeout_ms=3), InvalidSessionTimeoutError),  # under group.min.session.timeout.ms: endless rebalances
    (dict(session_timeout_ms=999), InvalidSessionTimeoutError),
    (dict(session_timeout_ms=1_800_001), InvalidSessionTimeoutError),  # over group.max.session.timeout.ms
    (dict(session_timeout_ms=2**31 - 1), InvalidSessionTimeoutError),  # 24 days: a dead member keeps its partitions
    (dict(session_timeout_ms=10**15), InvalidConfigError),  # absurd: over Kafka's int32
    (dict(rebalance_timeout_ms=2**31), InvalidConfigError),  # over Kafka's int32
    (dict(owned=(("t",),)), InvalidConfigError),
    (dict(group=""), InvalidGroupError),
])
def test_malformed_join_raises_and_changes_nothing(gc, bad, error):
    parts = Topics(t=2)
    s, m0, _ = stable_pair(gc, parts)
    before = s.to_json()
    with pytest.raises(error):
        gc.join(s, replace(req(m0), **bad), 50, parts)
    assert s.to_json() == before


def test_a_coordinator_may_allow_longer_sessions_and_its_refusal_names_the_key(gc):
    parts = Topics(t=2)
    with pytest.raises(InvalidSessionTimeoutError, match=r"over this coordinator's group.max.session.timeout.ms "
                                                         r"\(1800000\)"):
        gc.join(GroupState(), req(session_timeout_ms=3_600_000), 1, parts)
    gc.max_session_timeout_ms = 3_600_000
    _, joined = gc.join(GroupState(), req(session_timeout_ms=3_600_000), 1, parts)
    assert joined.ready


def test_a_new_member_past_group_max_size_is_refused_and_the_members_keep_their_places(gc):
    """group.max.size: the join that would make a member more is refused, nothing changed, naming the key; the
    members rejoin (a static one taking its slot back), and once one leaves a new one fits."""
    parts = Topics(t=4)
    gc.max_size = 2
    s, r0 = gc.join(GroupState(), req(group_instance_id="box-1"), 0, parts)
    s, _ = gc.sync(s, r0.member_id, r0.generation, 0)
    s, r1 = gc.join(s, req(), 1, parts)
    before = s.to_json()
    with pytest.raises(GroupMaxSizeReachedError, match=r"group 'g' is full: this coordinator's group.max.size "
                                                        r"is 2 and it has 2; use another group.id"):
        gc.join(s, req(), 2, parts)
    assert s.to_json() == before
    s, again = gc.join(s, req(r1.member_id), 3, parts)
    s, static = gc.join(s, req(group_instance_id="box-1"), 4, parts)  # a restarted static member
    assert again.member_id == r1.member_id and static.member_id not in (r0.member_id, r1.member_id)
    assert sorted(s.members) == sorted((r1.member_id, static.member_id))
    s, _ = gc.leave(s, r1.member_id, 5)
    s, third = gc.join(s, req(), 6, parts)
    assert sorted(s.members) == sorted((static.member_id, third.member_id))


def test_a_group_over_a_lowered_group_max_size_keeps_the_first_members_to_rejoin(gc):
    """group.max.size lowered under a group's size (a coordinator restarted with a smaller limit): the next heartbeat
    starts a rebalance, which completes once the limit's worth of members rejoined, without the rest (Kafka evicts
    the last to rejoin); an evicted member is unknown, and joining again it is refused as any new member past the
    limit is. The members kept share every partition."""
    parts = Topics(t=4)
    s, ids = GroupState(), []
    for now in range(3):
        s, joined = gc.join(s, req(), now, parts)
        ids.append(joined.member_id)
    for mid in ids:
        s, joined = gc.join(s, req(mid), 3, parts)
    for mid in ids:
        s, _ = gc.sync(s, mid, joined.generation, 4)
    assert s.state == GroupStatus.STABLE and len(s.members) == 3
    generation = s.generation
    gc.max_size = 2
    s, rejoin = gc.heartbeat(s, ids[1], generation, 5, parts)
    assert rejoin and s.state == GroupStatus.PREPARING_REBALANCE
    s, first = gc.join(s, req(ids[2]), 6, parts)
    assert not first.ready and s.state == GroupStatus.PREPARING_REBALANCE
    s, second = gc.join(s, req(ids[0]), 7, parts)
    assert second.ready and second.generation == generation + 1 and second.members == tuple(sorted(ids[::2]))
    assert sorted(s.members) == sorted(ids[::2]) and s.rebalance_deadline_ms > 7  # well before the deadline
    owned = [gc.sync(s, mid, second.generation, 8)[1].assignment for mid in ids[::2]]
    assert sorted(tp for tps in owned for tp in tps) == [("t", p) for p in range(4)]
    with pytest.raises(UnknownMemberError):
        gc.join(s, req(ids[1]), 9, parts)
    with pytest.raises(GroupMaxSizeReachedError, match=r"group.max.size is 2 and it has 2"):
        gc.join(s, req(), 10, parts)


def test_a_member_without_a_shared_assignor_is_refused(gc):
    parts = Topics(t=2)
    s, _, _ = stable_pair(gc, parts, assignors=("range",))
    with pytest.raises(InconsistentGroupProtocolError, match="every member"):
        gc.join(s, req(assignors=("roundrobin",)), 9, parts)
    s, r = gc.join(s, req(assignors=("roundrobin", "range")), 9, parts)
    assert not r.ready and s.state == GroupStatus.PREPARING_REBALANCE


def test_protocol_is_the_first_preference_all_members_support(gc):
    parts = Topics(t=2)
    s, r0 = gc.join(GroupState(), req(assignors=("cooperative-sticky", "roundrobin", "range")), 0, parts)
    assert r0.protocol == "cooperative-sticky"
    s, r1 = gc.join(s, req(assignors=("range", "roundrobin")), 1, parts)
    s, r0 = gc.join(s, req("m0", assignors=("cooperative-sticky", "roundrobin", "range")), 2, parts)
    assert r0.ready and r0.protocol == "roundrobin"


def test_delete_only_empty_groups_and_state_json_round_trip(gc):
    parts = Topics(t=2)
    s, _, _ = stable_pair(gc, parts)
    assert GroupState.from_json(s.to_json()) == s
    with pytest.raises(GroupNotEmptyError):
        gc.delete(s)
    assert gc.delete(GroupState()).state == GroupStatus.DEAD


# -- assignors ---------------------------------------------------------------------------------------------
def test_range_assignment_matches_kafka():
    members = {"c1": Subscription(("t0", "t1")), "c0": Subscription(("t0", "t1"))}
    got = range_assign(members, {"t0": 3, "t1": 3})
    assert got == {"c0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)], "c1": [("t0", 2), ("t1", 2)]}
    three = range_assign({m: Subscription(("t",)) for m in ("a", "b", "c")}, {"t": 7})
    assert three == {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4)], "c": [("t", 5), ("t", 6)]}


def test_roundrobin_assignment_matches_kafka():
    members = {"c0": Subscription(("t0", "t1")), "c1": Subscription(("t0", "t1"))}
    assert roundrobin_assign(members, {"t0": 3, "t1": 3}) == {
        "c0": [("t0", 0), ("t0", 2), ("t1", 1)], "c1": [("t0", 1), ("t1", 0), ("t1", 2)]}
    uneven = {"c0": Subscription(("t0",)), "c1": Subscription(("t0", "t1")), "c2": Subscription(("t0", "t1", "t2"))}
    assert roundrobin_assign(uneven, {"t0": 1, "t1": 2, "t2": 3}) == {
        "c0": [("t0", 0)], "c1": [("t1", 0)], "c2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]}


def test_assignor_registry_names_the_known_ones():
    assert set(ASSIGNORS) == {"range", "roundrobin", "cooperative-sticky"}
    with pytest.raises(InconsistentGroupProtocolError, match="range, roundrobin, cooperative-sticky"):
        assignor("sticky")


def test_cooperative_sticky_moves_only_what_must_move_in_two_rounds(gc):
    parts = Topics(t=6)
    coop = dict(assignors=("cooperative-sticky",))
    s, r0 = gc.join(GroupState(), req(**coop), 0, parts)
    s, a0 = gc.sync(s, "m0", 1, 0)
    assert len(a0.assignment) == 6
    s, r1 = gc.join(s, req(**coop), 1, parts)
    s, _ = gc.join(s, req("m0", owned=a0.assignment, **coop), 2, parts)
    s, r1 = gc.join(s, req("m1", **coop), 3, parts)
    s, first0 = gc.sync(s, "m0", 2, 4)
    s, first1 = gc.sync(s, "m1", 2, 5)
    assert len(first0.assignment) == 3 and first1.assignment == ()  # moving partitions withheld
    assert set(first0.assignment) < set(a0.assignment)
    assert s.state == GroupStatus.PREPARING_REBALANCE  # the follow-up round
    s, _ = gc.join(s, req("m0", owned=first0.assignment, **coop), 6, parts)
    s, r1 = gc.join(s, req("m1", **coop), 7, parts)
    s, second0 = gc.sync(s, "m0", 3, 8)
    s, second1 = gc.sync(s, "m1", 3, 9)
    assert s.state == GroupStatus.STABLE and second0.assignment == first0.assignment
    assert set(second1.assignment) == set(a0.assignment) - set(first0.assignment)


@dataclass
class Client:
    """A well-behaved cooperative consumer, as the simulation drives it."""

    topics: tuple[str, ...]
    member_id: str = ""
    generation: int = -1
    owned: tuple = ()
    joining: bool = True


def _assert_disjoint(clients: dict[str, Client]) -> None:
    seen: dict = {}
    for name, c in clients.items():
        for tp in c.owned:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {name} at once"
            seen[tp] = name


def _settle(gc, s: GroupState, clients: dict[str, Client], parts: Topics, now: int) -> GroupState:
    """Step every client (heartbeat, or join+sync) until the group is Stable and nobody wants to rejoin."""
    coop = ("cooperative-sticky",)
    for _ in range(30):
        for name in sorted(clients):
            c = clients[name]
            if not c.joining:
                s, c.joining = gc.heartbeat(s, c.member_id, c.generation, now, parts)
                continue
            s, r = gc.join(s, JoinRequest(G, c.member_id, c.topics, coop, owned=c.owned), now, parts)
            c.member_id = r.member_id
            if r.ready:
                s, a = gc.sync(s, c.member_id, r.generation, now)
                c.generation, c.owned, c.joining = r.generation, a.assignment, False
                _assert_disjoint(clients)
        settled = GroupStatus.STABLE if clients else GroupStatus.EMPTY
        if s.state == settled and not any(c.joining for c in clients.values()):
            return s
    raise AssertionError(f"the group did not settle: {s.state}")


ops = st.lists(st.tuples(st.sampled_from(["add", "remove", "resubscribe", "grow"]),
                         st.sampled_from([("a",), ("b",), ("a", "b")]), st.integers(0, 10)),
               min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(ops)
def test_cooperative_sticky_never_double_assigns(operations):
    counter = itertools.count()
    gc = GroupCoordinator(new_member_id=lambda client: f"m{next(counter):02d}")
    parts, s = Topics(a=3, b=2), GroupState()
    clients: dict[str, Client] = {}
    for step, (op, topics, pick) in enumerate(operations):
        names = sorted(clients)
        if op == "add" or not names:
            clients[f"c{step}"] = Client(topics)
        elif op == "remove":
            gone = clients.pop(names[pick % len(names)])
            s, _ = gc.leave(s, gone.member_id, step)
        elif op == "resubscribe":
            c = clients[names[pick % len(names)]]
            c.topics, c.joining = topics, True
        else:
            parts[topics[0]] += 1 + pick % 3
        s = _settle(gc, s, clients, parts, step)
        owned = sorted(tp for c in clients.values() for tp in c.owned)
        wanted = sorted((t, p) for t in {t for c in clients.values() for t in c.topics} for p in range(parts[t]))
        assert owned == wanted  # every subscribed partition is owned exactly once when settled
        if len({c.topics for c in clients.values()}) == 1:  # same subscription: balanced to within one
            loads = [len(c.owned) for c in clients.values()]
            assert max(loads) - min(loads) <= 1


# -- the SQLite store through the Coordinator interface ---------------------------------------------------
def test_sqlite_coordinator_groups(tmp_path):
    coord = SqliteCoordinator(str(tmp_path / "meta" / "metadata.db"))
    coord.create_topic("t", 2, {}, None)
    assert coord.describe_group("nothing").state == GroupStatus.DEAD
    coord.commit_offsets("offsets-only", {("t", 0): 5})
    assert coord.describe_group("offsets-only").state == GroupStatus.EMPTY
    r = coord.join_group(JoinRequest("live", "", ("t",)))
    assert r.ready and coord.sync_group("live", r.member_id, r.generation).assignment == (("t", 0), ("t", 1))
    assert coord.list_groups() == ["live", "offsets-only"]
    coord.commit_offsets("live", {("t", 0): 3}, generation=r.generation, member_id=r.member_id)
    with pytest.raises(IllegalGenerationError):
        coord.commit_offsets("live", {("t", 0): 9}, generation=r.generation - 1, member_id=r.member_id)
    with pytest.raises(UnknownMemberError):
        coord.commit_offsets("live", {("t", 0): 9})
    assert coord.committed("live")[("t", 0)].offset == 3
    with pytest.raises(GroupNotEmptyError):
        coord.delete_group("live")
    coord.heartbeat("live", r.member_id, r.generation)
    described = coord.describe_group("live")
    assert (described.state, described.generation, len(described.members)) == (GroupStatus.STABLE, 1, 1)
    coord.leave_group("live", r.member_id)
    coord.delete_group("live")
    assert coord.list_groups() == ["offsets-only"] and coord.describe_group("live").state == GroupStatus.DEAD
    coord.close()


def test_offsets_deletion_checks_the_subscriptions_again_under_the_partitions_lock(tmp_path):
    """A member subscribing to the topic after delete_offsets' first look but before its tombstones are written is
    seen by the check made under the offsets partition's write lock: refused, nothing deleted."""
    coord = SqliteCoordinator(str(tmp_path / "meta" / "metadata.db"))
    coord.create_topic("t", 2, {}, None)
    coord.commit_offsets("g", {("t", 0): 5, ("t", 1): 6})
    tombstones = coord.offsets_topic.delete_offsets

    def joined_meanwhile(*args, **kwargs):
        coord.join_group(JoinRequest("g", "", ("t",)))
        return tombstones(*args, **kwargs)
    coord.offsets_topic.delete_offsets = joined_meanwhile  # type: ignore[method-assign]
    with pytest.raises(GroupSubscribedToTopicError, match="group 'g' has live members subscribed to 't'"):
        coord.delete_offsets("g", [("t", 0)])
    assert {tp: c.offset for tp, c in coord.committed("g").items()} == {("t", 0): 5, ("t", 1): 6}
    coord.close()


def test_sqlite_group_store_compare_and_set(tmp_path):
    coord = SqliteCoordinator(str(tmp_path / "meta" / "metadata.db"))
    store = coord._groups.store
    assert store.write(G, GroupState(), 0)
    state, version = store.read(G)
    assert store.write(G, replace(state, generation=5), version)
    assert not store.write(G, replace(state, generation=6), version)  # a stale version loses
    assert store.load(G).generation == 5
    coord.close()


def test_a_state_written_by_a_later_release_loads_without_the_fields_this_one_does_not_know(gc):
    """A rolling upgrade: an instance of this release reads a group state a newer one wrote, with a field this one
    does not know (in the state and in a member), and keeps every field it does know."""
    s, m0, _ = stable_pair(gc, Topics(t=2))
    raw = json.loads(s.to_json())
    raw["later_field"] = {"anything": 1}
    raw["members"][m0]["later_member_field"] = 7
    loaded = GroupState.from_json(json.dumps(raw))
    assert loaded.to_json() == s.to_json()
