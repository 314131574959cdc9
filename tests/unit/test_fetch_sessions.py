"""A leader's fetch sessions (fabric/server/node/fetch_sessions.py, KIP-227) over a real ReplicaManager and its
logs: the opening fetch names every partition, later ones only what changed; an answer carries only the
partitions with something new; an append wakes a held fetch; epochs and ids are checked; a partition answered with
an error, or forgotten, leaves the session; every partition is still served once per SWEEP_MS. The leader's clocks
are the test's."""
from __future__ import annotations

import threading

import pytest

from fabric.common.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError, NotLeaderError
from fabric.common.types import LeaderAndIsr, NodeAssignment, PartitionAssignment, PartitionRegistration, TopicInfo
from fabric.server.node import fetch_sessions, progress_clock
from fabric.server.node.fetch_sessions import FetchSessions, SessionArgs
from fabric.server.node.replica_fetch import MAX_ID, ReplicaFetch
from fabric.server.node.replica_manager import ReplicaManager

THREE = PartitionRegistration(PartitionAssignment((1, 2, 3)), LeaderAndIsr(1, 0, (1, 2, 3), 0, 1))


@pytest.fixture()
def clock(monkeypatch) -> list[float]:
    """The leader's clock (ms) for its replicas' progress and its sessions' sweeps."""
    now = [1_000_000.0]
    monkeypatch.setattr(progress_clock, "now_ms", lambda: now[0])
    return now


@pytest.fixture()
def leader(tmp_path, clock) -> ReplicaManager:
    """Node 1 leading t-0, t-1 and t-2, each replicated to nodes 2 and 3."""
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    replicas.apply(NodeAssignment(1, {("t", p): THREE for p in range(3)}, {"t": TopicInfo("t", 3)}))
    return replicas


def carried(fetch: fetch_sessions.SessionFetch) -> dict[int, object]:
    """The partitions a session fetch's answer carries, by number."""
    return {partition: answer for _, partition, answer in fetch.finish()}


def test_a_session_names_each_partition_once_and_its_answers_carry_what_changed(leader, storage) -> None:
    sessions = FetchSessions(leader)
    leader.append("t", 1, storage.make_batch([b"a", b"b"]), acks="1")
    opened = sessions.fetch(2, SessionArgs(0, 0), [("t", p, 0, 0, "") for p in range(3)], 1 << 20, 10 << 20, 0)
    first = carried(opened)
    assert set(first) == {0, 1, 2} and first[1].frames.size and not first[0].frames.size  # all, as they are
    session = opened.session_id
    assert 0 < session <= MAX_ID and len(sessions) == 1
    copied = carried(sessions.fetch(2, SessionArgs(session, 1), [("t", 1, 2, 0, "")], 1 << 20, 10 << 20, 0))
    assert copied == {}  # t-1 copied: nothing new to say of it (no frames, the same high watermark and log start)
    assert leader.replica("t", 1, 0).leader.followers[2].leo == 2  # the leader took the position named
    assert carried(sessions.fetch(2, SessionArgs(session, 2), [], 1 << 20, 10 << 20, 0)) == {}
    assert leader.replica("t", 1, 0).leader.followers[2].leo == 2  # and keeps it

    woken = threading.Event()
    held = sessions.fetch(2, SessionArgs(session, 3), [], 1 << 20, 10 << 20, 60_000)
    assert held.hold(woken.set) and not woken.is_set()  # nothing to answer: held
    leader.append("t", 2, storage.make_batch([b"c"]), acks="1")
    assert woken.wait(30)  # the append woke it
    answer = carried(held)
    assert set(answer) == {2} and answer[2].frames.size  # it carries the appended partition alone


def test_a_high_watermark_moved_by_another_follower_is_carried_without_a_wake(leader, storage) -> None:
    sessions = FetchSessions(leader)
    leader.append("t", 0, storage.make_batch([b"a"]), acks="1")
    names = [("t", p, 0, 0, "") for p in range(3)]
    two = sessions.fetch(2, SessionArgs(0, 0), names, 1 << 20, 10 << 20, 0)
    two.finish()
    three = sessions.fetch(3, SessionArgs(0, 0), names, 1 << 20, 10 << 20, 0)
    three.finish()
    sessions.fetch(2, SessionArgs(two.session_id, 1), [("t", 0, 1, 0, "")], 1 << 20, 10 << 20, 0).finish()
    woken = threading.Event()
    held = sessions.fetch(3, SessionArgs(three.session_id, 1), [("t", 0, 1, 0, "")], 1 << 20, 10 << 20, 60_000)
    answer = carried(held)  # follower 3 at 1 too: the high watermark moves to 1 as it is served
    assert answer[0].high_watermark == 1
    moved = sessions.fetch(2, SessionArgs(two.session_id, 2), [], 1 << 20, 10 << 20, 60_000)
    assert moved.hold(woken.set) and not woken.is_set()  # a high watermark alone wakes no one...
    assert carried(moved)[0].high_watermark == 1  # ...but the next answer carries it


def test_epochs_and_ids_are_checked_and_a_new_session_replaces_the_old(leader) -> None:
    sessions = FetchSessions(leader)
    names = [("t", p, 0, 0, "") for p in range(3)]
    first = sessions.fetch(2, SessionArgs(0, 0), names, 1 << 20, 10 << 20, 0)
    with pytest.raises(InvalidFetchSessionEpochError, match="at epoch 1, the fetch quotes 5"):
        sessions.fetch(2, SessionArgs(first.session_id, 5), [], 1 << 20, 10 << 20, 0)
    with pytest.raises(FetchSessionIdNotFoundError, match="no fetch session 12345 of follower 2"):
        sessions.fetch(2, SessionArgs(12345, 1), [], 1 << 20, 10 << 20, 0)
    with pytest.raises(FetchSessionIdNotFoundError):  # another follower's session is not its own
        sessions.fetch(3, SessionArgs(first.session_id, 1), [], 1 << 20, 10 << 20, 0)
    second = sessions.fetch(2, SessionArgs(0, 0), names, 1 << 20, 10 << 20, 0)
    assert second.session_id != first.session_id and len(sessions) == 1
    with pytest.raises(FetchSessionIdNotFoundError):
        sessions.fetch(2, SessionArgs(first.session_id, 1), [], 1 << 20, 10 << 20, 0)
    assert all(len(leader.replica("t", p, 0)._sessions) == 1 for p in range(3))  # the old one left them
    assert fetch_sessions.next_epoch(MAX_ID) == 1  # an epoch wraps, as Kafka's


def test_a_partition_answered_with_an_error_or_forgotten_leaves_the_session(leader) -> None:
    sessions = FetchSessions(leader)
    opened = sessions.fetch(2, SessionArgs(0, 0), [("t", p, 0, 0, "") for p in range(3)], 1 << 20, 10 << 20, 0)
    opened.finish()
    gone = PartitionRegistration(PartitionAssignment((1, 2, 3)), LeaderAndIsr(2, 1, (1, 2, 3), 1, 2))
    leader.apply(NodeAssignment(2, {("t", 0): gone, ("t", 1): THREE, ("t", 2): THREE}, {"t": TopicInfo("t", 3)}))
    answer = carried(sessions.fetch(2, SessionArgs(opened.session_id, 1), [], 1 << 20, 10 << 20, 0))
    assert isinstance(answer[0], NotLeaderError) and set(answer) == {0}  # woken by the end of its leadership
    assert not leader.hosted_replica(("t", 0))._sessions
    sessions.fetch(2, SessionArgs(opened.session_id, 2), [], 1 << 20, 10 << 20, 0).finish()
    forgot = sessions.fetch(2, SessionArgs(opened.session_id, 3, [("t", 1)]), [], 1 << 20, 10 << 20, 0)
    forgot.finish()
    assert not leader.replica("t", 1, 0)._sessions and leader.replica("t", 2, 0)._sessions


def test_every_partition_is_served_once_per_sweep_though_none_changed(leader, clock) -> None:
    sessions = FetchSessions(leader)
    opened = sessions.fetch(2, SessionArgs(0, 0), [("t", p, 0, 0, "") for p in range(3)], 1 << 20, 10 << 20, 0)
    opened.finish()
    progress = [leader.replica("t", p, 0).leader.followers[2] for p in range(3)]
    assert [p.caught_up_ms for p in progress] == [clock[0]] * 3
    epoch = 1
    for _ in range(3):  # a third of SWEEP_MS each time: a share of the partitions each, all of them in the end
        clock[0] += fetch_sessions.SWEEP_MS / 3
        assert carried(sessions.fetch(2, SessionArgs(opened.session_id, epoch), [], 1 << 20, 10 << 20, 0)) == {}
        epoch += 1
    assert all(p.caught_up_ms > 1_000_000.0 for p in progress)  # each follower's caught-up time refreshed


def test_answers_left_without_frames_by_the_response_limit_are_served_at_the_next_fetch(leader, storage) -> None:
    sessions = FetchSessions(leader)
    for p in range(3):
        leader.append("t", p, storage.make_batch([b"x" * 100]), acks="1")
    opened = sessions.fetch(2, SessionArgs(0, 0), [("t", p, 0, 0, "") for p in range(3)], 1 << 20, 1, 0)
    first = carried(opened)
    with_frames = [p for p, answer in first.items() if isinstance(answer, ReplicaFetch) and answer.frames.size]
    assert len(with_frames) == 1  # the first took the whole response; the others were answered without frames
    copied = [("t", p, 1, 0, "") for p in with_frames]
    later = carried(sessions.fetch(2, SessionArgs(opened.session_id, 1), copied, 1 << 20, 10 << 20, 0))
    assert sorted(p for p, answer in later.items() if answer.frames.size) == sorted(set(range(3)) - set(with_frames))
