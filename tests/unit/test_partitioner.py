"""Partitioner: Kafka-exact murmur2, the vectorised batch path, and sticky placement of null keys."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.client.partitioner import (
    StickyPartitioner,
    murmur2,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)

# Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    bytes([ord("a"), ord("b"), ord("c")]): 479470107,
}

# (hash & 0x7fffffff) % n for the hashes above, worked out by hand from Kafka's values.
KAFKA_PARTITIONS = {
    b"21": {3: 0, 12: 0, 16: 12, 100: 40},
    b"foobar": {3: 0, 12: 6, 16: 14, 100: 66},
    b"a-little-bit-long-string": {3: 2, 12: 8, 16: 0, 100: 12},
    b"a-little-bit-longer-string": {3: 2, 12: 11, 16: 3, 100: 19},
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": {3: 2, 12: 5, 16: 13, 100: 77},
    b"abc": {3: 0, 12: 3, 16: 11, 100: 7},
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2.items())
def test_murmur2_matches_kafka_reference(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(
    ("key", "num_partitions", "expected"),
    [(key, n, p) for key, by_n in KAFKA_PARTITIONS.items() for n, p in by_n.items()],
)
def test_partition_for_key_matches_kafka_reference(key: bytes, num_partitions: int, expected: int) -> None:
    assert partition_for_key(key, num_partitions) == expected


@pytest.mark.parametrize("num_partitions", [3, 12, 16, 100])
def test_partitions_for_keys_matches_kafka_reference(num_partitions: int) -> None:
    keys = pa.array(list(KAFKA_PARTITIONS), pa.binary())
    expected = [by_n[num_partitions] for by_n in KAFKA_PARTITIONS.values()]
    assert partitions_for_keys(keys, num_partitions).tolist() == expected


def test_to_positive_clears_only_the_sign_bit() -> None:
    assert to_positive(5) == 5
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(-790332482) == 1357151166


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.none() | st.binary(min_size=0, max_size=40), max_size=50),
    num_partitions=st.integers(min_value=1, max_value=64),
    skip=st.integers(min_value=0, max_value=3),
    large=st.booleans(),
)
def test_partitions_for_keys_equals_partition_for_key(
    keys: list[bytes | None], num_partitions: int, skip: int, large: bool
) -> None:
    # Slicing off `skip` leading keys exercises arrays with a non-zero Arrow offset.
    array = pa.array(keys, pa.large_binary() if large else pa.binary())[skip:]
    expected = [-1 if key is None else partition_for_key(key, num_partitions) for key in keys[skip:]]
    result = partitions_for_keys(array, num_partitions)
    assert result.dtype == np.int32
    assert result.tolist() == expected


def test_partitions_for_keys_edge_cases() -> None:
    assert partitions_for_keys(pa.array([], pa.binary()), 4).tolist() == []
    assert partitions_for_keys(pa.array([None, None], pa.binary()), 4).tolist() == [-1, -1]
    assert partitions_for_keys(pa.array([b"", b"x"], pa.binary()), 7).tolist() == [
        partition_for_key(b"", 7),
        partition_for_key(b"x", 7),
    ]


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(TypeError):
        partitions_for_keys(pa.array(["text"], pa.string()), 4)
    with pytest.raises(ValueError):
        partitions_for_keys(pa.array([b"k"], pa.binary()), 0)
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def test_sticky_partitioner_sticks_until_a_new_batch() -> None:
    sticky = StickyPartitioner(random.Random(7))
    first = sticky.partition("orders", 8)
    assert 0 <= first < 8
    assert all(sticky.partition("orders", 8) == first for _ in range(20))

    seen = {first}
    previous = first
    for _ in range(200):
        sticky.on_new_batch("orders", 8)
        current = sticky.partition("orders", 8)
        assert current != previous
        assert 0 <= current < 8
        seen.add(current)
        previous = current
    assert seen == set(range(8))


def test_sticky_partitioner_single_partition_and_shrinking_topics() -> None:
    sticky = StickyPartitioner(random.Random(1))
    sticky.on_new_batch("solo", 1)
    assert sticky.partition("solo", 1) == 0

    # A stored partition beyond a (re-created, smaller) topic's range is replaced by one inside it.
    while sticky.partition("shrinks", 10) < 5:
        sticky.on_new_batch("shrinks", 10)
    assert 0 <= sticky.partition("shrinks", 5) < 5


def test_sticky_partitioner_keeps_topics_independent() -> None:
    sticky = StickyPartitioner(random.Random(3))
    other = sticky.partition("b", 50)
    for _ in range(10):
        sticky.on_new_batch("a", 50)
    assert sticky.partition("b", 50) == other
