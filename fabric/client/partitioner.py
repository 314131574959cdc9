"""Key -> partition assignment, bit-compatible with Kafka's Java producer.

A keyed record goes to ``toPositive(murmur2(key)) % numPartitions`` exactly as Kafka's built-in partitioner
places it, so topics shared with Java, librdkafka (``murmur2_random``) or Sarama-compatible producers agree
on where each key lives. Null keys are left to :class:`StickyPartitioner`.
"""
from __future__ import annotations

import random
import struct
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fabric.common.errors import InvalidRecordError, UnknownPartitionError

SEED = 0x9747B28C
M = 0x5BD1E995
R = 24
_MASK32 = 0xFFFFFFFF
_M32 = np.uint32(M)
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)
FEW = 64  # records placed one by one in Python (numpy's fixed costs outweigh its speed below this)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as Java's signed 32-bit int, so placements match Kafka's."""
    length = len(data)
    h = (SEED ^ length) & _MASK32
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * M) & _MASK32
        k ^= k >> R
        k = (k * M) & _MASK32
        h = ((h * M) & _MASK32) ^ k
    if length & 3:
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * M) & _MASK32
    h ^= h >> 13
    h = (h * M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which is wrong for MIN_VALUE)."""
    return n & 0x7FFFFFFF


def _check_partitions(num_partitions: int) -> None:
    """Reject a partition count no topic can have, instead of failing with a ZeroDivisionError."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner assigns ``key`` to."""
    _check_partitions(num_partitions)
    return to_positive(murmur2(key)) % num_partitions


def partitions_for_keys(keys: pa.Array, num_partitions: int) -> np.ndarray:
    """Vectorised ``partition_for_key`` over a binary Arrow array (-1 for null keys), for whole batches.

    The murmur2 rounds run column-wise in uint32: round j mixes the j-th 4-byte word of every key that still
    has one, read straight from the Arrow data buffer, so the Python-level loop is over the longest key's
    word count, never over keys.
    """
    _check_partitions(num_partitions)
    if pa.types.is_binary(keys.type):
        offset_type = np.int32
    elif pa.types.is_large_binary(keys.type):
        offset_type = np.int64
    else:
        raise TypeError(f"keys must be a binary or large_binary array, got {keys.type}")
    n = len(keys)
    if keys.null_count == n:  # no keys at all (also n == 0): nothing to hash
        return np.full(n, -1, dtype=np.int32)
    _, offsets_buf, data_buf = keys.buffers()
    item = np.dtype(offset_type).itemsize
    offsets = np.frombuffer(offsets_buf, dtype=offset_type, count=n + 1, offset=keys.offset * item)
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, dtype=np.uint8)[first:last]
    # Three zero bytes past the end let a 4-byte read start at any byte; a stride-1 uint32 view gives the
    # little-endian word starting at every byte offset.
    padded = np.concatenate([data, np.zeros(3, dtype=np.uint8)])
    words = np.ndarray(shape=(len(data),), dtype="<u4", buffer=padded, strides=(1,))

    starts = (offsets[:-1] - first).astype(np.int64)
    lengths = np.diff(offsets).astype(np.int64)
    valid = keys.is_valid().to_numpy(zero_copy_only=False)
    h = np.uint32(SEED) ^ lengths.astype(np.uint32)

    blocks = lengths >> 2
    active = np.flatnonzero(valid & (blocks > 0))
    j = 0
    while active.size:
        k = words[starts[active] + 4 * j].astype(np.uint32)
        k *= _M32
        k ^= k >> np.uint32(R)
        k *= _M32
        h[active] = (h[active] * _M32) ^ k
        j += 1
        active = active[blocks[active] > j]

    rem = lengths & 3
    tail = np.flatnonzero(valid & (rem > 0))
    tail_words = words[starts[tail] + 4 * blocks[tail]].astype(np.uint32) & _TAIL_MASKS[rem[tail]]
    h[tail] = (h[tail] ^ tail_words) * _M32

    h ^= h >> np.uint32(13)
    h *= _M32
    h ^= h >> np.uint32(15)
    parts = ((h & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    parts[~valid] = -1
    return parts


class StickyPartitioner:
    """Kafka's sticky placement of null-key records: one partition per topic per batch, so batches fill up."""

    def __init__(self, rng: random.Random | None = None) -> None:
        """Start with no sticky partitions; ``rng`` makes the choices reproducible in tests."""
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int) -> int:
        """The topic's sticky partition, picked at random if it has none or it is out of range."""
        _check_partitions(num_partitions)
        current = self._current.get(topic)
        if current is None or current >= num_partitions:
            current = self._current[topic] = self._rng.randrange(num_partitions)
        return current

    def on_new_batch(self, topic: str, num_partitions: int) -> None:
        """Move the topic to a different random partition (if there is one) so null keys spread out."""
        current = self.partition(topic, num_partitions)
        if num_partitions > 1:
            pick = self._rng.randrange(num_partitions - 1)
            self._current[topic] = pick + 1 if pick >= current else pick


def assign_partitions(topic: str, keys: pa.ChunkedArray | pa.Array, explicit: pa.ChunkedArray | None,
                      num_partitions: int, sticky: StickyPartitioner) -> np.ndarray:
    """Each row's partition: the explicit one if given, else murmur2 of the key, else the sticky one
    (shared with the Spark sink so both place records exactly as Kafka's Java producer does)."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    parts = partitions_for_keys(keys, num_partitions)
    if explicit is not None:
        if not (pa.types.is_integer(explicit.type) or pa.types.is_null(explicit.type)):
            raise InvalidRecordError(f"column 'partition' must hold integers (or nulls), got {explicit.type}")
        wide = pc.fill_null(explicit.cast(pa.int64()), -1).to_numpy()
        bad = wide[(wide >= num_partitions) | (wide < -1)]
        given = wide.astype(np.int32)
        if len(bad):
            raise UnknownPartitionError(
                f"topic {topic!r} has partitions 0..{num_partitions - 1}; there is no partition {bad[0]}")
        parts = np.where(given >= 0, given, parts)
    if (parts < 0).any():
        parts = np.where(parts < 0, sticky.partition(topic, num_partitions), parts)
        sticky.on_new_batch(topic, num_partitions)
    return parts.astype(np.int32)


def assign_listed(topic: str, keys: Sequence[bytes | None], explicit: Sequence[int | None], num_partitions: int,
                  sticky: StickyPartitioner) -> np.ndarray:
    """assign_partitions for records given as Python lists (a producer's buffer: keys as bytes or None, explicit
    partitions as ints or None), the same placements; a few records are placed one by one."""
    if len(keys) > FEW:
        return assign_partitions(topic, pa.array(keys, pa.binary()), pa.chunked_array([pa.array(explicit, pa.int32())]),
                                 num_partitions, sticky)
    _check_partitions(num_partitions)
    parts = []
    for key, given in zip(keys, explicit, strict=True):
        if given is not None and not -1 <= given < num_partitions:
            raise UnknownPartitionError(
                f"topic {topic!r} has partitions 0..{num_partitions - 1}; there is no partition {given}")
        if given is None or given < 0:
            given = -1 if key is None else to_positive(murmur2(key)) % num_partitions
        parts.append(given)
    if -1 in parts:
        current = sticky.partition(topic, num_partitions)
        parts = [current if p < 0 else p for p in parts]
        sticky.on_new_batch(topic, num_partitions)
    return np.array(parts, np.int32)
