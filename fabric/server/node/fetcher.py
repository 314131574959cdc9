"""A follower's replica fetcher (Kafka's ReplicaFetcherThread): one per leader node, copying the leader's frames
byte for byte into the follower's logs, and the leader's high watermark with them, for every partition this node
follows there, in one request (replica_fetch, over the leader's fabric protocol port: fabric.server.peer_calls).

Each partition has its own state: TRUNCATING (new, or after the leader refused an offset or sent frames that do
not follow this log) -> FETCHING; it leaves the fetcher when the replica no longer follows that leader epoch
(`remove`, or a role change seen before its answer is applied, which is then dropped). Compaction's gap frames
are copied like any frame; where a compacted leader's frame spans this log's end, the replica cuts back to it
(PartitionReplica.append_copied). Truncating asks the leader for the end of the follower's latest epoch
(OffsetsForLeaderEpoch) and cuts the log there, in rounds (truncation.reconcile), never to the follower's own high
watermark (KIP-101). Fetching asks for frames from each log end, which tells the leader how far this replica is;
the leader long-polls up to replica.fetch.wait.max.ms when no partition has anything new. Every answer carries
the leader's log start offset, which the replica takes (its own start moves up to it, so retention and
DeleteRecords at the leader reach every follower); a log end below it (the leader deleted those offsets before
this replica copied them) makes the replica truncate fully and start again at the leader's log start (Kafka's
OFFSET_OUT_OF_RANGE handling), so it never fetches that offset again.

Errors concern one partition (the leader answers each with its own) or, when the leader does not answer, all of
them; either way the partitions concerned are retried after replica.fetch.backoff.ms, the others go on; an error
is logged once, not again while the same one repeats. A FencedLeaderEpochError (this node is behind the
controller) asks the controller first. A failure of this node's own storage goes through its guard
(storage_health: the replica goes offline, and the ReplicaManager takes it out of its fetcher). The order of the
partitions rotates with every fetch, so one partition cannot take the whole of replica.fetch.response.max.bytes
every time. Each fetch asks the leader to leave out the partitions whose answer would repeat the last one
(`omit_unchanged`, follower_fetches), answered None and skipped here, unless the leader, of an earlier
release, refuses the argument: then every answer is asked for, as before.

A fetcher holds a fetch session at its leader (KIP-227, fetch_sessions on the leader's side): its first fetch
names every partition, the next ones only those whose log end moved since the leader last heard it and those it
no longer fetches (`forgotten`), and the leader's answer carries only the partitions with something new. Any
failure of a whole fetch (no answer, the session unknown or at another epoch) drops the session, and the next
fetch opens a new one. A leader of an earlier release refuses `session`: the fetcher then fetches without one.
"""
from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import msgspec
import pyarrow as pa
import pyarrow.flight as flight

from fabric.common import trace
from fabric.common.errors import (
    FabricError,
    FencedLeaderEpochError,
    FetchSessionError,
    InvalidFramesError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
)
from fabric.common.protocol import messages
from fabric.common.protocol.payloads import Payload
from fabric.common.redaction import clip
from fabric.common.types import EpochEndOffset, TopicPartition
from fabric.server import wire
from fabric.server.arguments import OptionalArgument
from fabric.server.connection import Call, action_call
from fabric.server.node.partition import PartitionReplica
from fabric.server.node.replica_fetch import NO_FRAMES, next_epoch
from fabric.server.peer_calls import PeerCalls
from fabric.storage import truncation

log = logging.getLogger(__name__)
Peer = Callable[[str, Call], Any]  # (address, call) -> the call's result at that node
# (partition, what is being done) -> a context in which a failure of the replica's storage takes it offline
StorageGuard = Callable[[TopicPartition, str], ContextManager[None]]
# one partition's answer (its offsets, or {"error": ...}; None: as the last one said), and its frames
FetchAnswer = tuple[dict[str, Any] | None, pa.Buffer]
_UNCHANGED: FetchAnswer = (None, NO_FRAMES)  # a partition a session's answer does not carry


class FetcherState(str, enum.Enum):
    TRUNCATING = "Truncating"
    FETCHING = "Fetching"


@dataclass(frozen=True)
class FetchSettings:
    """replica.fetch.max.bytes (per partition), replica.fetch.response.max.bytes (per fetch),
    replica.fetch.wait.max.ms and replica.fetch.backoff.ms."""

    max_bytes: int = 1 << 20
    max_wait_ms: int = 500
    backoff_ms: int = 200
    response_max_bytes: int = 10 << 20


class FetchedPartition:
    """One partition a fetcher copies: its replica, the leader epoch it follows, its topic's id and state, and
    when it may be tried again after an error."""

    def __init__(self, replica: PartitionReplica, leader_epoch: int, topic_id: str) -> None:
        self.replica, self.leader_epoch, self.topic_id = replica, leader_epoch, topic_id
        self.state = FetcherState.TRUNCATING
        self.retry_at = 0.0  # time.monotonic()
        self.last_error = ""  # logged once while it repeats
        # the replica's log end as last read; None: read it again (its log is written by this fetcher alone, which
        # forgets it whenever it answers, applies or fails the partition: most fetches leave most partitions idle)
        self.log_end: int | None = None

    @property
    def name(self) -> str:
        return self.replica.name

    def active(self) -> bool:
        return self.replica.following(self.leader_epoch)


class FollowerSession:
    """This fetcher's fetch session at its leader: its id (0: none yet), the epoch of its next fetch, and what
    the leader holds of each partition in it: its position (log end), the leader epoch and the topic id."""

    def __init__(self) -> None:
        self.positions: dict[TopicPartition, tuple[int, int, str]] = {}
        self.reset()

    def reset(self) -> None:
        """Drop the session: the next fetch opens a new one, naming every partition."""
        self.id, self.epoch = 0, 0
        self.positions.clear()

    def argument(self, named: list[tuple[str, int, int, int, str]], gone: list[TopicPartition]) -> dict[str, Any]:
        """The `session` argument of a fetch that names `named` and no longer fetches `gone`; the positions are
        taken as the leader's (reset() if the fetch fails)."""
        forgotten = [tp for tp in gone if self.positions.pop(tp, None) is not None]
        for topic, partition, offset, leader_epoch, topic_id in named:
            self.positions[(topic, partition)] = (offset, leader_epoch, topic_id)
        return {"id": self.id, "epoch": self.epoch, "forgotten": [list(tp) for tp in forgotten]}

    def answered(self, session_id: int) -> None:
        """The leader answered the fetch in session `session_id`: the next fetch is in it."""
        self.id, self.epoch = session_id, next_epoch(self.epoch)


def fetch_answers(partitions: int, result: msgspec.Raw, payload: Payload) -> list[FetchAnswer]:
    """A protocol replica_fetch's answer of `partitions` partitions: each partition's JSON answer, with its frames
    cut from the payload (the frames of those that have some, one after the other in order)."""
    answers: list[dict[str, Any] | None] = messages.decode_result(result, list[dict[str, Any] | None])
    sizes = [0 if answer is None else answer.get("frames", 0) for answer in answers]
    if len(answers) != partitions or sum(sizes) != len(payload):
        raise FabricError(f"leader's answer to a fetch of {partitions} partition(s) does not match it "
                          f"({len(answers)} answers, {sum(sizes)} bytes of frames named, {len(payload)} sent)")
    return _cut(answers, sizes, payload)


def session_answers(answer: dict[str, Any], payload: Payload) -> tuple[int, dict[TopicPartition, FetchAnswer]]:
    """A session replica_fetch's answer: its session id, and the answer and frames of each partition it
    carries."""
    carried = answer.get("partitions")
    if not isinstance(carried, list) or not all(isinstance(p, list) and len(p) == 3 for p in carried):
        raise FabricError(f"leader's answer to a session fetch names no [topic, partition, answer] list: "
                          f"{clip(answer, 200)}")
    sizes = [(p[2] or {}).get("frames", 0) for p in carried]
    if sum(sizes) != len(payload):
        raise FabricError(f"leader's answer to a session fetch names {sum(sizes)} bytes of frames, {len(payload)} "
                          "sent")
    cut = _cut([p[2] for p in carried], sizes, payload)
    return int(answer.get("session_id", 0)), {(p[0], p[1]): a for p, a in zip(carried, cut, strict=True)}


def _cut(answers: list[dict[str, Any] | None], sizes: list[int], payload: Payload) -> list[FetchAnswer]:
    """Each answer with its frames, cut from `payload` (the frames of the answers, one after the other)."""
    buffer, start, out = pa.py_buffer(payload), 0, []
    for answer, size in zip(answers, sizes, strict=True):
        out.append((answer, buffer.slice(start, size) if size else NO_FRAMES))
        start += size
    return out


def call_node(peer: Peer, node: str, address: str, call: Call) -> Any:
    """`call` at `node` (as messages name it), at `address`: its refusal raised as the fabric error it is, and
    LeaderNotAvailableError if it does not answer."""
    try:
        return peer(address, call)
    except wire.NO_ANSWER as exc:
        raise LeaderNotAvailableError(f"{node} at {address} did not answer "
                                      f"({wire.error_details(exc).get('message') or exc})") from None
    except flight.FlightError as exc:
        raise wire.from_flight_error(exc) from None


class ReplicaFetcher:
    """Copies the frames of the partitions this node (`node_id`) follows on leader node `leader_id` at `address`,
    on a thread; its fetches go over the leader's fabric protocol port (`protocol`), its truncation's
    OffsetsForLeaderEpoch (rare: once per leadership change) over Flight (`peer`); `refresh` asks the controller
    for this node's latest states."""

    def __init__(self, node_id: int, leader_id: int, address: str, peer: Peer, protocol: PeerCalls,
                 refresh: Callable[[], None], settings: FetchSettings, guard: StorageGuard) -> None:
        self.node_id, self.leader_id, self.address = node_id, leader_id, address
        self.peer, self.protocol, self.refresh, self.settings, self.guard = peer, protocol, refresh, settings, guard
        self._partitions: dict[TopicPartition, FetchedPartition] = {}
        # in a fetch session, the partitions the next round looks at: added, removed, failed, being truncated, or
        # whose log end may have moved (the others are as the leader's session holds them)
        self._unsettled: dict[TopicPartition, None] = {}
        self._guard = threading.Lock()  # the partitions' maps: taken briefly, never across a call
        self._changed = threading.Event()  # a partition was added, or the fetcher stopped
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"fetcher-from-{leader_id}")
        # the leader leaves out the partitions whose answer would repeat (follower_fetches), unless it refuses
        self._omit_unchanged = OptionalArgument("omit_unchanged", "its answers name every partition")
        self._session = FollowerSession()  # (a fetch session at the leader, unless it refuses one)
        self._in_session = OptionalArgument("session", "every fetch names every partition")

    def start(self) -> None:
        """Start fetching (once; later calls do nothing)."""
        if self._thread.ident is None and not self._stopped.is_set():
            self._thread.start()

    def add(self, replica: PartitionReplica, leader_epoch: int, topic_id: str) -> None:
        """Copy `replica` from this leader under `leader_epoch`, starting with truncation; picked up at the next
        fetch (a fetch in flight ends within replica.fetch.wait.max.ms)."""
        log.info("partition %s: following node %d at %s under leader epoch %d", replica.name, self.leader_id,
                 self.address, leader_epoch)
        with self._guard:
            self._partitions[replica.tp] = FetchedPartition(replica, leader_epoch, topic_id)
            self._unsettled[replica.tp] = None
        self._changed.set()

    def remove(self, tp: TopicPartition) -> bool:
        """Stop copying `tp` (an answer in flight for it is not applied); True if it was here."""
        with self._guard:
            self._unsettled[tp] = None
            return self._partitions.pop(tp, None) is not None

    def __len__(self) -> int:
        with self._guard:
            return len(self._partitions)

    @property
    def session_id(self) -> int:
        """The id of its fetch session at the leader (0: none open)."""
        return self._session.id

    def partitions(self) -> list[TopicPartition]:
        """The partitions it copies, sorted."""
        with self._guard:
            return sorted(self._partitions)

    def stop(self) -> None:
        """Stop fetching; a call in flight finishes, and its frames are not appended."""
        self._stopped.set()
        self._changed.set()

    def _current(self, fetched: FetchedPartition) -> bool:
        """Whether `fetched` is still this fetcher's for its partition, under its epoch."""
        with self._guard:
            return self._partitions.get(fetched.replica.tp) is fetched and fetched.active()

    def _looked_at(self) -> tuple[list[FetchedPartition], list[TopicPartition]]:
        """The partitions a round looks at (in a fetch session the unsettled ones, else all) that are fetched
        under their epoch, and those of them that are not (removed, or no longer followed under their epoch:
        what the replica manager changes next adds them again)."""
        with self._guard:
            if self._in_session.sent:
                tps, self._unsettled = list(self._unsettled), {}
            else:
                tps = list(self._partitions)
            found = [(tp, self._partitions.get(tp)) for tp in tps]
        look = [p for _, p in found if p is not None and p.active()]
        return look, [tp for tp, p in found if p is None or not p.active()]

    def _unsettle(self, partitions: list[FetchedPartition]) -> None:
        """Have the next round look at `partitions` again."""
        with self._guard:
            self._unsettled.update((p.replica.tp, None) for p in partitions)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._round()
            except Exception:  # a bug must not stop replication from this leader for good
                log.exception("replica fetcher from node %d failed; going on after the backoff", self.leader_id)
                self._session_lost()  # (the round may have taken partitions off the unsettled ones: name them all)
                self._stopped.wait(self.settings.backoff_ms / 1000)

    def _round(self) -> None:
        """Truncate the partitions that need it and fetch (or wait for a partition or a retry due). In a fetch
        session a round looks at the unsettled partitions only; without one, at every partition."""
        self._changed.clear()
        now = time.monotonic()
        look, gone = self._looked_at()
        for fetched in look:
            if fetched.state is FetcherState.TRUNCATING and fetched.retry_at <= now:
                try:
                    with self.guard(fetched.replica.tp, f"truncate partition {fetched.name}"):
                        self._truncate(fetched)
                except FabricError as exc:
                    self._failed(fetched, exc)
        ready = [p for p in look if p.state is FetcherState.FETCHING and p.retry_at <= now]
        waiting = [p for p in look if p.state is not FetcherState.FETCHING or p.retry_at > now]
        if self._in_session.sent:
            self._unsettle(waiting)
            if ready or self._session.positions:
                self._fetch_in_session(ready, [*gone, *(p.replica.tp for p in waiting)])
                return
        elif ready:
            self._fetch(ready)
            with self._guard:  # rotate, so a long answer's partition does not always come first
                if len(self._partitions) > 1:
                    first = next(iter(self._partitions))
                    self._partitions[first] = self._partitions.pop(first)
            return
        due = min((p.retry_at for p in waiting), default=now + 3600)  # nothing to fetch now: wait for a partition,
        self._changed.wait(max(due - time.monotonic(), 0.001))  # or the first retry due

    def _failed(self, fetched: FetchedPartition, exc: FabricError) -> None:
        """Retry `fetched` after the backoff, truncating first if its offsets no longer fit the leader's; the
        error is logged unless it repeats the partition's last one."""
        again, fetched.last_error = str(exc) == fetched.last_error, str(exc)
        fetched.log_end = None
        if isinstance(exc, (OffsetOutOfRangeError, InvalidFramesError)):
            log.log(logging.DEBUG if again else logging.WARNING, "partition %s: %s; truncating again", fetched.name,
                    exc)
            fetched.state = FetcherState.TRUNCATING
        elif isinstance(exc, FencedLeaderEpochError):
            log.info("partition %s: %s; asking the controller", fetched.name, exc)
            self.refresh()
        else:
            log.log(logging.DEBUG if again else logging.INFO, "partition %s: fetching from node %d failed (%s); "
                    "retrying", fetched.name, self.leader_id, exc)
        fetched.retry_at = time.monotonic() + self.settings.backoff_ms / 1000
        self._unsettle([fetched])

    def _call(self, call: Call) -> Any:
        return call_node(self.peer, f"leader node {self.leader_id}", self.address, call)

    def _truncate(self, fetched: FetchedPartition) -> None:
        """Reconcile with the leader; report what was cut. Records cut below this replica's high watermark were
        committed: only an unclean election (a leader from outside the ISR) loses them, so they are reported at
        WARNING with their offsets; a cut above it removes records never acknowledged to acks=all."""
        replica, epoch = fetched.replica, fetched.leader_epoch
        plog = replica.log
        before, hw = plog.end_offset, replica.hw

        def ask(asked: int) -> EpochEndOffset:
            answer: EpochEndOffset = self._call(action_call(
                "offsets_for_leader_epoch", topic=replica.tp[0], partition=replica.tp[1], epoch=asked,
                leader_epoch=epoch, topic_id=fetched.topic_id))
            return answer
        end = truncation.reconcile(plog, ask, lambda offset: replica.truncate_follower(epoch, offset))
        if end < min(before, hw):
            log.warning("partition %s: offsets %d..%d were committed here but are not in leader node %d's log (an "
                        "unclean election): they are lost; offsets %d..%d truncated", replica.name, end,
                        min(before, hw) - 1, self.leader_id, end, before - 1)
        elif end < before:
            log.info("partition %s: truncated uncommitted offsets %d..%d, not in leader node %d's log (epoch %d)",
                     replica.name, end, before - 1, self.leader_id, epoch)
        log.info("partition %s: reconciled with leader node %d (epoch %d): fetching from offset %d",
                 replica.name, self.leader_id, epoch, end)
        fetched.state, fetched.log_end = FetcherState.FETCHING, None

    def _log_ends(self, ready: list[FetchedPartition]) -> tuple[list[FetchedPartition], list[int]]:
        """The partitions of `ready` whose log end this node can read, and their log ends (the others failed)."""
        readable, offsets = [], []
        for fetched in ready:
            if fetched.log_end is None:
                try:
                    with self.guard(fetched.replica.tp, f"read partition {fetched.name}"):
                        fetched.log_end = fetched.replica.log.end_offset
                except FabricError as exc:
                    self._failed(fetched, exc)
                    continue
            readable.append(fetched)
            offsets.append(fetched.log_end)
        return readable, offsets

    def _fetch(self, ready: list[FetchedPartition]) -> None:
        """One fetch of every partition in `ready`, without a session; each answer applied to its replica, or its
        error handled."""
        ready, offsets = self._log_ends(ready)
        if not ready:
            return
        request = [(p.replica.tp[0], p.replica.tp[1], offset, p.leader_epoch, p.topic_id)
                   for p, offset in zip(ready, offsets, strict=True)]
        try:
            answers = self._replica_fetch(request)
        except FabricError as exc:  # the leader did not answer, or refused the whole request: all retry
            self._fetch_failed(ready, exc)
            return
        for fetched, offset, (answer, frames) in zip(ready, offsets, answers, strict=True):
            if answer is not None and self._current(fetched):  # (None: unchanged since the last answer)
                self._take(fetched, offset, answer, frames)

    def _fetch_in_session(self, ready: list[FetchedPartition], gone: list[TopicPartition]) -> None:
        """One fetch in the session: it names the partitions of `ready` whose position the leader does not hold
        and forgets `gone`; each answer applied to its replica, or its error handled. A failure drops the
        session: every partition is then named again."""
        ready, offsets = self._log_ends(ready)
        session = self._session
        named = [request for request in ((p.replica.tp[0], p.replica.tp[1], offset, p.leader_epoch, p.topic_id)
                                         for p, offset in zip(ready, offsets, strict=True))
                 if session.positions.get((request[0], request[1])) != request[2:]]
        try:
            answer, payload = self._replica_fetch(named, session.argument(named, gone))
            if self._in_session.sent:
                session_id, answers = session_answers(messages.decode_result(answer, dict[str, Any]), payload)
        except FabricError as exc:
            self._session_lost()
            if isinstance(exc, FetchSessionError):  # the leader lost the session as this fetcher knows it
                log.info("fetch session at node %d: %s; opening a new one", self.leader_id, exc)
            else:  # the leader did not answer, or refused the whole request: all retry
                with self._guard:
                    every = list(self._partitions.values())
                self._fetch_failed(every, exc)
            return
        except BaseException:
            self._session_lost()
            raise
        if not self._in_session.sent:  # refused by a leader of an earlier release: from now on, fetch without
            self._session_lost()
            return
        session.answered(session_id)
        for tp, (answer, frames) in answers.items():
            held = session.positions.get(tp)
            with self._guard:
                fetched = self._partitions.get(tp)
            if (answer is not None and held is not None and fetched is not None
                    and held[1:] == (fetched.leader_epoch, fetched.topic_id) and fetched.active()):
                self._take(fetched, held[0], answer, frames)  # (from the position the leader held)

    def _session_lost(self) -> None:
        """The session is dropped: the next fetch opens a new one, naming every partition."""
        self._session.reset()
        with self._guard:
            self._unsettled.update(dict.fromkeys(self._partitions))

    def _fetch_failed(self, fetched: list[FetchedPartition], exc: FabricError) -> None:
        log.info("fetching %d partition(s) from node %d failed (%s); retrying", len(fetched), self.leader_id, exc)
        retry_at = time.monotonic() + self.settings.backoff_ms / 1000
        for partition in fetched:
            partition.retry_at = retry_at

    def _take(self, fetched: FetchedPartition, offset: int, answer: dict[str, Any], frames: pa.Buffer) -> None:
        """The leader's answer to `fetched` from `offset`: its frames and offsets applied, or its error handled."""
        fetched.log_end = None  # whatever follows may move it
        if "error" in answer:
            self._session.positions.pop(fetched.replica.tp, None)  # (a session at the leader dropped it)
            error = wire.exception_of(answer["error"])
            self._failed(fetched, error or FabricError(f"leader node {self.leader_id}: {answer['error']}"))
            return
        if trace.ON:
            trace.event("fetch_received", *fetched.replica.tp, offset, answer.get("log_end", -1), self.node_id)
        try:
            with self.guard(fetched.replica.tp, f"copy frames into partition {fetched.name}"):
                self._apply(fetched, offset, answer, frames)
            fetched.last_error = ""
        except FabricError as exc:
            self._failed(fetched, exc)
        self._unsettle([fetched])

    def _replica_fetch(self, partitions: list[tuple[str, int, int, int, str]], session: dict[str, Any] | None = None
                       ) -> Any:
        """One replica_fetch of `partitions`, each (topic, partition, offset, leader epoch, topic id), at the
        leader's protocol port, in `session` (its argument; None: without one): without a session, an answer and
        frames per partition (NO_FRAMES for those answered without); in one, its JSON result and payload."""
        settings = self.settings
        args = {"replica_id": self.node_id, "partitions": partitions, "max_bytes": settings.max_bytes,
                "response_max_bytes": settings.response_max_bytes, "max_wait_ms": settings.max_wait_ms}
        leader = f"leader node {self.leader_id}"

        def without_session(args: dict[str, Any]) -> tuple[msgspec.Raw, Payload]:
            return self._omit_unchanged.call(lambda a: self.protocol.call(self.address, "replica_fetch", a), args,
                                             True, leader)
        try:
            if session is not None:
                return self._in_session.call(without_session, args, session, leader)
            result, payload = without_session(args)
        except OSError as exc:  # unreachable, broken, or no answer in time (ClientTimeoutError)
            raise LeaderNotAvailableError(f"leader node {self.leader_id} at {self.address} did not answer (fabric "
                                          f"protocol: {exc})") from None
        return fetch_answers(len(partitions), result, payload)

    @staticmethod
    def _apply(fetched: FetchedPartition, offset: int, answer: dict[str, Any], frames: pa.Buffer) -> None:
        replica = fetched.replica
        if offset < answer["log_start"]:  # the leader deleted what this replica would copy next
            replica.restart_at(fetched.leader_epoch, answer["log_start"], offset)
            return
        replica.append_copied(fetched.leader_epoch, frames, answer["high_watermark"], answer["log_start"])
