"""A leader serving a follower's fetch (Kafka's replica FetchRequest at the leader; docs/replication.md,
"Fetching many partitions at once"): every partition the follower copies from this node in one request, each
answered on its own (its frames and offsets, or the error that concerns it alone, a damaged range repaired first:
repair.py), and the request held while none has frames, until one has or a leadership among them ends.

A FollowerFetch answers at once what it can; `hold` then watches its partitions without blocking a thread (the
fabric protocol's event loop answers it when woken, or when its wait is over), and `serve` waits for it on the
calling thread.

A fetch that asks `omit_unchanged` (Kafka's incremental fetch sessions, KIP-227, without the session: the follower
names every partition, but most are idle) is answered None for each partition whose answer would repeat the last
one this follower had (PartitionReplica.answered_alike). A fetch in a session (fetch_sessions) serves the
partitions that changed through `partition_answers` too, without naming or looking at the others.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

from fabric.common.errors import FabricError, InvalidRequestError
from fabric.common.redaction import clip
from fabric.server import partition_ops
from fabric.server.node.partition import PartitionReplica
from fabric.server.node.replica_fetch import FetchWaiter, ReplicaFetch

if TYPE_CHECKING:
    from fabric.server.node.replica_manager import ReplicaManager

Fetched = tuple[str, int, int, int, str]  # (topic, partition, offset, leader epoch, topic id)
Answer = ReplicaFetch | FabricError | None  # None: as the follower's last answer said (omit_unchanged)
# replica.fetch.max.bytes, replica.fetch.response.max.bytes and replica.fetch.wait.max.ms a request omits
MAX_BYTES, RESPONSE_MAX_BYTES, MAX_WAIT_MS = 1 << 20, 10 << 20, 500


class FollowerFetch:
    """Follower `replica_id`'s fetch of `partitions` at `replicas`' node: its answers so far (`answers`), served
    on creation, and its hold up to max_wait_ms (`wait_s`) when none has frames."""

    def __init__(self, replicas: ReplicaManager, replica_id: int, partitions: list[Fetched],
                 max_bytes: int = MAX_BYTES, response_max_bytes: int = RESPONSE_MAX_BYTES,
                 max_wait_ms: int = MAX_WAIT_MS, omit_unchanged: bool = False) -> None:
        self.wait_s = checked(replica_id, partitions, max_bytes, response_max_bytes, max_wait_ms)
        self._replicas, self._partitions, self._replica_id = replicas, partitions, replica_id
        self._answer = functools.partial(partition_answers, replicas, replica_id, max_bytes=max_bytes,
                                         response_max_bytes=response_max_bytes, omit_unchanged=omit_unchanged)
        self.answers, self._hosted = self._answer(partitions)
        self._waiter: FetchWaiter | None = None
        self._watched: list[PartitionReplica] = []

    def hold(self, on_wake: Callable[[], None]) -> bool:
        """If the fetch waits (a wait asked, and no partition has frames): watch its partitions, `on_wake()` (on
        the waking thread, under a partition's lock: it only schedules `finish`) at the first frames or end of a
        leadership among them, and True; else False, and the answers stand."""
        if not self.wait_s or any(a is not None and (not isinstance(a, ReplicaFetch) or a.frames.size)
                                  for a in self.answers):
            return False
        waiter = self._waiter = FetchWaiter(on_wake)
        for (topic, partition, offset, leader_epoch, _), replica in zip(self._partitions, self._hosted, strict=True):
            if replica is None or not replica.watch(waiter, leader_epoch, offset, self._replica_id):
                waiter.wake((topic, partition))  # served again at once
                break
            self._watched.append(replica)
        return True

    def wait(self) -> None:
        """Block until the hold is woken or its wait is over."""
        if self._waiter is not None:
            self._waiter.wait(self.wait_s)

    def finish(self) -> list[Answer]:
        """The answers, those of the partitions that woke the hold served again (the others' stand); the hold
        ends."""
        waiter, self._waiter = self._waiter, None
        if waiter is None:
            return self.answers
        for replica in self._watched:
            replica.unwatch(waiter)
        woken = waiter.partitions
        again = [i for i, (topic, partition, *_) in enumerate(self._partitions) if (topic, partition) in woken]
        for i, answer in zip(again, self._answer([self._partitions[i] for i in again])[0], strict=True):
            self.answers[i] = answer
        return self.answers


def checked(replica_id: int, partitions: list[Fetched], max_bytes: int, response_max_bytes: int,
            max_wait_ms: int) -> float:
    """A replica fetch's arguments checked (InvalidRequestError naming the one that is wrong); how long it may
    wait, in seconds."""
    for name, value in (("replica_id", replica_id), ("max_bytes", max_bytes),
                        ("response_max_bytes", response_max_bytes)):
        if value < 0:
            raise InvalidRequestError(f"{name} must be an int from 0, got {clip(value)}")
    if len({(topic, partition) for topic, partition, *_ in partitions}) != len(partitions):
        raise InvalidRequestError("a replica fetch names a partition twice; name each once")
    for topic, partition, offset, leader_epoch, _ in partitions:
        if min(partition, offset, leader_epoch) < 0:
            raise InvalidRequestError(f"replica fetch of {clip(topic, 60)}-{partition}: partition, offset and "
                                      f"leader epoch must be ints from 0, got {partition}, {offset}, {leader_epoch}")
    return partition_ops.wait_seconds("max_wait_ms", max_wait_ms)


def serve(replicas: ReplicaManager, replica_id: int, partitions: list[Fetched], max_bytes: int,
          response_max_bytes: int, max_wait_ms: int, omit_unchanged: bool) -> list[Answer]:
    """ReplicaManager.replica_fetch: the fetch answered, held on this thread while it waits."""
    fetch = FollowerFetch(replicas, replica_id, partitions, max_bytes, response_max_bytes, max_wait_ms,
                          omit_unchanged)
    if fetch.hold(lambda: None):
        fetch.wait()
    return fetch.finish()


def partition_answers(replicas: ReplicaManager, replica_id: int, partitions: list[Fetched], max_bytes: int,
             response_max_bytes: int, omit_unchanged: bool) -> tuple[list[Answer], list[PartitionReplica | None]]:
    """Each partition's answer, and the replica hosted here for it (None: none), which a hold then watches."""
    answers: list[Answer] = []
    hosted: list[PartitionReplica | None] = []
    budget = response_max_bytes
    for topic, partition, offset, leader_epoch, topic_id in partitions:
        replica = replicas.hosted_replica((topic, partition))
        hosted.append(replica)
        if (omit_unchanged and replica is not None and replica.answered_alike(replica_id, leader_epoch, offset)
                and replicas.same_topic(topic, topic_id)):  # as the follower's last answer said
            answers.append(None)
            continue
        try:
            replica = hosted[-1] = replicas.replica(topic, partition, leader_epoch, topic_id=topic_id)
            with replicas.health.guard((topic, partition), f"read partition {topic}-{partition}"):
                answer = replicas.repairer.read_repaired(replica, functools.partial(
                    replica.serve_follower, replica_id, leader_epoch, offset, max(min(max_bytes, budget), 0)))
        except FabricError as exc:
            answers.append(exc)
            continue
        budget -= answer.frames.size
        answers.append(answer)
    return answers, hosted
