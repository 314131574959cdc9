"""`fabric.TopicPartition`: a partition of a topic as Kafka's Python clients name it (kafka-python's namedtuple,
confluent-kafka's class), with `.topic` and `.partition`.

It is a (topic, partition) tuple, so it compares equal to, hashes like and is accepted wherever a plain pair is
(the internal `fabric.common.types.TopicPartition` is that plain pair); the consumer gives its partitions back
as TopicPartition objects.
"""
from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple, TypeVar

V = TypeVar("V")


class TopicPartition(NamedTuple):
    """A partition of a topic: `TopicPartition("orders", 0)`, equal to ("orders", 0)."""

    topic: str
    partition: int


def named(pairs: Iterable[tuple[str, int]]) -> list[TopicPartition]:
    """The pairs as TopicPartition objects."""
    return [TopicPartition(*tp) for tp in pairs]


def named_keys(by_partition: Mapping[tuple[str, int], V]) -> dict[TopicPartition, V]:
    """The mapping with its (topic, partition) keys as TopicPartition objects."""
    return {TopicPartition(*tp): value for tp, value in by_partition.items()}
