"""A data node's partition replica (fabric/server/node/partition.py) over a real replica log: its role follows the
controller's states and only ever moves forward in leader epoch; requests are refused unless the node leads under
the quoted epoch; as leader, the high watermark is the minimum log end over the ISR, acks=all waits for it and
min.insync.replicas refuses writes; a follower's long poll ends on new frames or a leader change, not on a high
watermark move; a follower copies frames and takes the leader's high watermark and log start; retention and
DeleteRecords run at the leader only, below its high watermark."""
from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from fabric.common import trace
from fabric.common.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
)
from fabric.common.types import LeaderAndIsr, PartitionAssignment, PartitionRegistration
from fabric.common.waiting import wait_for
from fabric.server.node import progress_clock
from fabric.server.node.partition import ANSWER_FROM_MEMORY_MS, PartitionReplica, Role
from fabric.server.node.replica_fetch import FetchWaiter


def registration(leader: int | None, leader_epoch: int, isr: tuple[int, ...] = (1,), replicas: tuple[int, ...] = (1, 2),
                 partition_epoch: int | None = None) -> PartitionRegistration:
    return PartitionRegistration(PartitionAssignment(replicas), LeaderAndIsr(
        leader, leader_epoch, isr, leader_epoch if partition_epoch is None else partition_epoch, 1))


@pytest.fixture
def make_replica(tmp_path, replicas):
    """make_replica(node_id=1, **topic config) → a PartitionReplica of t-0 over a replica log of its own."""
    def make(node_id: int = 1, **config) -> PartitionReplica:
        plog = replicas.open(str(tmp_path / f"node{node_id}"), **config)
        return PartitionReplica(("t", 0), node_id, lambda: plog)
    return make


def test_the_role_follows_newer_epochs_and_ignores_stale_ones(make_replica) -> None:
    replica = make_replica()
    assert replica.state.role is Role.OFFLINE
    with pytest.raises(NotLeaderError, match="does not lead t-0"):
        replica.check_leader(None)
    assert replica.become(registration(1, 0))
    assert replica.check_leader(0).role is Role.LEADER and replica.check_leader(None).leader_epoch == 0
    assert replica.become(registration(2, 1, (2,)))
    assert replica.state.role is Role.FOLLOWER and replica.leader is None
    assert not replica.become(registration(1, 0))  # an older decision arriving late
    assert replica.state.role is Role.FOLLOWER
    assert replica.become(registration(None, 2, (2,)))
    assert replica.state.role is Role.OFFLINE
    assert not replica.become(registration(None, 2, (2,)))  # the same decision again changes nothing


def test_requests_quoting_another_epoch_are_refused(make_replica) -> None:
    replica = make_replica()
    replica.become(registration(1, 3))
    with pytest.raises(FencedLeaderEpochError, match="epoch 2 of t-0 is older than node 1's 3"):
        replica.check_leader(2)
    with pytest.raises(NotLeaderError, match="has not learned leader epoch 4"):
        replica.check_leader(4)


def test_a_fenced_replica_serves_nothing_until_a_newer_decision(make_replica) -> None:
    replica = make_replica()
    replica.become(registration(1, 3))
    replica.fence("the node's registration lapsed")
    assert replica.state.role is Role.OFFLINE and replica.state.leader_epoch == 3 and replica.leader is None
    with pytest.raises(NotLeaderError):
        replica.check_leader(3)
    assert replica.become(registration(1, 3))  # the controller's state again (it may still name this node)
    assert replica.state.role is Role.LEADER


def test_the_high_watermark_is_the_minimum_log_end_over_the_isr(make_replica, storage) -> None:
    leader = make_replica()
    leader.become(registration(1, 0, isr=(1, 2)))
    assert leader.append(storage.make_batch([b"a", b"b"]), "none", 0, "1", 5) == 0
    assert leader.hw == 0  # follower 2's log end is unknown until it fetches
    assert leader.read(0, 1 << 20, None, 0) == []  # consumers read below the high watermark only
    answer = leader.serve_follower(2, 0, 0, 1 << 20)
    assert answer.frames.size and answer.log_end == 2 and leader.hw == 0
    follower = make_replica(2)
    follower.become(registration(1, 0, isr=(1, 2)))
    follower.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
    assert follower.log.end_offset == 2 and follower.hw == 0
    assert leader.serve_follower(2, 0, 2, 1 << 20).frames.size == 0
    assert leader.hw == 2 and [r.offset for r in leader.read(0, 1 << 20, None, 0)] == [0]
    with pytest.raises(OffsetOutOfRangeError, match="past the leader's log end 2: it must truncate first"):
        leader.serve_follower(2, 0, 3, 1 << 20)
    with pytest.raises(IneligibleReplicaError, match="node 3 is not a follower of t-0"):
        leader.serve_follower(3, 0, 0, 1 << 20)
    with pytest.raises(FencedLeaderEpochError):
        leader.serve_follower(2, -1, 0, 1 << 20)


def test_a_replica_fetch_reads_the_watermark_and_lists_the_segments_once(make_replica, storage, count_calls) -> None:
    leader, follower = make_replica(), make_replica(2)
    for replica in (leader, follower):
        replica.become(registration(1, 0, isr=(1, 2)))
    for _ in range(3):
        leader.append(storage.make_batch([b"a", b"b"]), "none", 0, "1", 5)
    leader.log.delete_records(2)
    reads, listings = count_calls(leader.log.hw, "read"), count_calls(leader.log, "segments")
    follower.restart_at(0, 2, 0)
    answer = leader.serve_follower(2, 0, 2, 1 << 20)
    assert (reads(), listings()) == (1, 1)  # the log end, the log start and the frames' range from one look
    assert (answer.log_start, answer.log_end) == (leader.log.start_offset, leader.log.end_offset) == (2, 6)
    follower_reads = count_calls(follower.log.hw, "read")
    follower.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
    assert follower_reads() == 1 and follower.log.end_offset > 2  # one read, where it read two


def _waiting_fetch(leader: PartitionReplica, follower: int, offset: int) -> tuple[threading.Thread, list]:
    """Follower `follower` fetches from the leader's log end `offset` on a thread, as ReplicaManager.replica_fetch
    does: its progress recorded, then (no frames) waiting up to 60 s on an event the partition sets, then asking
    again; return once it waits."""
    answers: list = []
    event = FetchWaiter()

    def fetch() -> None:
        assert not leader.serve_follower(follower, 0, offset, 1 << 20).frames.size
        if leader.watch(event, 0, offset):
            assert event.wait(60) == {leader.tp}
            leader.unwatch(event)
        answers.append(leader.serve_follower(follower, 0, offset, 1 << 20) if leader.leader else None)
    thread = threading.Thread(target=fetch)
    thread.start()
    wait_for(lambda: event in leader._fetch_waiters, 30, f"follower {follower}'s fetch")
    return thread, answers


def test_a_waiting_follower_fetch_ends_on_new_frames_or_a_leader_change_not_on_a_high_watermark_move(
        make_replica, storage) -> None:
    """As Kafka's delayed fetch: a high watermark move alone does not answer a follower's long poll (waking it
    cost every replicated write one more round trip); the follower learns the watermark from its next answer,
    within replica.fetch.wait.max.ms."""
    leader = make_replica()
    leader.become(registration(1, 0, isr=(1, 2, 3), replicas=(1, 2, 3)))
    leader.append(storage.make_batch([b"a", b"b"]), "none", 0, "1", 5)
    waiting, answers = _waiting_fetch(leader, 3, 2)  # follower 3 holds both records
    assert leader.serve_follower(2, 0, 2, 1 << 20).high_watermark == 2  # follower 2 too: the watermark moves
    assert waiting.is_alive() and not answers  # follower 3's fetch still waits
    leader.append(storage.make_batch([b"c"]), "none", 0, "1", 5)  # new frames answer it
    waiting.join(30)
    assert len(answers) == 1 and answers[0].frames.size and answers[0].log_end == 3
    assert answers[0].high_watermark == 2  # the move it was not woken for
    waiting, answers = _waiting_fetch(leader, 3, 3)
    # follower 2 moves the watermark with its fetch and learns it from that fetch's answer, after its max wait
    assert leader.serve_follower(2, 0, 3, 1 << 20).high_watermark == 3
    assert waiting.is_alive() and not answers
    leader.become(registration(2, 1, isr=(2, 3), replicas=(1, 2, 3)))  # a new leader: the fetch ends at once
    waiting.join(30)
    assert not waiting.is_alive() and answers == [None]  # woken, it finds this node no longer leads


def test_acks_all_waits_for_the_isr_and_min_insync_replicas_refuses(make_replica, storage) -> None:
    leader = make_replica(**{"min.insync.replicas": "2"})
    leader.become(registration(1, 0, isr=(1, 2)))
    leader.serve_follower(2, 0, 0, 1 << 20)  # follower 2 is at the log end (0)
    with pytest.raises(RequestTimedOutError, match=r"offsets 0\.\.0 of t-0 were not replicated"):
        leader.append(storage.make_batch([b"a"]), "none", 0, "all", 0.05)
    done: list[int] = []
    writer = threading.Thread(target=lambda: done.append(leader.append(storage.make_batch([b"b"]), "none", 0,
                                                                        "all", 30)))
    writer.start()
    leader.changed.acquire()
    leader.changed.wait_for(lambda: leader.log.end_offset == 2, 30)
    leader.changed.release()
    leader.serve_follower(2, 0, 2, 1 << 20)  # the follower has both: the write is acknowledged
    writer.join(30)
    assert done == [1] and leader.hw == 2
    leader.become(registration(1, 0, isr=(1,), partition_epoch=1))  # the controller dropped follower 2
    with pytest.raises(NotEnoughReplicasError, match=r"1 in-sync replica\(s\) \[1\], below its min.insync.replicas 2"):
        leader.append(storage.make_batch([b"c"]), "none", 0, "all", 5)
    assert leader.log.end_offset == 2  # nothing written
    assert leader.append(storage.make_batch([b"c"]), "none", 0, "1", 5) == 2
    assert leader.hw == 2  # KIP-966: the watermark waits for min.insync.replicas members
    leader.become(registration(1, 0, isr=(1, 2), partition_epoch=2))
    errors: list[Exception] = []

    def write() -> None:
        try:
            leader.append(storage.make_batch([b"d"]), "none", 0, "all", 30)
        except NotEnoughReplicasAfterAppendError as exc:
            errors.append(exc)
    writer = threading.Thread(target=write)
    writer.start()
    leader.changed.acquire()
    leader.changed.wait_for(lambda: leader.log.end_offset == 4, 30)
    leader.changed.release()
    leader.become(registration(1, 0, isr=(1,), partition_epoch=3))
    writer.join(30)
    assert errors and "fell below min.insync.replicas 2" in str(errors[0])


def test_the_leader_asks_to_shrink_laggards_and_to_add_caught_up_followers(make_replica, storage) -> None:
    leader = make_replica()
    leader.become(registration(1, 0, isr=(1, 2), replicas=(1, 2, 3)))
    leader.append(storage.make_batch([b"a"]), "none", 0, "1", 5)
    assert leader.wanted_isr(60_000) is None  # follower 2 is within replica.lag.time.max.ms
    assert leader.isr_upkeep_due(60_000)  # follower 3 is out of the ISR: upkeep looks at it each round
    state, wanted = leader.wanted_isr(0) or (None, None)
    assert wanted == (1,)  # follower 2 never fetched within a lag of 0 ms
    assert leader.wanted_isr(0) is None  # a change is pending: no second one
    leader.isr_changed(state, LeaderAndIsr(1, 0, (1,), 1, 1))
    assert leader.leader.isr == (1,) and leader.hw == 1
    leader.serve_follower(3, 0, 1, 1 << 20)  # follower 3 caught up with the high watermark
    state, wanted = leader.wanted_isr(60_000) or (None, None)
    assert wanted == (1, 3)
    leader.isr_refused(state)  # e.g. a stale partition epoch: decided again next round
    assert leader.wanted_isr(60_000)[1] == (1, 3)


def test_a_follower_never_writes_after_its_epoch_moved_on(make_replica, storage, replicas) -> None:
    leader, follower = make_replica(), make_replica(2)
    leader.become(registration(1, 0, isr=(1, 2)))
    leader.append(storage.make_batch([b"a"]), "none", 0, "1", 5)
    follower.become(registration(1, 0, isr=(1, 2)))
    answer = leader.serve_follower(2, 0, 0, 1 << 20)
    follower.become(registration(2, 1, isr=(2,)))  # it leads now: the old fetch's frames are not appended
    follower.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
    follower.truncate_follower(0, 0)
    assert follower.log.end_offset == 0


def test_a_follower_out_of_the_isr_rejoins_only_on_its_new_fetches(make_replica, storage) -> None:
    """KIP-903: a follower that left the ISR (dead, perhaps back with an empty disk) is not added again on the
    progress of its earlier incarnation, only once its own fetches reach the high watermark."""
    leader = make_replica()
    leader.become(registration(1, 0, isr=(1, 2)))
    leader.append(storage.make_batch([b"a", b"b"]), "none", 0, "1", 5)
    leader.serve_follower(2, 0, 2, 1 << 20)  # follower 2 holds everything
    leader.become(registration(1, 0, isr=(1,), partition_epoch=1))  # the controller declared it dead
    assert leader.wanted_isr(60_000) is None  # its old progress does not count
    leader.serve_follower(2, 0, 0, 1 << 20)  # back with an empty log
    assert leader.wanted_isr(60_000) is None
    leader.serve_follower(2, 0, 2, 1 << 20)  # caught up again
    assert leader.wanted_isr(60_000)[1] == (1, 2)


def test_a_follower_behind_a_compacted_leader_copies_again_from_the_leaders_frame_spanning_its_end(
        make_replica, storage) -> None:
    """Each replica cleans its own copy, so a follower out of the ISR can end inside a gap frame of its leader's
    cleaned range: it cuts back to its own frame holding the gap's start and copies the leader's frames from
    there, ending with the leader's records at the same offsets."""
    config = dict(cleanup_policy="compact", segment_bytes=8000)
    leader, follower = make_replica(1, **config), make_replica(2, **config)
    leader.become(registration(1, 0, isr=(1,)))
    follower.become(registration(1, 0, isr=(1,)))
    for r in range(12):
        for k in range(0, 6, 2):
            keys = [f"k{j}".encode() for j in (k, k + 1)]
            rows = storage.make_batch([f"r{r}-{key.decode()}".encode() * 4 for key in keys])
            leader.append(rows.set_column(1, "key", pa.array(keys, pa.binary())), "none", 0, "1", 5)
    while follower.log.end_offset < leader.log.end_offset:  # copied before the leader cleans
        follower.append_copied(0, leader.log.read_frames(follower.log.end_offset, 300), 0, 0)
    leader.hw = leader.log.end_offset  # as if the ISR had it all
    assert leader.log.clean(force=True).records_removed
    gaps = [h for h in leader.log.headers(leader.log.end_offset) if h.is_gap and h.record_count >= 4]
    middle = gaps[0].base_offset + 2  # a boundary of the follower's (2-record) frames, inside the leader's gap
    follower.log.truncate_to(middle)  # the follower fell behind there (out of the ISR)
    for _ in range(200):
        if follower.log.end_offset == leader.log.end_offset:
            break
        follower.append_copied(0, leader.log.read_frames(follower.log.end_offset, 300), leader.hw,
                               leader.log.start_offset)
    assert follower.log.end_offset == leader.log.end_offset and follower.hw == leader.hw
    assert storage.keyed_records(follower.log) == storage.keyed_records(leader.log)


def _fill(leader: PartitionReplica, storage, batches: int) -> None:
    for i in range(batches):
        leader.append(storage.make_batch([f"v{i}-{j}".encode() * 40 for j in range(3)]), "none", 0, "1", 5)


def _follow(leader: PartitionReplica, follower: PartitionReplica, node: int = 2) -> None:
    """Fetch as the fetcher does until the follower's log end reaches the leader's."""
    for _ in range(500):
        offset = follower.log.end_offset
        answer = leader.serve_follower(node, 0, offset, 1500)
        if offset < answer.log_start:
            follower.restart_at(0, answer.log_start, offset)
            continue
        follower.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
        if follower.log.end_offset == answer.log_end and not answer.frames.size:
            return
    raise AssertionError("the follower did not catch up")


def test_retention_runs_at_the_leader_below_its_high_watermark_and_followers_take_its_log_start(
        make_replica, storage) -> None:
    config = dict(retention_bytes=4000)
    leader, follower = make_replica(1, **config), make_replica(2, **config)
    leader.become(registration(1, 0, isr=(1, 2)))
    follower.become(registration(1, 0, isr=(1, 2)))
    _fill(leader, storage, 20)
    assert follower.log.enforce_retention() == 0  # a follower applies no retention of its own
    assert leader.log.enforce_retention() == 0  # nothing is below the high watermark yet (follower 2 has nothing)
    _follow(leader, follower)
    assert leader.hw == leader.log.end_offset == 60
    deleted = leader.enforce_retention(0)
    start = leader.log.start_offset
    assert deleted and start > 0 and leader.log.size_bytes() < 6000
    assert follower.log.start_offset == 0 and follower.log.enforce_retention() == 0
    _follow(leader, follower)  # the next fetch answer carries the leader's log start
    assert follower.log.start_offset == start and follower.log.segments()[0].base_offset == start
    with pytest.raises(OffsetOutOfRangeError):
        follower.log.fetch(start - 1, 1 << 20)
    assert storage.read_all(follower.log) == storage.read_all(leader.log)
    follower.become(registration(2, 1, isr=(2,)))  # a new leader's retention goes on from its own log
    assert follower.log.enforce_retention() == 0 and follower.log.start_offset == start


def test_a_follower_at_the_log_end_is_answered_from_memory_until_something_changes(make_replica, storage,
                                                                                 monkeypatch) -> None:
    """A follower's fetch covers every partition it copies from the leader, most of them idle: one fetching again
    at the log end with nothing appended since is answered from memory, yet it gets new frames at once, and a
    log start moved by the node's background retention once ANSWER_FROM_MEMORY_MS has passed (the leader's clock
    is the test's)."""
    clock = [1_000_000.0]
    monkeypatch.setattr(progress_clock, "now_ms", lambda: clock[0])
    leader, follower = make_replica(1, retention_bytes=4000), make_replica(2, retention_bytes=4000)
    leader.become(registration(1, 0, isr=(1, 2)))
    follower.become(registration(1, 0, isr=(1, 2)))
    _fill(leader, storage, 20)
    _follow(leader, follower)
    end = leader.log.end_offset
    assert leader.hw == end and leader.serve_follower(2, 0, end, 1 << 20).log_start == 0
    assert leader.log.enforce_retention() > 0  # as the node's maintenance does, past the replica
    start = leader.log.start_offset
    assert start > 0 and leader.serve_follower(2, 0, end, 1 << 20).log_start == 0  # from memory
    clock[0] += ANSWER_FROM_MEMORY_MS - 1
    assert leader.serve_follower(2, 0, end, 1 << 20).log_start == 0  # still from memory
    clock[0] += 1
    assert leader.serve_follower(2, 0, end, 1 << 20).log_start == start  # read from the log again
    _fill(leader, storage, 1)
    answer = leader.serve_follower(2, 0, end, 1 << 20)
    assert answer.frames.size and answer.log_end == end + 3 and answer.log_start == start
    assert leader.leader.followers[2].leo == end  # its progress is recorded either way


def test_a_followers_fetch_after_copying_an_append_moves_the_high_watermark_from_memory(
        make_replica, storage, count_calls) -> None:
    """After each append a follower copies the frames and fetches again from the new log end: that fetch is
    answered from memory (no watermark read, no listing), records the follower's progress and moves the high
    watermark, settling the held acks=all write; a consumer at the high watermark reads no file either."""
    leader, follower = make_replica(), make_replica(2)
    for replica in (leader, follower):
        replica.become(registration(1, 0, isr=(1, 2)))
    _fill(leader, storage, 2)
    _follow(leader, follower)
    end = leader.log.end_offset
    held = leader.append_held(storage.make_batch([b"x", b"y"]), "none", 0, "all", 30)
    answer = leader.serve_follower(2, 0, end, 1 << 20)  # the frames, read from the log
    follower.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
    assert not held.future.done() and leader.hw == end
    leader.readable_end()  # (the partition's transaction state, read from its frames once)
    reads, listings = count_calls(leader.log.hw, "read"), count_calls(leader.log, "segments")
    fetches = count_calls(leader.log, "fetch")
    again = leader.serve_follower(2, 0, end + 2, 1 << 20)
    assert (again.frames.size, again.log_end, again.high_watermark, again.log_start) == (0, end + 2, end + 2, 0)
    assert leader.hw == end + 2 and leader.leader.followers[2].leo == end + 2 and held.wait() == end
    assert leader.read(end + 2, 1 << 20, None, 0) == []
    assert (reads(), listings(), fetches()) == (0, 0, 0)
    assert [r.offset for r in leader.read(end, 1 << 20, None, 0)] == [end] and fetches() == 1
    listed = listings()
    _fill(leader, storage, 1)  # an append since its last answer: read from the log again
    assert leader.serve_follower(2, 0, end + 2, 1 << 20).frames.size and listings() == listed + 1


def test_delete_records_at_the_leader_stops_at_its_high_watermark_and_reaches_the_followers(
        make_replica, storage) -> None:
    leader, follower = make_replica(1), make_replica(2)
    leader.become(registration(1, 0, isr=(1, 2)))
    follower.become(registration(1, 0, isr=(1, 2)))
    _fill(leader, storage, 10)
    _follow(leader, follower)
    _fill(leader, storage, 2)  # offsets 30..35 are past the high watermark (not fetched by follower 2 yet)
    assert leader.hw == 30 and leader.log.end_offset == 36
    with pytest.raises(OffsetOutOfRangeError, match="up to its high watermark 30"):
        leader.delete_records(31, 0)
    with pytest.raises(NotLeaderError):
        follower.delete_records(5, 0)
    assert leader.delete_records(-1, 0) == 30 and leader.log.start_offset == 30
    assert storage.read_all(leader.log, 30) and leader.log.end_offset == 36  # the records past it stay
    _follow(leader, follower)
    assert follower.log.start_offset == 30 and follower.log.end_offset == 36
    assert storage.read_all(follower.log) == storage.read_all(leader.log)


def test_a_follower_behind_the_leaders_log_start_starts_again_there(make_replica, storage) -> None:
    """Kafka's OFFSET_OUT_OF_RANGE handling: the leader answers a fetch below its log start with no frames and its
    log start; the follower truncates fully and starts there (the leader's frame holding it, as the log start may
    be inside one), never fetching the deleted offsets again."""
    leader, follower = make_replica(1), make_replica(2)
    leader.become(registration(1, 0, isr=(1,)))
    follower.become(registration(1, 0, isr=(1,)))
    _fill(leader, storage, 4)
    follower.append_copied(0, leader.log.read_frames(0, 1), 0, 0)  # it copied one frame, then stopped
    _fill(leader, storage, 10)
    leader.hw = leader.log.end_offset
    assert leader.delete_records(40, 0) == 40  # inside the frame of offsets 39..41
    answer = leader.serve_follower(2, 0, 3, 1 << 20)
    assert answer.frames.size == 0 and answer.log_start == 40
    _follow(leader, follower)
    assert follower.log.start_offset == 40 and follower.log.end_offset == leader.log.end_offset
    assert storage.read_all(follower.log) == storage.read_all(leader.log)
    follower.truncate_follower(0, 12)  # below its log start: truncated fully, as Kafka's truncateTo does
    assert follower.log.start_offset == follower.log.end_offset == 12
    _follow(leader, follower)
    assert follower.log.start_offset == 40 and storage.read_all(follower.log) == storage.read_all(leader.log)


def test_an_acks_all_write_traces_its_replication_steps_in_order_and_nothing_when_tracing_is_off(
        make_replica, storage, tmp_path) -> None:
    """The leader's and the follower's steps of one acks=all write, as the latency budget reads them
    (bench.latency_trace): each once, in the order replication takes, with the offsets they concern."""
    path = str(tmp_path / "trace.jsonl")
    leader, follower = make_replica(**{"min.insync.replicas": "2"}), make_replica(2)
    for replica in (leader, follower):
        replica.become(registration(1, 0, isr=(1, 2)))
    leader.serve_follower(2, 0, 0, 1 << 20)  # follower 2 is at the log end (0)
    trace.start(path)
    try:
        done: list[int] = []
        writer = threading.Thread(target=lambda: done.append(leader.append(storage.make_batch([b"a", b"b"]), "none",
                                                                            0, "all", 30)))
        writer.start()
        wait_for(lambda: [e.step for e in trace.read(path)] == ["append_started", "leader_append"], 30,
                 "the leader's append")
        answer = leader.serve_follower(2, 0, 0, 1 << 20)
        follower.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
        leader.serve_follower(2, 0, 2, 1 << 20)  # the follower has both: the write is acknowledged
        writer.join(30)
    finally:
        trace.stop()
    assert done == [0]
    events = trace.read(path)
    assert [(e.step, e.start, e.end, e.node) for e in events] == [
        ("append_started", -1, -1, 1), ("leader_append", 0, 2, 1), ("follower_fetch", 0, 2, 2),
        ("follower_append", 0, 2, 2), ("follower_fetch", 2, 2, 2), ("high_watermark", -1, 2, 1)]
    assert all((e.topic, e.partition) == ("t", 0) for e in events)
    assert [e.ns for e in events] == sorted(e.ns for e in events)
    leader.append(storage.make_batch([b"c"]), "none", 0, "1", 5)  # tracing off
    answer = leader.serve_follower(2, 0, 2, 1 << 20)
    follower.append_copied(0, answer.frames, answer.high_watermark, answer.log_start)
    leader.serve_follower(2, 0, 3, 1 << 20)
    assert leader.hw == 3 and trace.read(path) == events
