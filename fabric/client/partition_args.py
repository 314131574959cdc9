"""How consumer calls name their partitions, in the forms each of Kafka's Python clients uses, read into
TopicPartition objects, so that one call takes every form its users type from memory:

- kafka-python: a TopicPartition per argument: pause(tp1, tp2), seek(tp, offset), position(tp), committed(tp);
- confluent-kafka: one list: pause([tp1, tp2]), position([tp]), committed([tp]); a TopicPartition carrying
  the offset: seek(TopicPartition(topic, partition, offset)), assign([TopicPartition(topic, partition, offset)]),
  commit(offsets=[TopicPartition(topic, partition, offset, metadata)]); and commit(message);
- kafka-python's commit({tp: OffsetAndMetadata(offset, metadata)}) (split_metadata);
- the fabric's own: seek(topic, partition, offset), position(topic, partition).

A TopicPartition is any (topic, partition) pair; an offset it carries (`.offset`) is kept.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, TypeGuard, TypeVar

from fabric.client.topic_partition import LOGICAL_OFFSETS, TopicPartition
from fabric.common import checks
from fabric.common.errors import InvalidArgumentError
from fabric.common.records import Record

K = TypeVar("K")


def is_list(args: tuple[Any, ...]) -> bool:
    """True if the call's arguments are one collection of partitions (confluent-kafka's form), not partitions."""
    return len(args) == 1 and _is_collection(args[0])


def partitions(args: tuple[Any, ...], what: str) -> list[TopicPartition]:
    """The partitions of a call taking several (pause, resume, seek_to_beginning): each an argument of its own
    (kafka-python's pause(tp1, tp2)), or one list of them (confluent-kafka's pause([tp1, tp2]))."""
    given = list(args[0] if is_list(args) else args)
    if not all(_is_pair(tp) for tp in given):
        name = what.removesuffix("()")
        raise InvalidArgumentError(
            f"{what} takes (topic, partition) pairs such as TopicPartition('orders', 0), as arguments or in one "
            f"list: {name}(tp1, tp2) or {name}([tp1, tp2]); got {checks.shown(args)}")
    return [_partition(tp, what) for tp in given]


def partition_list(values: Any, what: str) -> list[TopicPartition]:
    """A call's one collection of partitions (assign, beginning_offsets): a list, never a single pair."""
    if not _is_collection(values):
        raise InvalidArgumentError(f"{what} takes a list of (topic, partition) pairs, got {checks.shown(values)}; "
                                   f"e.g. {what.removesuffix('()')}([TopicPartition('orders', 0)])")
    return partitions((values,), what)


def one(args: tuple[Any, ...], what: str, or_list: bool = False) -> TopicPartition:
    """The one partition of a call about a single partition (position, committed, highwater): a TopicPartition
    (kafka-python's position(tp)) or the topic and partition as two arguments (position('orders', 0)).
    `or_list`: the call also takes a list (its error message says so)."""
    if len(args) == 1 and _is_pair(args[0]):
        return _partition(args[0], what)
    if len(args) == 2 and isinstance(args[0], str):
        return _partition(args, what)
    name = what.removesuffix("()")
    forms = f"{name}(TopicPartition('orders', 0)) or {name}('orders', 0)"
    takes = f"a list of partitions or one partition: {name}([tp1, tp2]), " if or_list else "one partition: "
    raise InvalidArgumentError(f"{what} takes {takes}{forms}; got {checks.shown(args)}")


def seek_target(partition: Any, offset: Any, more: tuple[Any, ...]) -> tuple[TopicPartition, int]:
    """seek()'s partition and offset: seek(tp, offset) (kafka-python), seek(TopicPartition(topic, partition,
    offset)) (confluent-kafka, whose logical offsets OFFSET_BEGINNING, ... a TopicPartition may carry) or
    seek(topic, partition, offset)."""
    carried = False
    if len(more) == 1 and isinstance(partition, str):
        tp, offset = _partition((partition, offset), "seek()"), more[0]
    elif not more and not isinstance(partition, str):
        tp = _partition(partition, "seek()")
        carried, offset = offset is None, tp.offset if offset is None else offset
    else:
        tp = None
    if tp is None or offset is None:
        given = checks.shown((partition, offset, *more))
        raise InvalidArgumentError("seek() takes a partition and an offset: seek(TopicPartition('orders', 0), 42), "
                                   f"seek(TopicPartition('orders', 0, 42)) or seek('orders', 0, 42); got {given}")
    logical = carried and type(offset) is int and offset in LOGICAL_OFFSETS
    return tp, offset if logical else checks.offset(offset, "seek() offset")


def commit_offsets(offsets: Any, message: Record | None) -> Any:
    """commit()'s offsets as the consumer commits them (a mapping of partitions to next offsets, or None for the
    positions): kafka-python's {tp: offset} as it is, confluent-kafka's offsets=[TopicPartition(topic,
    partition, offset)] as that mapping, and confluent-kafka's commit(record) or commit(message=record) as the
    offset after the record."""
    if isinstance(offsets, Record) and message is None:
        offsets, message = None, offsets
    if message is not None:
        if offsets is not None:
            raise InvalidArgumentError("commit() takes offsets or a message (a record), not both")
        return {(message.topic, message.partition): message.offset + 1}
    if offsets is None or isinstance(offsets, Mapping) or not _is_collection(offsets):
        return offsets  # commit() names what else it takes
    return {tp: tp.offset for tp in partition_list(offsets, "commit()")}


def _is_pair(value: Any) -> TypeGuard[tuple[Any, ...] | list[Any]]:
    return isinstance(value, (tuple, list)) and len(value) == 2


def _partition(value: Any, what: str) -> TopicPartition:
    topic, partition = checks.topic_partition(value, what)
    return TopicPartition(topic, partition, getattr(value, "offset", None), getattr(value, "metadata", None))


def split_metadata(offsets: Mapping[Any, Any], what: str) -> tuple[dict[Any, Any], dict[Any, str]]:
    """A commit's offsets and each partition's metadata, as Kafka's clients give them: kafka-python's {tp:
    OffsetAndMetadata(offset, metadata)} (any value with .offset), confluent-kafka's TopicPartition(topic,
    partition, offset, metadata) keys (commit_offsets made its list a mapping), plain {tp: offset} (no metadata)."""
    plain: dict[Any, Any] = {}
    notes: dict[Any, str] = {}
    for tp, value in offsets.items():
        carried = hasattr(value, "offset") and not isinstance(value, int)
        plain[tp] = value.offset if carried else value
        note = getattr(value if carried else tp, "metadata", None)
        if note is not None and not isinstance(note, str):
            raise InvalidArgumentError(f"the metadata {what} stores for {tp!r:.80} is a string or None, got "
                                       f"{checks.shown(note)}")
        if note:
            notes[tp] = note
    return plain, notes


def by_metadata(offsets: Mapping[K, int], notes: Mapping[Any, str]) -> dict[str, dict[K, int]]:
    """A commit's offsets grouped by their metadata ("" where none): a fabric commit stores one string with all of
    its partitions, so partitions with different metadata go in commits of their own."""
    groups: dict[str, dict[K, int]] = {}
    for tp, offset in offsets.items():
        groups.setdefault(notes.get(tp, ""), {})[tp] = offset
    return groups


def _is_collection(value: Any) -> bool:
    """A list, set or tuple of partitions; not a string, and not one (topic, partition) pair."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return False
    return not (_is_pair(value) and isinstance(value[0], str))
