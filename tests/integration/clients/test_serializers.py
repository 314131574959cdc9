"""kafka-python's serializers on every kind of cluster: the producer's key_serializer / value_serializer turn
application values into what is stored; a None value stays a tombstone; a serializer that fails refuses its
record alone."""
from __future__ import annotations

import json

import pytest

from fabric.common.errors import InvalidConfigError, InvalidRecordError


def test_serializers_turn_values_and_keys_into_bytes(fab, drain):
    fab.create_topic("events", partitions=1)
    with fab.producer(value_serializer=lambda v: json.dumps(v).encode(), key_serializer=str.encode) as producer:
        producer.send("events", {"n": 1}, key="user-1")
        producer.send("events", None, key="user-1")  # a tombstone is not serialized
    with fab.consumer("events", auto_offset_reset="earliest") as consumer:
        records = drain(consumer, 2)
    assert [(r.key, r.value) for r in records] == [(b"user-1", b'{"n": 1}'), (b"user-1", None)]


def test_a_failing_serializer_refuses_its_record_alone(fab, drain):
    fab.create_topic("events", partitions=1)
    with fab.producer(value_serializer=lambda v: json.dumps(v).encode(), linger_ms=60_000) as producer:
        kept = producer.send("events", [1])
        with pytest.raises(InvalidRecordError, match="value_serializer failed on this record \\(TypeError"):
            producer.send("events", object())
    assert kept.get(timeout=30).offset == 0
    with fab.consumer("events", auto_offset_reset="earliest") as consumer:
        assert [r.value for r in drain(consumer, 1)] == [b"[1]"]


def test_a_serializer_that_is_not_a_function_is_refused(fab):
    with pytest.raises(InvalidConfigError, match="value_serializer must be a function of one value"):
        fab.producer(value_serializer="json")
