"""What every metadata store checks before it writes, whoever called it (a client, the broker, a raw call to
the service): the shared rules of fabric.common (topic names, topic configs, value schemas, group ids) and the
bounds of what a store keeps (partition counts, offsets, transaction ids). Both stores call these first, so
nothing a client could not create ever reaches their tables or znodes.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from fabric.common import checks
from fabric.common.config import INT_MAX, LONG_MAX, TOPIC_SETTINGS, validate_topic_config
from fabric.common.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    StaleControllerEpochError,
)
from fabric.common.names import validate_group, validate_topic
from fabric.common.records import validate_value_schema
from fabric.common.redaction import clip
from fabric.common.types import (
    LeaderAndIsr,
    PartitionRegistration,
    TopicInfo,
    TopicPartition,
    TransactionalOffsets,
    transaction_sequence,
)

MAX_OFFSET_METADATA = 4096  # Kafka's offset.metadata.max.bytes
MAX_TRANSACTION_ID = 1024
MAX_CONFIG_KEY, MAX_CONFIG_VALUE = 100, 1000
DIRECTORY_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


def partition_count(name: str, partitions: Any) -> int:
    """A topic's partition count as a store keeps it: from 1 to 2^31-1 (partition numbers are 32-bit)."""
    return checks.partition_count(partitions, f"the partition count of topic {name!r}", INT_MAX)


def partition_growth(name: str, current: int, total: int) -> None:
    """InvalidPartitionsError if a count of `total` would remove partitions of topic `name`, which has `current`:
    partitions are added, never removed (Kafka's CreatePartitions)."""
    if total < current:
        raise InvalidPartitionsError(f"topic {name!r} has {current} partitions; partitions can be added, never removed")


def _config(name: str, config: Any) -> Mapping[str, Any]:
    """`config` if it is a mapping of short strings (no topic config key or value is long, and an error must
    not echo a long one); the shared rules check the rest."""
    if not isinstance(config, Mapping):
        raise InvalidConfigError(f"topic {name!r}: a config must be a mapping of Kafka config keys to values")
    for key, value in config.items():
        if not isinstance(key, str) or len(key) > MAX_CONFIG_KEY:
            raise InvalidConfigError(f"unknown topic config {clip(key)}; known keys: "
                                     f"{', '.join(sorted(TOPIC_SETTINGS))}")
        if value is not None and len(str(value)) > MAX_CONFIG_VALUE:
            raise InvalidConfigError(f"invalid value {clip(value)} for topic config {key!r}: too long")
    return config


def topic(name: Any, partitions: Any, config: Any, value_schema: Any) -> dict[str, str]:
    """Check a new topic; returns its config normalised to strings (fabric.common.config's rules)."""
    validate_topic(name)
    partition_count(name, partitions)
    config = _config(name, config)
    if value_schema is not None:
        if not isinstance(value_schema, pa.Schema):
            raise InvalidRequestError(f"topic {name!r}: value_schema must be a pyarrow.Schema or None")
        validate_value_schema(value_schema)
    return validate_topic_config(config)


def new_topic(name: Any, partitions: Any, config: Any, value_schema: Any) -> TopicInfo:
    """A new topic's metadata, checked (topic()), with a fresh topic id."""
    return TopicInfo(name, partitions, topic(name, partitions, config, value_schema), value_schema, uuid.uuid4().hex)


def config_change(name: str, current: Mapping[str, str], change: Any) -> dict[str, str]:
    """Topic `name`'s config after `change` (a value of None removes the override); every key must be a known
    topic config and every value valid, so no change can leave a topic that TopicConfig cannot read."""
    change = _config(name, change)
    removed = [k for k, v in change.items() if v is None]
    validate_topic_config({k: TOPIC_SETTINGS[k].default if k in TOPIC_SETTINGS else "" for k in removed})
    merged = {**current, **validate_topic_config({k: v for k, v in change.items() if v is not None})}
    return {k: v for k, v in merged.items() if k not in removed}


def offsets(group: Any, offsets: Any, metadata: Any) -> None:
    """Check an offset commit's shape: (topic, partition) keys, offsets that are ints from 0 to 2^63-1, and
    metadata of at most MAX_OFFSET_METADATA characters: one string, or (a transaction's) a mapping of some of the
    committed partitions to theirs. (The broker also checks them against the logs.)"""
    validate_group(group)
    if not isinstance(offsets, Mapping):
        raise InvalidRequestError("offsets must be a mapping of (topic, partition) to the next offset to read")
    for key, offset in offsets.items():
        if not (isinstance(key, tuple) and _is_pair(key)):
            raise InvalidRequestError(f"an offset commit's key must be a (topic, partition) pair, got {clip(key)}")
        if not checks.is_integer(offset):
            raise InvalidRequestError(f"the offset committed for {key[0]}-{key[1]} must be an int, got "
                                      f"{type(offset).__name__} {clip(offset)}")
        if not 0 <= offset <= LONG_MAX:
            raise OffsetOutOfRangeError(f"the offset committed for {key[0]}-{key[1]} must be from 0 to {LONG_MAX}, "
                                        f"got {clip(offset)}")
    if not isinstance(metadata, Mapping):
        _metadata(metadata)
        return
    for key, note in metadata.items():
        if key not in offsets:
            raise InvalidRequestError(f"offset metadata is given for {clip(key)}, whose offset is not committed: "
                                      "give metadata only for the partitions committed")
        _metadata(note)


def _metadata(note: Any) -> None:
    if not isinstance(note, str) or len(note) > MAX_OFFSET_METADATA:
        raise InvalidRequestError(f"offset metadata must be a string of at most {MAX_OFFSET_METADATA} characters, "
                                  f"got {clip(note)}")


def _is_pair(value: tuple | list) -> bool:
    """Whether `value` holds a (topic, partition) pair: a string and an int from 0 to INT_MAX."""
    return len(value) == 2 and isinstance(value[0], str) and checks.is_integer(value[1]) and 0 <= value[1] <= INT_MAX


def group_partitions(group: Any, partitions: Any) -> list[TopicPartition]:
    """A request's partitions of a group (an offset deletion's): (topic, partition) pairs, lists as JSON sends
    them taken too, with valid topic names; sorted, each once."""
    validate_group(group)
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Sequence):
        raise InvalidRequestError(f"partitions must be a list of (topic, partition) pairs, got {clip(partitions)}")
    for item in partitions:
        if not (isinstance(item, (tuple, list)) and _is_pair(item)):
            raise InvalidRequestError(f"a partition must be a (topic, partition) pair, got {clip(item)}")
        validate_topic(item[0])
    return sorted({(topic, int(partition)) for topic, partition in partitions})


def transactional_offsets(value: Any) -> TransactionalOffsets:
    """A producer transaction's group offsets, checked as an offset commit's (`offsets`), with a generation
    (-1: none) and a member id (a string) that fence a group member's commit."""
    if not isinstance(value, TransactionalOffsets):
        raise InvalidRequestError(f"a transaction's offsets are a TransactionalOffsets, got {clip(value)}")
    offsets(value.group, value.offsets, value.metadata)
    checks.integer(value.generation, "a transaction's group generation (-1: none)", -1, INT_MAX, InvalidRequestError)
    if not isinstance(value.member_id, str):
        raise InvalidRequestError(f"a transaction's member id must be a string, got {clip(value.member_id)}")
    return value


def transactional_id(value: Any) -> str:
    """A transactional id, checked: a non-empty string of at most MAX_TRANSACTION_ID characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TRANSACTION_ID:
        raise InvalidRequestError(f"a transactional id must be a string of 1 to {MAX_TRANSACTION_ID} characters, "
                                  f"got {clip(value)}")
    return value


def transaction(txn: Any) -> tuple[str, int]:
    """A transaction id `<transactional id>:<sequence>` split in two (see transaction_sequence), checked: a
    non-empty string of at most MAX_TRANSACTION_ID characters with a sequence below 2^63."""
    if not isinstance(txn, str) or not 1 <= len(txn) <= MAX_TRANSACTION_ID:
        raise InvalidRequestError(f"a transaction id must be a string of 1 to {MAX_TRANSACTION_ID} characters "
                                  f"(<transactional id>:<sequence>), got {clip(txn)}")
    transactional_id, sequence = transaction_sequence(txn)
    if not transactional_id or sequence > LONG_MAX:
        raise InvalidRequestError(f"transaction id {clip(txn)} must be <transactional id>:<sequence> with a "
                                  f"non-empty id and a sequence from 0 to {LONG_MAX}")
    return transactional_id, sequence


def _controller_epoch(tp: TopicPartition, state: LeaderAndIsr, current: int) -> None:
    if state.controller_epoch != current:
        raise StaleControllerEpochError(
            f"the state of {tp[0]}-{tp[1]} was decided under controller epoch {state.controller_epoch}, but the "
            f"current one is {current}: only the active controller writes partition states")


def registrations(name: str, partitions: Any, first: int) -> None:
    """Replicated partitions to add to topic `name` (which has `first`): PartitionRegistrations numbered on
    from `first` without a gap."""
    if not isinstance(partitions, Mapping) or sorted(partitions) != list(range(first, first + len(partitions))):
        raise InvalidPartitionsError(f"topic {name!r}: new replicated partitions must be numbered from {first} on "
                                     "without a gap")
    partition_count(name, first + len(partitions))
    for p, registration in partitions.items():
        if not isinstance(registration, PartitionRegistration):
            raise InvalidRequestError(f"partition {name}-{p} must be given as a PartitionRegistration")


def new_partitions(name: str, partitions: Any, first: int, controller_epoch: int) -> None:
    """registrations(), whose states the current controller decided."""
    registrations(name, partitions, first)
    for p, registration in partitions.items():
        _controller_epoch((name, p), registration.state, controller_epoch)


def state_update(tp: TopicPartition, stored: PartitionRegistration, new: Any,
                 controller_epoch: int) -> PartitionRegistration:
    """The registration after a change of state (a LeaderAndIsr) or of assignment and state (a
    PartitionRegistration: a reassignment), checked: decided by the current controller, a higher partition
    epoch, a leader epoch that never goes back, and an ISR within the replicas."""
    if isinstance(new, PartitionRegistration):
        assignment, state = new.assignment, new.state
    elif isinstance(new, LeaderAndIsr):
        assignment, state = stored.assignment, new
    else:
        raise InvalidRequestError(f"the new state of {tp[0]}-{tp[1]} must be a LeaderAndIsr or a "
                                  "PartitionRegistration")
    _controller_epoch(tp, state, controller_epoch)
    old = stored.state
    if state.partition_epoch <= old.partition_epoch or state.leader_epoch < old.leader_epoch:
        raise InvalidRequestError(f"the state of {tp[0]}-{tp[1]} must move to a higher partition epoch and never "
                                  f"to a lower leader epoch: {old} -> {state}")
    try:
        return PartitionRegistration(assignment, state)
    except ValueError as exc:
        raise InvalidRequestError(f"partition {tp[0]}-{tp[1]}: {exc}") from None


def node(node_id: Any, address: Any, rack: Any, directory_id: Any) -> None:
    """A data node's registration: an id from 0 to 2^31-1, a host:port address, a rack name or None, the id of
    its data directory (letters, digits, - and _, as a node's __fabric/directory.id holds)."""
    if not checks.is_integer(node_id) or not 0 <= node_id <= INT_MAX:
        raise InvalidRequestError(f"a node id must be an int from 0 to {INT_MAX}, got {clip(node_id)}")
    if not isinstance(address, str) or not address or len(address) > MAX_CONFIG_VALUE:
        raise InvalidRequestError(f"node {node_id}: the address must be a non-empty HOST:PORT, got {clip(address)}")
    if rack is not None and (not isinstance(rack, str) or not rack or len(rack) > MAX_CONFIG_KEY):
        raise InvalidRequestError(f"node {node_id}: a rack must be a non-empty name or None, got {clip(rack)}")
    if not isinstance(directory_id, str) or not DIRECTORY_ID.fullmatch(directory_id):
        raise InvalidRequestError(f"node {node_id}: a data directory id must be 1 to 64 letters, digits, - or _, "
                                  f"got {clip(directory_id)}")


def plain_growth(name: str, replicated: bool) -> None:
    """set_partitions applies to topics created without replication; a replicated topic's new partitions
    need replicas placed (the controller's add_replicated_partitions)."""
    if replicated:
        raise InvalidPartitionsError(f"topic {name!r} is replicated: its new partitions are placed on nodes by the "
                                     "controller (add_replicated_partitions)")


def replicated_growth(name: str, replicated: bool) -> None:
    """add_replicated_partitions applies to replicated topics only."""
    if not replicated:
        raise InvalidPartitionsError(f"topic {name!r} was created without replication; grow it with set_partitions")
