"""Topic directories the metadata does not account for: the leftover of a delete that did not finish, or the
data of a topic whose metadata was lost (e.g. `__fabric/metadata.db` deleted), and how to register the latter
again from its data (`fabric topics recover`).

A delete first writes the marker `<topic>/.deleting`, then removes the metadata, then the directory: a
directory with the marker is a crashed delete's leftover and may be removed; any other directory holds data
nobody asked to delete, so it is never removed for a new topic of that name.
"""
from __future__ import annotations

import logging
import os
from typing import Sequence

import pyarrow as pa

from fabric.common.errors import FabricError, TopicExistsError
from fabric.common.names import validate_new_topic
from fabric.common.records import storage_schema, validate_value_schema, value_schema_of
from fabric.common.types import TopicRecovery
from fabric.coordinator.interface import Coordinator
from fabric.storage.log_manager import INTERNAL_DIR, LogManager
from fabric.storage.segment import DATA_SUFFIX, Segment

log = logging.getLogger(__name__)
DELETING = ".deleting"


class NotRecoverable(FabricError):
    """Why a topic directory cannot be registered from its data (reported, not raised to the caller)."""


def is_deleting(directory: str) -> bool:
    """True if a delete of this topic directory began (its marker exists)."""
    return os.path.exists(os.path.join(directory, DELETING))


def mark_deleting(directory: str) -> None:
    """Mark the topic directory as being deleted (durably, before its metadata goes); nothing if it is absent."""
    if not os.path.isdir(directory):
        return
    fd = os.open(os.path.join(directory, DELETING), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unmark_deleting(directory: str) -> None:
    """Withdraw the mark (the delete was refused before the metadata went)."""
    try:
        os.unlink(os.path.join(directory, DELETING))
    except FileNotFoundError:
        pass


def orphan_hint(name: str, directory: str) -> str:
    """How to proceed with the data directory of a topic the metadata does not know."""
    return (f"directory {directory} holds the data of a topic {name!r} the metadata does not know (was "
            f"__fabric/metadata.db lost?); run `fabric topics recover {name}` to register it again from its "
            "data, or move the directory away to start afresh")


def recover_topics(logs: LogManager, coordinator: Coordinator, names: Sequence[str] | None,
                   max_partitions: int) -> list[TopicRecovery]:
    """Register every topic directory of `names` (default: all under the root) the metadata does not know,
    from its data: partition count from the partition directories, value schema from a segment's schema
    frame. Configs are not in the data: the topics get the defaults. Returns what happened to each."""
    if names is None:
        names = sorted(e for e in os.listdir(logs.root)
                       if e != INTERNAL_DIR and os.path.isdir(os.path.join(logs.root, e)))
    known = set(coordinator.list_topics())
    out = []
    for name in names:
        try:
            out.append(_recover(logs, coordinator, name, known, max_partitions))
        except NotRecoverable as exc:
            log.warning("topic %s not recovered: %s", name, exc)
            out.append(TopicRecovery(name, "skipped", detail=str(exc)))
    return out


def _recover(logs: LogManager, coordinator: Coordinator, name: str, known: set[str],
             max_partitions: int) -> TopicRecovery:
    try:
        directory = logs.topic_dir(name)
    except FabricError as exc:
        raise NotRecoverable(f"not a topic directory: {exc}") from None
    if name in known:
        return TopicRecovery(name, "known", detail="already registered; nothing to do")
    if not os.path.isdir(directory):
        raise NotRecoverable(f"there is no directory {directory}")
    if is_deleting(directory):
        raise NotRecoverable(f"{directory} is the leftover of a delete that did not finish; left alone "
                             f"(`fabric topics create {name}` removes it)")
    partitions = _partition_count(directory, max_partitions)
    value_schema = _value_schema(directory, partitions)
    try:
        coordinator.create_topic(validate_new_topic(name), partitions, {}, value_schema)
    except TopicExistsError:
        return TopicRecovery(name, "known", detail="registered meanwhile by another call; nothing to do")
    typed = value_schema is not None
    detail = (f"registered with {partitions} partition(s) ({'typed' if typed else 'plain'}); its configs were lost "
              f"with the metadata, so the defaults apply: set them again with `fabric topics alter {name} "
              "--config KEY=VALUE`")
    log.warning("topic %s recovered from %s: %s", name, directory, detail)
    return TopicRecovery(name, "recovered", partitions, typed, detail)


def _partition_count(directory: str, max_partitions: int) -> int:
    """N, if the partition directories are exactly 0..N-1."""
    numbers = sorted(int(e) for e in os.listdir(directory)
                     if e.isascii() and e.isdigit() and str(int(e)) == e and os.path.isdir(os.path.join(directory, e)))
    if not numbers:
        raise NotRecoverable(f"{directory} has no partition directories (0, 1, ...)")
    if numbers != list(range(len(numbers))):
        missing = sorted(set(range(numbers[-1] + 1)) - set(numbers))[:5]
        raise NotRecoverable(f"{directory} lacks partition director{'y' if len(missing) == 1 else 'ies'} "
                             f"{', '.join(map(str, missing))}: partitions must be 0..N-1; restore them first")
    if len(numbers) > max_partitions:
        raise NotRecoverable(f"{directory} has {len(numbers)} partitions, over the limit of {max_partitions} per "
                             "topic; raise topic.max.partitions first")
    return len(numbers)


def _value_schema(directory: str, partitions: int) -> pa.Schema | None:
    """The typed value schema the segments were written with (None: a plain topic), read from the schema frame
    of each partition's first segment; every partition must agree."""
    found: dict[str, pa.Schema] = {}
    for p in range(partitions):
        partition_dir = os.path.join(directory, str(p))
        bases = sorted(int(n[:-len(DATA_SUFFIX)]) for n in os.listdir(partition_dir)
                       if n.endswith(DATA_SUFFIX) and n[:-len(DATA_SUFFIX)].isdigit())
        if bases:
            try:
                found[str(p)] = Segment(partition_dir, bases[0]).schema
            except FabricError as exc:
                raise NotRecoverable(f"cannot read the schema of partition {p}: {exc}") from None
    schemas = list(found.values())
    if not schemas:
        return None
    if any(not s.equals(schemas[0]) for s in schemas[1:]):
        raise NotRecoverable(f"the partitions of {directory} were written with different schemas")
    value_schema = value_schema_of(schemas[0]) if "value" in schemas[0].names else None
    if not storage_schema(value_schema).equals(schemas[0]):
        raise NotRecoverable(f"the segments of {directory} are not in the fabric's record layout")
    if value_schema is not None:
        try:
            validate_value_schema(value_schema)
        except FabricError as exc:
            raise NotRecoverable(f"its value schema cannot be registered: {exc}") from None
    return value_schema
