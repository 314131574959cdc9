"""A leader's fetch sessions (Kafka's incremental fetch sessions, KIP-227; docs/replication.md, "Fetch sessions"):
a follower's fetcher names every partition it copies from this node once, in the fetch that opens its session,
and after that only those whose position changed (it appended frames, truncated, or starts again) and those it
stops copying (`forgotten`). The leader keeps each partition's position, and each partition tells the session
what changed in it (replica_fetch.SessionChanges): new frames or a change of role wake a held fetch, a high
watermark or log start that moved is carried by the next answer. A fetch then serves the partitions named, woken
or touched, not all of them; its answer names the partitions it carries (the others are as the follower last
heard). So an idle partition costs neither side anything per fetch, however many a node leads.

Rules:
- One session per follower node (its fetcher from this node): a new session of that node closes its old one.
  At most MAX_SESSIONS are kept; opening one more closes the oldest.
- Epochs: the opening fetch has epoch 0, the next 1, and so on. An unknown session id or another epoch than the
  next is refused (FetchSessionIdNotFoundError, InvalidFetchSessionEpochError), and the follower opens a new
  session; so an answer lost on the way can never leave the two sides disagreeing on a position.
- A partition answered with an error leaves the session (the follower names it again once it retries).
- Every partition of a session is also served once per SWEEP_MS, as a fetch without a session serves it, each
  fetch taking its share in turn: the followers' caught-up times stay fresh for the ISR (replica.lag.time.max.ms
  is far longer), and a change no partition told (a follower's progress reset when it left the ISR) is seen
  within that time.
- A partition whose answer repeats the follower's last one (no frames, the same high watermark and log start) is
  left out of the answer.
"""
from __future__ import annotations

import collections
import functools
import itertools
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Callable

import msgspec

from fabric.common.errors import (
    FabricError,
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    InvalidRequestError,
)
from fabric.common.types import TopicPartition
from fabric.server.node import follower_fetches, progress_clock
from fabric.server.node.follower_fetches import Answer, Fetched
from fabric.server.node.partition import PartitionReplica
from fabric.server.node.replica_fetch import MAX_ID, ReplicaFetch, SessionChanges, next_epoch

if TYPE_CHECKING:
    from fabric.server.node.replica_manager import ReplicaManager

MAX_SESSIONS = 1000  # sessions kept (one per follower node: far more than a cluster has nodes)
SWEEP_MS = 1000  # how often a session's fetches serve each of its partitions
Named = tuple[str, int, Answer]  # a partition of an answer: topic, partition, and its answer


class SessionArgs(msgspec.Struct, forbid_unknown_fields=True):
    """A session fetch's `session` argument: its id (0: open one), its epoch (0 when opening; then each fetch
    the next), and the partitions the follower no longer copies."""

    id: Annotated[int, msgspec.Meta(ge=0, le=MAX_ID)]
    epoch: Annotated[int, msgspec.Meta(ge=0, le=MAX_ID)]
    forgotten: list[tuple[str, Annotated[int, msgspec.Meta(ge=0)]]] = msgspec.field(default_factory=list)


@dataclass
class SessionPartition:
    """A partition of a session: what the follower last named (its position), the replica told of the session,
    and the high watermark and log start the follower last heard."""

    fetched: Fetched
    replica: PartitionReplica | None = None
    heard: tuple[int, int] | None = None


class FetchSession:
    """The session `session_id` of follower `replica_id` at this node: its partitions and their changes; served
    on the node's event loop, told of changes by appending threads (SessionChanges)."""

    def __init__(self, replicas: ReplicaManager, replica_id: int, session_id: int) -> None:
        self.replicas, self.replica_id, self.id = replicas, replica_id, session_id
        self.epoch = 0  # the next fetch's
        self.partitions: dict[TopicPartition, SessionPartition] = {}
        self.changes = SessionChanges()
        self._pending: dict[TopicPartition, None] = {}  # to serve at the next fetch (named, or left behind)
        self._sweep: collections.deque[TopicPartition] = collections.deque()  # the current sweep's rest
        self._swept_ms = progress_clock.now_ms()  # when a fetch last took its share of the sweep

    def name(self, partitions: list[Fetched], forgotten: list[tuple[str, int]]) -> None:
        """A fetch's changes: each named partition's position (a new one joins the session, telling its replica
        first, so nothing appended after it is missed), and the partitions it no longer copies."""
        for tp in forgotten:
            self._drop(tp)
        for fetched in partitions:
            tp = (fetched[0], fetched[1])
            held = self.partitions.get(tp)
            if held is None:
                held = self.partitions[tp] = SessionPartition(fetched)
            held.fetched = fetched
            self._join(held, self.replicas.hosted_replica(tp))
            self._pending[tp] = None

    def due(self) -> list[SessionPartition]:
        """The partitions a fetch serves now: named, left behind, woken or touched, and its share of the sweep
        (the partitions in turn, as many as the time since the last share is of SWEEP_MS: each partition once
        per SWEEP_MS, spread over the fetches rather than all at once)."""
        due = dict.fromkeys(itertools.chain(self._pending, self.changes.take()))
        self._pending = {}
        now = progress_clock.now_ms()
        share = math.ceil(len(self.partitions) * min(now - self._swept_ms, SWEEP_MS) / SWEEP_MS)
        if share:
            self._swept_ms = now
        for _ in range(share):
            if not self._sweep:
                self._sweep.extend(self.partitions)
            due[self._sweep.popleft()] = None
        return [self.partitions[tp] for tp in due if tp in self.partitions]

    def served(self, due: list[SessionPartition], answers: list[Answer], hosted: list[PartitionReplica | None]
               ) -> list[Named]:
        """Take `answers` to `due` into the session; the ones the follower is to be sent."""
        sent: list[Named] = []
        for held, answer, replica in zip(due, answers, hosted, strict=True):
            topic, partition, offset, *_ = held.fetched
            if isinstance(answer, FabricError):  # it leaves the session: the follower names it again
                self._drop((topic, partition))
                sent.append((topic, partition, answer))
                continue
            self._join(held, replica)
            if answer is None:
                continue
            if not answer.frames.size and offset < answer.log_end and offset >= answer.log_start:
                self._pending[(topic, partition)] = None  # no room left in this answer: served next time
            heard = (answer.high_watermark, answer.log_start)
            if answer.frames.size or heard != held.heard:
                held.heard = heard
                sent.append((topic, partition, answer))
        return sent

    def close(self) -> None:
        """Tell the replicas to forget the session."""
        for tp in list(self.partitions):
            self._drop(tp)

    def _join(self, held: SessionPartition, replica: PartitionReplica | None) -> None:
        if replica is held.replica:
            return
        if held.replica is not None:
            held.replica.leave_session(self.changes)
        held.replica = replica
        if replica is not None:
            replica.join_session(self.changes)

    def _drop(self, tp: TopicPartition) -> None:
        held = self.partitions.pop(tp, None)
        if held is not None and held.replica is not None:
            held.replica.leave_session(self.changes)
        self._pending.pop(tp, None)


class SessionFetch:
    """One fetch in `session`: its answers so far (`answers`, by partition), served on creation, and its hold up
    to max_wait_ms (`wait_s`) while none has frames."""

    def __init__(self, session: FetchSession, partitions: list[Fetched], forgotten: list[tuple[str, int]],
                 max_bytes: int, response_max_bytes: int, max_wait_ms: int) -> None:
        self.wait_s = follower_fetches.checked(session.replica_id, partitions, max_bytes, response_max_bytes,
                                               max_wait_ms)
        self._session, self.session_id, self._holding = session, session.id, False
        self._answer = functools.partial(follower_fetches.partition_answers, session.replicas, session.replica_id,
                                         max_bytes=max_bytes, response_max_bytes=response_max_bytes,
                                         omit_unchanged=True)
        session.name(partitions, forgotten)
        self.answers: dict[TopicPartition, Named] = {}
        self._serve()

    def _serve(self) -> None:
        due = self._session.due()
        answers, hosted = self._answer([held.fetched for held in due])
        for named in self._session.served(due, answers, hosted):
            self.answers[(named[0], named[1])] = named

    def hold(self, on_wake: Callable[[], None]) -> bool:
        """If the fetch waits (a wait asked, and no answer with frames or an error): `on_wake()` (on the waking
        thread: it only schedules `finish`) at the first frames or end of a leadership in the session, and True;
        else False, and the answers stand."""
        if not self.wait_s or any(not isinstance(answer, ReplicaFetch) or answer.frames.size
                                  for *_, answer in self.answers.values()):
            return False
        self._holding = True
        self._session.changes.hold(on_wake)
        return True

    def finish(self) -> list[Named]:
        """The answers, with those of the partitions that changed during the hold, if it held; the hold ends."""
        if self._holding:
            self._holding = False
            self._session.changes.release()
            self._serve()
        return list(self.answers.values())


class FetchSessions:
    """The fetch sessions of this node's followers (one per follower node), served on the node's event loop."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self._sessions: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()
        self._ids = itertools.count(random.randrange(1, 1 << 30))  # ids that a restarted node does not repeat soon

    def fetch(self, replica_id: int, session: SessionArgs, partitions: list[Fetched],
              max_bytes: int = follower_fetches.MAX_BYTES,
              response_max_bytes: int = follower_fetches.RESPONSE_MAX_BYTES,
              max_wait_ms: int = follower_fetches.MAX_WAIT_MS) -> SessionFetch:
        """A fetch in the session `session` names (id 0: open one, replacing the follower's earlier session)."""
        session_id, epoch, forgotten = session.id, session.epoch, session.forgotten
        if session_id == 0:
            if epoch != 0:
                raise InvalidRequestError(f"a fetch that opens a session (id 0) has epoch 0, got {epoch}")
            held = self._open(replica_id)
        else:
            held = self._held(replica_id, session_id, epoch)
        held.epoch = next_epoch(held.epoch)
        return SessionFetch(held, partitions, forgotten, max_bytes, response_max_bytes, max_wait_ms)

    def __len__(self) -> int:
        return len(self._sessions)

    def _open(self, replica_id: int) -> FetchSession:
        old = self._sessions.pop(replica_id, None)
        if old is not None:
            old.close()
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.popitem(last=False)[1].close()
        held = self._sessions[replica_id] = FetchSession(self.replicas, replica_id, next(self._ids) % MAX_ID or 1)
        return held

    def _held(self, replica_id: int, session_id: int, epoch: int) -> FetchSession:
        held = self._sessions.get(replica_id)
        if held is None or held.id != session_id:
            raise FetchSessionIdNotFoundError(f"node {self.replicas.node_id} holds no fetch session {session_id} of "
                                              f"follower {replica_id}; open a new one (session id 0)")
        if epoch != held.epoch:
            raise InvalidFetchSessionEpochError(f"fetch session {session_id} of follower {replica_id} is at epoch "
                                                f"{held.epoch}, the fetch quotes {epoch}; open a new one (session "
                                                "id 0)")
        return held
