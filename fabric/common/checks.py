"""Checks of the plain arguments of client calls: whole numbers in a range (partition counts, partition
numbers, offsets), timeouts and (topic, partition) pairs.

Clients check before anything is sent and the server checks what it receives, with these same rules, so a
wrong type or an absurd number is refused naming the argument and what it takes instead of failing deep
inside (an OverflowError from SQLite, a TypeError from a comparison).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Iterable, Mapping, TypeVar

from fabric.common.config import INT_MAX as INT_MAX  # (what callers of these checks name)
from fabric.common.config import LONG_MAX as LONG_MAX
from fabric.common.errors import FabricError, InvalidArgumentError, InvalidPartitionsError
from fabric.common.names import validate_topic
from fabric.common.types import TopicPartition

T = TypeVar("T")


def shown(value: object) -> str:
    """`value` as an error message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_integer(value: Any) -> bool:
    """A whole number that is not a bool (True is an int to Python, never a count or an offset to the fabric). A
    plain int, what nearly every request carries, is told at once, without the ABC check (~20x its cost)."""
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def integer(value: Any, what: str, lo: int = 0, hi: int = LONG_MAX,
            error: type[FabricError] = InvalidArgumentError) -> int:
    """`value` as an int if it is a whole number (a bool is not) from `lo` to `hi`; else `error` naming `what`."""
    if not is_integer(value):
        raise error(f"{what} must be an integer from {lo} to {hi}, got {type(value).__name__} {shown(value)}")
    value = int(value)
    if not lo <= value <= hi:
        raise error(f"{what} must be an integer from {lo} to {hi}, got {value}")
    return value


def partition_count(value: Any, what: str = "the partition count", hi: int = LONG_MAX) -> int:
    """A topic's partition count: a whole number from 1 (InvalidPartitionsError otherwise). The cluster refuses
    counts over its own per-topic limit (topic.max.partitions) and names it; clients check only the type."""
    return integer(value, what, 1, hi, InvalidPartitionsError)


def offset(value: Any, what: str = "offset") -> int:
    """A log offset: a whole number >= 0."""
    return integer(value, what, 0, LONG_MAX)


def unless_forever(timeout: Any, default: Any = None) -> Any:
    """A timeout in seconds as confluent-kafka's calls take it: `default` (None: forever) where none is given or a
    negative one (librdkafka's -1); anything else as given, for the call to check."""
    return default if timeout is None or (isinstance(timeout, (int, float)) and timeout < 0) else timeout


def timeout(value: Any, what: str = "timeout") -> float:
    """A timeout in seconds: a number >= 0 (not NaN)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or value < 0:
        raise InvalidArgumentError(f"{what} must be a number of seconds >= 0, got {shown(value)}")
    return float(value)


def topic_partition(value: Any, what: str) -> TopicPartition:
    """A (topic, partition) pair: a valid topic name and a partition number >= 0."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidArgumentError(
            f"{what} takes (topic, partition) pairs, got {shown(value)}; e.g. ('orders', 0)")
    topic, partition = value
    return validate_topic(topic), integer(partition, f"the partition of {topic!r} in {what}", 0, INT_MAX - 1)


def topic_partitions(values: Any, what: str) -> list[TopicPartition]:
    """A collection of (topic, partition) pairs (a single pair is refused: wrap it in a list)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) or _is_pair(values):
        raise InvalidArgumentError(
            f"{what} takes a list of (topic, partition) pairs, got {shown(values)}; e.g. [('orders', 0)]")
    return [topic_partition(tp, what) for tp in values]


def _is_pair(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)


def by_partition(values: Any, what: str, check: Callable[[Any, str], T]) -> dict[TopicPartition, T]:
    """A mapping of (topic, partition) pairs to values, each value passed through `check(value, what)`."""
    if not isinstance(values, Mapping):
        raise InvalidArgumentError(
            f"{what} takes a dict of (topic, partition) pairs to values, got {shown(values)}; "
            "e.g. {('orders', 0): 42}")
    return {topic_partition(tp, what): check(value, f"the value for {tp!r} in {what}") for tp, value in values.items()}
