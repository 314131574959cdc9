"""A leader serving a follower's fetch (Kafka's replica FetchRequest at the leader; docs/replication.md,
"Fetching many partitions at once"): every partition the follower copies from this node in one request, each
answered on its own (its frames and offsets, or the error that concerns it alone, a damaged range repaired first:
repair.py), and the request held while none has frames, until one has or a leadership among them ends.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from fabric.common.errors import FabricError, InvalidRequestError
from fabric.common.redaction import clip
from fabric.common.types import TopicPartition
from fabric.server import partition_ops
from fabric.server.node.partition import FetchWaiter, PartitionReplica, ReplicaFetch

if TYPE_CHECKING:
    from fabric.server.node.replica_manager import ReplicaManager

Fetched = tuple[str, int, int, int, str]  # (topic, partition, offset, leader epoch, topic id)


def serve(replicas: ReplicaManager, replica_id: int, partitions: list[Fetched], max_bytes: int,
          response_max_bytes: int, max_wait_ms: int) -> list[ReplicaFetch | FabricError]:
    """ReplicaManager.replica_fetch: follower `replica_id`'s fetch of `partitions` at `replicas`' node."""
    for name, value in (("replica_id", replica_id), ("max_bytes", max_bytes),
                        ("response_max_bytes", response_max_bytes)):
        if value < 0:
            raise InvalidRequestError(f"{name} must be an int from 0, got {clip(value)}")
    if len({(topic, partition) for topic, partition, *_ in partitions}) != len(partitions):
        raise InvalidRequestError("a replica fetch names a partition twice; name each once")
    for topic, partition, offset, leader_epoch, _ in partitions:
        if min(partition, offset, leader_epoch) < 0:
            raise InvalidRequestError(f"replica fetch of {clip(topic, 60)}-{partition}: partition, offset and "
                                      f"leader epoch must be ints from 0, got {partition}, {offset}, "
                                      f"{leader_epoch}")
    wait_s = partition_ops.wait_seconds("max_wait_ms", max_wait_ms)
    answers = _answers(replicas, replica_id, partitions, max_bytes, response_max_bytes)
    if wait_s and all(isinstance(a, ReplicaFetch) and not a.frames.size for a in answers):
        woken = _await_frames(replicas, partitions, wait_s)  # the others' answers stand
        again = [i for i, (topic, partition, *_) in enumerate(partitions) if (topic, partition) in woken]
        for i, answer in zip(again, _answers(replicas, replica_id, [partitions[i] for i in again], max_bytes,
                                             response_max_bytes), strict=True):
            answers[i] = answer
    return answers


def _answers(replicas: ReplicaManager, replica_id: int, partitions: list[Fetched], max_bytes: int,
             response_max_bytes: int) -> list[ReplicaFetch | FabricError]:
    answers: list[ReplicaFetch | FabricError] = []
    budget = response_max_bytes
    for topic, partition, offset, leader_epoch, topic_id in partitions:
        try:
            replica = replicas.replica(topic, partition, leader_epoch, topic_id=topic_id)
            with replicas.health.guard((topic, partition), f"read partition {topic}-{partition}"):
                answer = replicas.repairer.read_repaired(replica, functools.partial(
                    replica.serve_follower, replica_id, leader_epoch, offset, max(min(max_bytes, budget), 0)))
        except FabricError as exc:
            answers.append(exc)
            continue
        budget -= answer.frames.size
        answers.append(answer)
    return answers


def _await_frames(replicas: ReplicaManager, partitions: list[Fetched], wait_s: float) -> set[TopicPartition]:
    """Wait up to `wait_s` for frames past the offsets asked for, or the end of a leadership among them; the
    partitions where either happened (none: the wait timed out)."""
    event = FetchWaiter()
    watched: list[PartitionReplica] = []
    try:
        for topic, partition, offset, leader_epoch, _ in partitions:
            replica = replicas.hosted_replica((topic, partition))
            if replica is None or not replica.watch(event, leader_epoch, offset):
                return {(topic, partition)}
            watched.append(replica)
        return event.wait(wait_s)
    finally:
        for replica in watched:
            replica.unwatch(event)
