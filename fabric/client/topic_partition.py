"""`fabric.TopicPartition`: a partition of a topic as Kafka's Python clients name it (kafka-python's namedtuple,
confluent-kafka's class), with `.topic` and `.partition`, and confluent-kafka's optional `.offset`.

It is a (topic, partition) tuple, so it compares equal to, hashes like and is accepted wherever a plain pair is
(the internal `fabric.common.types.TopicPartition` is that plain pair); the consumer gives its partitions back
as TopicPartition objects. The offset takes no part in equality (as in confluent-kafka): it says where to read
from (assign, seek) or carries an answer (committed, position).
"""
from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple, TypeVar

V = TypeVar("V")
# confluent-kafka's logical offsets, which a TopicPartition may carry to assign() and seek()
OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID = -2, -1, -1000, -1001
LOGICAL_OFFSETS = (OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, OFFSET_INVALID)


class _Pair(NamedTuple):
    topic: str
    partition: int


class TopicPartition(_Pair):
    """A partition of a topic: `TopicPartition("orders", 0)`, equal to ("orders", 0);
    `TopicPartition("orders", 0, 42)` also carries offset 42, and `TopicPartition("orders", 0, 42, "note")` the
    metadata a commit stores with it (confluent-kafka's third to fifth arguments; the leader epoch is kept only)."""

    offset: int | None = None
    metadata: str | None = None
    leader_epoch: int | None = None
    error: object = None  # confluent-kafka's: the error of this partition in a result (none: the fabric raises)

    def __new__(cls, topic: str, partition: int = -1, offset: int | None = None, metadata: str | None = None,
                leader_epoch: int | None = None) -> TopicPartition:
        self = super().__new__(cls, topic, partition)
        for name, value in (("offset", offset), ("metadata", metadata), ("leader_epoch", leader_epoch)):
            if value is not None:
                setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        shown = "".join(f", {name}={value!r}" for name, value in (("offset", self.offset), ("metadata", self.metadata))
                        if value is not None)
        return f"TopicPartition(topic={self.topic!r}, partition={self.partition!r}{shown})"


def named(pairs: Iterable[tuple[str, int]]) -> list[TopicPartition]:
    """The pairs as TopicPartition objects."""
    return [TopicPartition(*tp) for tp in pairs]


def named_keys(by_partition: Mapping[tuple[str, int], V]) -> dict[TopicPartition, V]:
    """The mapping with its (topic, partition) keys as TopicPartition objects."""
    return {TopicPartition(*tp): value for tp, value in by_partition.items()}


def with_offsets(offsets: Mapping[tuple[str, int], int | None], metadata: Mapping[tuple[str, int], str] | None = None
                 ) -> dict[TopicPartition, int | None]:
    """The mapping with each key a TopicPartition carrying its own value as `.offset` (and its `metadata`, where
    given and not empty), so that both dict users (`result[tp]`) and confluent-kafka's list users
    (`[tp.offset for tp in result]`) read it."""
    notes = metadata or {}
    return {TopicPartition(tp[0], tp[1], offset, notes.get(tp) or None): offset for tp, offset in offsets.items()}
