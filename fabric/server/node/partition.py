"""One partition replica hosted by a data node (Kafka's Partition): its role as an explicit state machine with
leader epochs, its log, and the high watermark replication gives it.

States (docs/replication.md, "Replication on the nodes"):
- OFFLINE: the node serves nothing of it (not yet told, the partition has no leader, the node is fenced, or
  it is no longer assigned here).
- LEADER(epoch): the controller made this node the leader under `epoch`: it appends, tracks its followers
  (a LeaderState) and serves consumers below the high watermark and followers their frames.
- FOLLOWER(epoch): another node leads under `epoch`; a fetcher (fetcher.py) copies the leader's frames and the
  leader's high watermark into it (follower_copy.py).

Transitions come from the controller's states (`become`): a state with a higher leader epoch moves to LEADER
or FOLLOWER (or OFFLINE when it has no leader); the same epoch only refreshes the ISR and partition epoch; an
older one is stale and ignored, so the node never moves back in epoch. `fence` (the node's own registration
lapsed, or the partition left it) moves to OFFLINE keeping the epoch: the controller's next state decides again
(a lapsed node's partitions carry a newer epoch by then, a deleted partition none).

A request quotes the leader epoch the client knows (`check_leader`): one for an older epoch is refused with
FencedLeaderEpochError, one the node does not lead with NotLeaderError (both retriable: the client refreshes
its metadata). Every change of role, ISR, log end or high watermark notifies `changed`, which consumers' long
polls wait on (or, held on a node's event loop, the waiters of `watch_readable`: consumer_fetches.py), and
settles the acks=all writes waiting for the high watermark (delayed_acks.py); a follower's fetch, which covers
many partitions, waits on an event each of them sets on new frames or the end of a leadership (`watch`).

The high watermark is checkpointed in the partition directory (hw_checkpoint, written by `checkpoint`), so a
restarted replica starts from it (at most its log end) rather than from zero.
"""
from __future__ import annotations

import concurrent.futures
import enum
import functools
import logging
import threading
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from fabric.common import trace
from fabric.common.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
)
from fabric.common.types import (
    EpochEndOffset,
    Fetched,
    LeaderAndIsr,
    PartitionRegistration,
    ProducerBatch,
    TopicPartition,
)
from fabric.server import partition_ops
from fabric.server.held import Held
from fabric.server.node import progress_clock
from fabric.server.node.delayed_acks import DelayedAcks
from fabric.server.node.follower_copy import FollowerCopy
from fabric.server.node.hw_checkpoint import HighWatermarkCheckpoint
from fabric.server.node.leader import FollowerProgress, LeaderState
from fabric.server.node.replica_fetch import NO_FRAMES, FetchWaiter, ReplicaFetch, SessionChanges
from fabric.storage.log import Log
from fabric.storage.reader import READ_COMMITTED

log = logging.getLogger(__name__)
# a follower fetching again at the log end, with nothing changed since its last answer, is answered from memory
# for this long; then from the log again (whatever moves the log start tells the replica: `_start_moved`; this
# bounds how long anything that did not would go unseen)
ANSWER_FROM_MEMORY_MS = 30_000


class Role(str, enum.Enum):
    OFFLINE = "Offline"
    LEADER = "Leader"
    FOLLOWER = "Follower"


@dataclass(frozen=True)
class ReplicaState:
    """The role, the leader epoch it holds under (-1 before any), and the registration it came from."""

    role: Role
    leader_epoch: int
    registration: PartitionRegistration | None = None


class PartitionReplica(FollowerCopy):
    """The replica of partition `tp` on node `node_id` over the log `open_log()` gives; thread-safe."""

    def __init__(self, tp: TopicPartition, node_id: int, open_log: Callable[[], Log]) -> None:
        self.tp, self.node_id, self._open_log = tp, node_id, open_log
        self._state = ReplicaState(Role.OFFLINE, -1)
        self._lock = threading.Lock()
        self.changed = threading.Condition(self._lock)
        self.leader: LeaderState | None = None
        self.hw = -1  # unknown until the log is first opened
        self._checkpoint = HighWatermarkCheckpoint()
        self._leader_start = -1  # the leader's log start this follower last took (-1: none since it restarted)
        self._fetch_waiters: set[FetchWaiter] = set()  # followers' fetches waiting for frames (watch)
        self.wants_producer_state: Callable[[], None] = lambda: None  # (set by the replica manager)
        self._sessions: set[SessionChanges] = set()  # followers' fetch sessions holding it (join_session)
        self._read_waiters: set[Callable[[], None]] = set()  # consumers' fetches waiting (watch_readable)
        self._changes = 0  # new frames or role changes so far (_wake_fetches)
        self._acks = DelayedAcks(f"{tp[0]}-{tp[1]}", node_id)  # acks=all writes waiting for the high watermark

    @property
    def state(self) -> ReplicaState:
        return self._state

    @property
    def name(self) -> str:
        return f"{self.tp[0]}-{self.tp[1]}"

    @property
    def log(self) -> Log:
        """The replica's log, whose cleaner stays below this replica's high watermark and whose retention runs
        only while this node leads, below the high watermark."""
        plog = self._open_log()
        plog.replication_high_watermark = self._known_hw
        plog.retention.leader_high_watermark = self._leader_hw
        plog.retention.start_moved = self._start_moved
        return plog

    def _known_hw(self) -> int:
        return self.hw

    def _leader_hw(self) -> int | None:
        """The high watermark while this node leads the partition; None otherwise (a follower applies no
        retention of its own: it takes its leader's log start from every fetch answer)."""
        hw = self.hw
        return hw if self._state.role is Role.LEADER and self.leader is not None and hw >= 0 else None

    def _load_hw(self, plog: Log) -> None:
        """The checkpointed high watermark, at most the log end, if none is known yet (lock held)."""
        if self.hw < 0:
            self.hw = self._checkpoint.load(plog)

    def min_isr(self, plog: Log) -> int:
        return int(plog.config["min.insync.replicas"])

    # -- the controller's decisions ---------------------------------------------------------------------
    def become(self, registration: PartitionRegistration) -> bool:
        """Apply the controller's state of the partition; True if the role or epoch changed."""
        new = registration.state
        with self.changed:
            old = self._state
            if new.leader_epoch < old.leader_epoch:
                return False  # an older decision than the one applied: stale
            if new.leader is None:
                role = Role.OFFLINE
            else:
                role = Role.LEADER if new.leader == self.node_id else Role.FOLLOWER
            changed = (role, new.leader_epoch) != (old.role, old.leader_epoch)
            if role is not Role.OFFLINE:
                self._load_hw(self.log)
            if changed and role is Role.LEADER:
                plog = self.log
                self.leader = LeaderState(self.name, self.node_id, new.leader_epoch, registration.assignment.replicas,
                                          new.isr, new.partition_epoch, self.hw, plog.end_offset,
                                          progress_clock.now_ms())
                self._advance(plog)
            elif changed:
                self.leader = None
            elif self.leader is not None:
                self.leader.replicas_changed(registration.assignment.replicas, progress_clock.now_ms())
                self.leader.isr_confirmed(new.isr, new.partition_epoch)
                self._advance(self.log)
            self._state = ReplicaState(role, new.leader_epoch, registration)
            self._wake_fetches()
        if changed:
            log.info("partition %s: %s(epoch %d) -> %s(epoch %d)", self.name, old.role.value, old.leader_epoch,
                     role.value, new.leader_epoch)
        return changed

    def fence(self, why: str) -> None:
        """Stop serving (keeping the epoch) until the controller's next state says otherwise."""
        with self.changed:
            old = self._state
            self._state = ReplicaState(Role.OFFLINE, old.leader_epoch, old.registration)
            self.leader = None
            self._wake_fetches()
        if old.role is not Role.OFFLINE:
            log.warning("partition %s: %s(epoch %d) -> Offline: %s", self.name, old.role.value, old.leader_epoch, why)

    def check_leader(self, leader_epoch: int | None) -> ReplicaState:
        """The state, if this node leads the partition under the epoch the request quotes (None: any)."""
        state = self._state
        if state.role is not Role.LEADER:
            leader = state.registration.state.leader if state.registration is not None else None
            raise NotLeaderError(f"node {self.node_id} does not lead {self.name} (it is {state.role.value} at leader "
                                 f"epoch {state.leader_epoch}; the leader is {leader}); refresh the metadata")
        if leader_epoch is not None and leader_epoch < state.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {leader_epoch} of {self.name} is older than node "
                                         f"{self.node_id}'s {state.leader_epoch}; refresh the metadata")
        if leader_epoch is not None and leader_epoch > state.leader_epoch:
            raise NotLeaderError(f"node {self.node_id} has not learned leader epoch {leader_epoch} of {self.name} "
                                 f"yet (it knows {state.leader_epoch}); retry")
        return state

    # -- leading ------------------------------------------------------------------------------------------
    def _leading(self, state: ReplicaState) -> LeaderState:
        """The LeaderState of the leadership `state` names (lock held); NotLeaderError once it has ended."""
        leader = self.leader
        if leader is None or leader.leader_epoch != state.leader_epoch:
            raise NotLeaderError(f"node {self.node_id} no longer leads {self.name}; refresh the metadata")
        return leader

    def _advance(self, plog: Log, leo: int | None = None) -> bool:
        """Move the high watermark as the leader's followers allow (lock held), given the log end `leo` if the
        caller has just read it; True if it moved."""
        if self.leader is None or not self.leader.advance_hw(plog.end_offset if leo is None else leo,
                                                             self.min_isr(plog)):
            return False
        self.hw = self.leader.hw
        for session in self._sessions:
            session.touch(self.tp)
        if trace.ON:
            trace.event("high_watermark", self.tp[0], self.tp[1], end=self.hw, node=self.node_id)
        self._notify()
        self._acks.settle(self.leader, self.hw)
        return True

    def append(self, rows: pa.RecordBatch, codec: str, leader_epoch: int | None, acks: str, timeout_s: float,
               producer: ProducerBatch | None = None, transactional: bool = False) -> int:
        """`append_held`, its answer waited for on this thread."""
        return int(self.append_held(rows, codec, leader_epoch, acks, timeout_s, producer, transactional).wait())

    def append_held(self, rows: pa.RecordBatch, codec: str, leader_epoch: int | None, acks: str, timeout_s: float,
                    producer: ProducerBatch | None = None, transactional: bool = False) -> Held:
        """Append as the leader and return at once: the first offset, held until after the append (acks 0 or 1)
        or until the high watermark covers the rows (acks=all; delayed_acks), RequestTimedOutError past
        `timeout_s`. NotEnoughReplicas (nothing written) when the ISR is below min.insync.replicas; after the
        append, NotEnoughReplicasAfterAppend if the ISR falls below it before the rows are replicated,
        NotLeaderError if the leadership ends meanwhile (the rows may or may not be kept in those three cases)."""
        if trace.ON:
            trace.event("append_started", self.tp[0], self.tp[1], node=self.node_id)
        state, leader, min_isr = self._writable(leader_epoch, acks)
        plog = self.log
        base = partition_ops.append(plog, self.tp[0], self.tp[1], rows, codec, state.leader_epoch, producer,
                                    transactional)
        if trace.ON:
            trace.event("leader_append", self.tp[0], self.tp[1], base, base + rows.num_rows, self.node_id)
        return self._held(plog, leader, min_isr, base, base + rows.num_rows, acks, timeout_s)

    def write_markers(self, markers: list[tuple[int, int, bool]], leader_epoch: int | None,
                      timeout_s: float) -> None:
        """End transactions here as the leader: a marker per (producer id, producer epoch, commit), answered once
        the in-sync replicas have them (as an acks=all append, with its refusals)."""
        state, leader, min_isr = self._writable(leader_epoch, "all")
        plog = self.log
        offsets = [plog.write_marker(producer_id, producer_epoch, commit, state.leader_epoch)
                   for producer_id, producer_epoch, commit in markers]
        self._held(plog, leader, min_isr, offsets[0], offsets[-1] + 1, "all", timeout_s).wait()

    def _writable(self, leader_epoch: int | None, acks: str) -> tuple[ReplicaState, LeaderState, int]:
        """The leadership a write goes to, and min.insync.replicas; NotEnoughReplicasError (nothing written) for
        an acks=all write while the ISR is below it."""
        state = self.check_leader(leader_epoch)
        with self.changed:
            leader = self._leading(state)
            min_isr = self.min_isr(self.log)
            if acks == "all" and len(leader.isr) < min_isr:
                raise NotEnoughReplicasError(
                    f"{self.name} has {len(leader.isr)} in-sync replica(s) {list(leader.isr)}, below its "
                    f"min.insync.replicas {min_isr}: an acks=all write is refused (nothing written); retry once "
                    "replicas are back, or write with acks=1")
        return state, leader, min_isr

    def _held(self, plog: Log, leader: LeaderState, min_isr: int, base: int, end: int, acks: str, timeout_s: float
              ) -> Held:
        """The answer of a write of offsets base..end-1: base at once (acks 0 or 1), or once the high watermark
        covers them (a delayed ack), expired after `timeout_s`."""
        with self.changed:
            answer: concurrent.futures.Future[int]
            if acks == "all":
                answer = self._acks.add(leader, min_isr, base, end).future
            else:
                answer = concurrent.futures.Future()
                answer.set_result(base)
            self._advance(plog)
            self._wake_fetches()  # (which settles the waiting acks, this one too if the high watermark covers it)
        return Held(answer, timeout_s, functools.partial(self._expire, answer, timeout_s))

    def _expire(self, answer: concurrent.futures.Future[int], timeout_s: float) -> None:
        with self.changed:
            self._acks.expire(answer, timeout_s)

    def delete_records(self, before_offset: int, leader_epoch: int | None) -> int:
        """Kafka's DeleteRecords as the leader: move the log start up to `before_offset` (-1: the high watermark),
        never past the high watermark; returns the low watermark. Answered once the leader's own log start moved:
        followers take it from their next fetch answer (append_copied)."""
        self.check_leader(leader_epoch)
        plog = self.log
        try:
            return partition_ops.delete_records(plog, self.tp[0], before_offset, high_watermark=self.hw)
        finally:
            self._start_moved()

    def enforce_retention(self, leader_epoch: int | None) -> int:
        """Apply retention now as the leader (below the high watermark); segments deleted."""
        self.check_leader(leader_epoch)
        try:
            return self.log.enforce_retention()
        finally:
            self._start_moved()

    def _start_moved(self) -> None:
        """The log start may have moved (DeleteRecords, retention, a cleaner pass): followers' next answers are
        read from the log, to carry it."""
        with self.changed:
            self._changes += 1
            for session in self._sessions:
                session.touch(self.tp)

    def check_readable(self, leader_epoch: int | None, from_follower: bool) -> ReplicaState:
        """The state, if a consumer may read here: as the leader (check_leader), or with `from_follower` (a
        consumer in this replica's rack, KIP-392) as a follower under the quoted leader epoch."""
        state = self._state
        if from_follower and state.role is Role.FOLLOWER and leader_epoch == state.leader_epoch:
            return state
        return self.check_leader(leader_epoch)

    def readable_end(self, isolation: str = READ_COMMITTED) -> int:
        """Where consumers stop: the high watermark (a follower's is the leader's as of its last fetch), and for
        read_committed ones the last stable offset below it (the oldest open transaction's first offset)."""
        hw = self.hw
        return self.log.last_stable_offset(hw) if isolation == READ_COMMITTED else hw

    def read(self, offset: int, max_bytes: int, end_offset: int | None, leader_epoch: int | None,
             max_wait_s: float = 0, from_follower: bool = False, isolation: str = READ_COMMITTED) -> list[Fetched]:
        """What a consumer may read here: records below readable_end(isolation); at it, wait up to `max_wait_s`
        for it to move on (fetch.max.wait.ms)."""
        state = self.check_readable(leader_epoch, from_follower)
        plog, bound = self.log, self.readable_end(isolation)
        # at the readable end, at the high watermark, there is nothing to read and the offset is in range (a
        # replica's log start never passes its high watermark): most long polls' reads, on arrival and when an
        # append wakes them before the high watermark moved
        fetched = [] if offset == bound == self.hw else plog.fetch(
            offset, max_bytes, bound if end_offset is None else min(end_offset, bound), isolation)
        if fetched or not max_wait_s or end_offset is not None:
            return fetched
        with self.changed:  # until the readable end moves on, or the role or epoch changes
            self.changed.wait_for(lambda: self.readable_end(isolation) > offset or (
                self._state.role, self._state.leader_epoch) != (state.role, state.leader_epoch), max_wait_s)
        self.check_readable(leader_epoch, from_follower)
        return plog.fetch(offset, max_bytes, self.readable_end(isolation), isolation)

    def _notify(self) -> None:
        """The readable end may have moved, or the role: wake the threads waiting on `changed` and call each
        consumer fetch's waiter once (lock held: a waiter only schedules its fetch)."""
        self.changed.notify_all()
        if self._read_waiters:
            waiters, self._read_waiters = self._read_waiters, set()
            for waiter in waiters:
                waiter()

    def watch_readable(self, waiter: Callable[[], None], offset: int, leader_epoch: int | None,
                       from_follower: bool, isolation: str) -> bool:
        """Have `waiter()` called once (under this replica's lock, on the changing thread) when the readable end
        (readable_end(isolation)) may have moved past `offset` or the role or leader epoch may have changed, as
        `read` waits for them without a thread; False, and nothing registered, if a read now would not wait
        (records to read, or not readable here under `leader_epoch`: reading again says which)."""
        with self.changed:
            state = self._state
            readable = from_follower and state.role is Role.FOLLOWER and leader_epoch == state.leader_epoch
            leading = state.role is Role.LEADER and leader_epoch in (None, state.leader_epoch)
            if not (readable or leading) or self.readable_end(isolation) > offset:
                return False
            self._read_waiters.add(waiter)
            return True

    def unwatch_readable(self, waiter: Callable[[], None]) -> None:
        with self.changed:
            self._read_waiters.discard(waiter)

    def _wake_fetches(self) -> None:
        """New frames, or a change of role: wake whatever waits on `changed` and the followers' fetches (lock
        held)."""
        self._changes += 1
        self._notify()
        for event in self._fetch_waiters:
            event.wake(self.tp)
        for session in self._sessions:
            session.wake(self.tp)
        self._acks.settle(self.leader, self.hw)

    def watch(self, event: FetchWaiter, leader_epoch: int, offset: int, follower: int | None = None) -> bool:
        """Have `event` woken (with this partition) on frames past `offset` or the end of this node's leadership
        under `leader_epoch` (Kafka's delayed fetch, never for a move of the high watermark alone: waking followers
        for it gave every replicated write one more round trip); False, and nothing registered, if either has
        happened already. The caller unwatches it. A `follower` whose last answer found it at the log end, with
        nothing appended since, is known to be at it without reading the log (most partitions of a fetch)."""
        with self._lock:  # (as in answered_alike)
            leader = self.leader
            if leader is None or leader.leader_epoch != leader_epoch:
                return False
            progress = leader.followers.get(follower) if follower is not None else None
            at_end = (progress is not None and progress.answered_changes == self._changes
                      and progress.leo == offset >= progress.leader_leo_at_fetch)
            if not at_end and self.log.end_offset > offset:
                return False
            self._fetch_waiters.add(event)
            return True

    def unwatch(self, event: FetchWaiter) -> None:
        with self._lock:
            self._fetch_waiters.discard(event)

    def join_session(self, session: SessionChanges) -> None:
        """Tell `session` of this partition's new frames and role changes (wake) and of its high watermark or log
        start moving (touch) until it leaves: a fetch session's standing watch, where `watch` is one fetch's."""
        with self._lock:
            self._sessions.add(session)

    def leave_session(self, session: SessionChanges) -> None:
        with self._lock:
            self._sessions.discard(session)

    def serve_follower(self, follower: int, leader_epoch: int, offset: int, max_bytes: int) -> ReplicaFetch:
        """A follower fetches from `offset` (all it holds) under `leader_epoch`: record its progress, move the
        high watermark, and answer the frames from `offset` (none at the log end: the caller may `watch` and ask
        again). A follower learns the high watermark from its answers. One fetching at the log end it was last
        answered at, nothing appended since, is answered from memory (`_unchanged`): a follower's fetch covers
        every partition it copies from this node, most of them idle, and after each append a follower's next
        fetch is one of these (it copied the frames, and says so)."""
        state = self.check_leader(leader_epoch)
        now = progress_clock.now_ms()
        with self.changed:
            leader = self._leading(state)
            if follower not in leader.followers:
                raise IneligibleReplicaError(f"node {follower} is not a follower of {self.name} (replicas "
                                             f"{list(leader.replicas)})")
            unchanged = self._unchanged(leader, follower, offset, now)
            if unchanged is not None:
                return unchanged
            plog = self.log
            if not plog.producer_state_loaded:  # (a restarted node's leader: loaded before producers come back)
                self.wants_producer_state()
            now_range = plog.log_range()  # the watermark read and the segments listed once for the whole answer
            leo = now_range.end
            if offset > leo:
                raise OffsetOutOfRangeError(f"follower {follower} fetches {self.name} from offset {offset}, past the "
                                            f"leader's log end {leo}: it must truncate first (OffsetsForLeaderEpoch)")
            leader.follower_fetched(follower, offset, leo, now)
            if trace.ON:  # the follower holds every offset below `offset`; the leader's log ends at `leo`
                trace.event("follower_fetch", self.tp[0], self.tp[1], offset, leo, follower)
            progress = leader.followers[follower]
            progress.answered_changes, progress.answered_ms = self._changes, now
            self._advance(plog, leo)
            hw = progress.answered_hw = self.hw
        start = progress.answered_start = now_range.start
        # below the log start (deleted by retention or DeleteRecords before this follower copied it): no frames,
        # and the answer's log start tells the follower where to start again (Kafka's OFFSET_OUT_OF_RANGE); none
        # either for max_bytes 0 (the fetch's response_max_bytes was spent on other partitions)
        has_frames = start <= offset < leo and max_bytes
        frames = plog.read_frames(offset, max_bytes, within=now_range) if has_frames else NO_FRAMES
        return ReplicaFetch(frames, hw, leo, start)

    def answered_alike(self, follower: int, leader_epoch: int, offset: int) -> bool:
        """Whether `follower` fetching from `offset` under `leader_epoch` is answered from memory with what its
        last answer said (no frames, the same high watermark and log start; see `_unchanged`), its progress then
        recorded as `_unchanged` records it (caught up at the log end): a fetch that asked for it leaves such a
        partition out of its answer (follower_fetches), so an idle partition costs neither side more than this.
        Looked at without the lock first (most partitions of a fetch are idle); an append racing the look is seen
        by the fetch's hold (`watch` reads the log end under the lock) or by the follower's next fetch."""
        leader = self.leader
        if leader is None or leader.leader_epoch != leader_epoch:
            return False
        progress = leader.followers.get(follower)
        now = progress_clock.now_ms()
        if progress is None or progress.answered_hw != self.hw or progress.leo != offset or \
                not self._from_memory(progress, offset, now):
            return False
        with self._lock:  # (`changed`'s lock, taken without the Condition's Python-level __enter__: hot)
            if self.leader is not leader or progress.answered_changes != self._changes:
                return False
            leader.follower_fetched(follower, offset, offset, now)  # caught up: at the log end
        return True

    def _unchanged(self, leader: LeaderState, follower: int, offset: int, now: float) -> ReplicaFetch | None:
        """The answer, from memory, to `follower` fetching from the log end it was last answered at, with no
        frames appended and no role change since, within ANSWER_FROM_MEMORY_MS; None otherwise (lock held). A
        follower that has copied up to that end since (its fetch after an append) has its progress recorded and
        the high watermark moved as a fetch read from the log would: the log end is that offset."""
        progress = leader.followers[follower]
        if not self._from_memory(progress, offset, now):
            return None
        copied = offset != progress.leo
        leader.follower_fetched(follower, offset, offset, now)  # caught up: at the log end
        if copied:
            if trace.ON:
                trace.event("follower_fetch", self.tp[0], self.tp[1], offset, offset, follower)
            self._advance(self.log, offset)
        progress.answered_hw = self.hw
        return ReplicaFetch(NO_FRAMES, progress.answered_hw, offset, progress.answered_start)

    def _from_memory(self, progress: FollowerProgress, offset: int, now: float) -> bool:
        """Whether a follower whose progress is `progress`, fetching from `offset`, may be answered from memory:
        from the log end it was last answered at (having copied up to it), nothing appended and no role change
        since, within ANSWER_FROM_MEMORY_MS of its last answer read from the log."""
        return (progress.answered_changes == self._changes and progress.leo <= offset == progress.leader_leo_at_fetch
                and progress.answered_start >= 0 and now - progress.answered_ms < ANSWER_FROM_MEMORY_MS)

    def end_offset_for(self, epoch: int, leader_epoch: int) -> EpochEndOffset:
        """OffsetsForLeaderEpoch as the leader under `leader_epoch`: where this log's records of `epoch` end."""
        self.check_leader(leader_epoch)
        plog = self.log
        return plog.leader_epochs.end_offset_for(epoch, plog.end_offset)

    def isr_upkeep_due(self, lag_ms: float) -> bool:
        """Whether maintenance should look at this replica's ISR: it leads, and the ISR is not settled
        (LeaderState.isr_settled). Read without the lock: a change racing it is seen by the next round."""
        leader = self.leader
        return leader is not None and not leader.isr_settled(lag_ms, progress_clock.now_ms())

    def wanted_isr(self, lag_ms: float, offline: tuple[int, ...] = ()) -> tuple[LeaderState, tuple[int, ...]] | None:
        """The ISR change this leader should ask the controller for (marked pending), or None; the `offline`
        replicas (their nodes report them so) are not asked to join."""
        with self._lock:  # (`changed`'s lock, taken directly: every led partition, every maintenance round)
            leader = self.leader
            if leader is None:
                return None
            wanted = leader.wanted_isr(lag_ms, progress_clock.now_ms(), offline)
            if wanted is not None:
                leader.pending = wanted
            return None if wanted is None else (leader, wanted)

    def isr_changed(self, leader: LeaderState, state: LeaderAndIsr) -> None:
        """The controller's answer to the ISR change `leader` asked for: take its ISR (if this leadership still
        holds) and move the high watermark as the new ISR allows."""
        with self.changed:
            if self.leader is leader and state.leader_epoch == leader.leader_epoch:
                leader.isr_confirmed(state.isr, state.partition_epoch)
                self._advance(self.log)
                self._notify()
                self._acks.settle(self.leader, self.hw)

    def isr_refused(self, leader: LeaderState) -> None:
        """The controller refused (or did not answer) the pending ISR change: decide again on the next round."""
        with self.changed:
            leader.pending = None

    # -- following ----------------------------------------------------------------------------------------
    def following(self, leader_epoch: int) -> bool:
        state = self._state
        return state.role is Role.FOLLOWER and state.leader_epoch == leader_epoch

    # -- housekeeping -------------------------------------------------------------------------------------
    def checkpoint_due(self) -> bool:
        """Whether the high watermark moved since its last checkpoint (read without the lock)."""
        return self._checkpoint.due(self.hw)

    def checkpoint(self) -> None:
        """Write the high watermark to its checkpoint file if it moved since the last write."""
        with self.changed:
            if self._checkpoint.due(self.hw):
                self._checkpoint.write(self.log, self.hw)

    def describe(self, with_log: bool = True) -> dict[str, object]:
        """The replica's role, epoch, high watermark, log start and end (`with_log`: not for a replica whose
        storage failed), and as leader its ISR and each follower's progress."""
        with self.changed:
            out: dict[str, object] = {"topic": self.tp[0], "partition": self.tp[1], "role": self._state.role.value,
                                      "leader_epoch": self._state.leader_epoch, "high_watermark": self.hw}
            if self.hw >= 0 and with_log:
                plog = self.log
                out["log_start"], out["log_end"] = plog.start_offset, plog.end_offset
            if self.leader is not None:
                now = progress_clock.now_ms()
                out["isr"] = list(self.leader.isr)
                out["followers"] = {str(r): {"log_end": p.leo, "lag_ms": round(now - p.caught_up_ms)}
                                    for r, p in self.leader.followers.items()}
            return out
