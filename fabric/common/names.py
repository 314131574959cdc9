"""Validation of topic and group names: a name can never escape its directory."""
from __future__ import annotations

import re

from fabric.common.errors import InvalidGroupError, InvalidTopicError

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")
INTERNAL_PREFIX = "__"
OFFSETS_TOPIC = "__consumer_offsets"  # a cluster's group offsets on the data nodes (coordinator.offsets_records)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})  # topics the fabric creates itself: readable, never created by users


def validate_topic(name: object) -> str:
    """Return `name` if it is a legal topic name (a user's, or one of the INTERNAL_TOPICS), else raise
    InvalidTopicError saying why."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(name).__name__}")
    if not 1 <= len(name) <= MAX_TOPIC_NAME:
        raise InvalidTopicError(
            f"topic name must be 1 to {MAX_TOPIC_NAME} characters, got {len(name)}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}; choose a name with other characters")
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        raise InvalidTopicError(
            f"topic name {name!r} contains illegal characters {bad}; "
            "use only ASCII letters, digits, '.', '_' and '-'")
    if name.startswith(INTERNAL_PREFIX) and name not in INTERNAL_TOPICS:
        raise InvalidTopicError(
            f"topic name {name!r} starts with {INTERNAL_PREFIX!r}, which is reserved for the fabric's "
            "internal data; rename it")
    return name


def validate_new_topic(name: object) -> str:
    """Return `name` if a user may create a topic of that name (validate_topic, and not an internal topic)."""
    if validate_topic(name) in INTERNAL_TOPICS:
        raise InvalidTopicError(f"topic name {name!r} is the fabric's internal offsets topic, which the coordinator "
                                "creates itself; choose another name")
    return str(name)


def validate_group(group_id: object) -> str:
    """Return `group_id` if it is a non-empty string, else raise InvalidGroupError."""
    if not isinstance(group_id, str) or not group_id:
        raise InvalidGroupError(f"group id must be a non-empty string, got {group_id!r:.80}; name the consumer group "
                                "(Kafka's group.id), or leave group_id out (None) for a consumer that assigns its "
                                "partitions itself")
    if len(group_id) > 1024:
        raise InvalidGroupError("group id is longer than 1024 characters; shorten it")
    return group_id
