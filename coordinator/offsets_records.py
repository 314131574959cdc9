"""The records of the offsets topic, `__consumer_offsets`, wherever it is kept (a local directory or replicated
partitions on data nodes): its schema, configs, partitioning and the keys of its kinds of records.

- An offset: key ["offset", group, topic, partition], value {next_offset, metadata, commit_ms}; a null value (a
  tombstone) deletes it.
- A group's metadata (Kafka's GroupMetadataKey; only in a topic a coordinator instance owns: the replicated one):
  key ["group", group], in the group's partition; the value's columns are reused, `metadata` holding the group's
  state as JSON without liveness (coordinator.topic_group_store), `next_offset` its generation, `commit_ms` when
  it was written. A tombstone deletes the group.
- A leadership record: key ["leader"], no value, appended by a coordinator instance that became active, under
  its election epoch, so appends of older epochs are refused from then on.
- The migration records: key ["migrated"], no value, appended once the offsets an earlier store kept were moved
  into a replicated topic; ["migrated", "groups"] once the group states it kept were (`migrated_key`).
"""
from __future__ import annotations

import functools
import itertools
import json
import random
import struct
import zlib
from typing import Mapping, Sequence, cast

import pyarrow as pa

from fabric.common.names import OFFSETS_TOPIC
from fabric.common.records import TIMESTAMP, storage_schema
from fabric.common.types import TopicPartition
from fabric.storage.batch_encoding import Encoded

OFFSETS_PARTITIONS = 16  # Kafka's offsets.topic.num.partitions is 50; fixed once the topic exists
VALUE = pa.schema([("next_offset", pa.int64()), ("metadata", pa.string()), ("commit_ms", pa.int64())])
SCHEMA = storage_schema(VALUE)
HEADERS_TYPE, VALUE_TYPE = SCHEMA.field("headers").type, SCHEMA.field("value").type
# Kafka's offsets topic: compacted, 100 MiB segments (offsets.topic.segment.bytes); smaller here, so a pass runs
# sooner on a small fabric
SEGMENT_BYTES = 16 << 20
KEPT_KEYS = 4096  # record keys made or parsed that a process keeps (offset_key, key_parts)
CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.5", "retention.ms": "-1"}
__all__ = ["OFFSETS_TOPIC"]  # re-exported: the offsets topic's name lives with the other topic names
LEADER_KEY = json.dumps(["leader"]).encode()
MIGRATED_KEY = json.dumps(["migrated"]).encode()
GROUPS = "groups"  # what a migration moved in besides the offsets (`migrated_key`)

Row = tuple[bytes, Mapping[str, object] | None]  # a record's key and value (None: a tombstone or a marker)


def offsets_partition(group: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The partition of the offsets topic that holds `group`'s offsets."""
    return zlib.crc32(group.encode()) % partitions


@functools.lru_cache(maxsize=KEPT_KEYS)
def offset_key(group: str, tp: TopicPartition) -> bytes:
    """The key of `group`'s record of partition `tp` (kept: a consumer commits the same partitions again and
    again)."""
    return json.dumps(["offset", group, tp[0], tp[1]], separators=(",", ":")).encode()


@functools.lru_cache(maxsize=KEPT_KEYS)
def key_parts(key: bytes) -> tuple:
    """A record key's parts: ("offset", group, topic, partition), ("group", group), ("leader",), ... (kept, as
    offset_key keeps the keys)."""
    return tuple(json.loads(key))


def offset_rows(group: str, offsets: Mapping[TopicPartition, int], metadata: str | Mapping[TopicPartition, str],
                commit_ms: int) -> list[Row]:
    """The records of one commit of `group`'s `offsets`, a record per partition, in partition order; `metadata` the
    string stored with each, or each partition's ("" for one it leaves out)."""
    notes = metadata if isinstance(metadata, Mapping) else None
    return [(offset_key(group, tp), {"next_offset": o, "metadata": metadata if notes is None else notes.get(tp, ""),
                                     "commit_ms": commit_ms})
            for tp, o in sorted(offsets.items())]


def group_key(group: str) -> bytes:
    return json.dumps(["group", group], separators=(",", ":")).encode()


def migrated_key(what: str) -> bytes:
    """The key of the record saying that an earlier store's `what` ("offsets" or GROUPS) were moved in."""
    return MIGRATED_KEY if what == "offsets" else json.dumps(["migrated", what]).encode()


def batch(rows: Sequence[Row], now_us: int) -> pa.RecordBatch:
    """The stored rows of `rows`, all timestamped `now_us` (a batch that is not written as it is made: no IPC
    message is made for rows that are built)."""
    filled = _filled(rows, now_us)
    return build(rows, now_us) if filled is None else filled.batch


def encoded(rows: Sequence[Row], now_us: int) -> Encoded:
    """The stored rows of `rows`, all timestamped `now_us`, with their IPC message (what a log writes). A commit
    makes them on every call, and a consumer commits the same partitions with the same metadata again and again:
    the message of rows of offsets is the last such commit's with its numbers replaced (_Template), no batch built
    nor encoded; the rest are built column by column (build) and encoded."""
    filled = _filled(rows, now_us)
    return Encoded.of(build(rows, now_us)) if filled is None else filled


def _filled(rows: Sequence[Row], now_us: int) -> Encoded | None:
    """The rows' message from the template of their keys and metadata (_Template), or None where they have a
    tombstone or a marker, or no template fits them."""
    values = [value for _, value in rows if value is not None]
    if len(values) != len(rows):
        return None
    template = _template((tuple(key for key, _ in rows), tuple(cast(str, v["metadata"]) for v in values)))
    return None if template is None else Encoded(template.fill(values, now_us), len(rows), now_us, now_us, SCHEMA)


def build(rows: Sequence[Row], now_us: int) -> pa.RecordBatch:
    """batch() column by column."""
    return _built(rows, [now_us] * len(rows))


def _built(rows: Sequence[Row], timestamps: list[int]) -> pa.RecordBatch:
    """The stored rows of `rows`, stamped `timestamps` (one per row), column by column: what repeats is kept (the
    null headers column of each length, and the keys column of the last commits' keys)."""
    return pa.RecordBatch.from_arrays([_int64s(TIMESTAMP, timestamps), _keys(tuple(k for k, _ in rows)),
                                       _no_headers(len(rows)), _values([v for _, v in rows])], schema=SCHEMA)


class _Template:
    """The IPC message of a batch of offsets with given keys and metadata, and where each of its numbers lies in it
    (the timestamp, next_offset and commit_ms of each row: fixed-width values, so every batch of that shape is this
    message with those eight-byte fields replaced). `fill` gives the message of other numbers: that of the batch
    `build` makes of them, which a test checks byte for byte."""

    def __init__(self, message: bytes, positions: list[tuple[int, int, int]]) -> None:
        self.message, self.positions = message, positions

    @classmethod
    def find(cls, keys: tuple[bytes, ...], metadata: tuple[str, ...]) -> _Template | None:
        """The template of that shape: built with a distinct random number in each field, each then found where
        it occurs, once (None in the unlikely case one occurs elsewhere too: such a shape is built column by
        column)."""
        marks = [[_MARKS.getrandbits(62) | 1 << 62 for _ in range(3)] for _ in keys]
        rows: list[Row] = [(key, {"next_offset": o, "metadata": text, "commit_ms": c})
                           for key, text, (_, o, c) in zip(keys, metadata, marks, strict=True)]
        message = _built(rows, [t for t, _, _ in marks]).serialize().to_pybytes()
        found = [[message.find(_INT64.pack(mark)) for mark in row] for row in marks]
        if any(at < 0 or message.count(_INT64.pack(mark)) != 1 for row, ats in zip(marks, found, strict=True)
               for mark, at in zip(row, ats, strict=True)):
            return None
        return cls(message, [(t, o, c) for t, o, c in found])

    def fill(self, values: Sequence[Mapping[str, object]], now_us: int) -> pa.Buffer:
        """The message of rows of this shape with these `values` (one per row, in order), timestamped `now_us`."""
        message = bytearray(self.message)
        for (at_ts, at_offset, at_ms), value in zip(self.positions, values, strict=True):
            _INT64.pack_into(message, at_ts, now_us)
            _INT64.pack_into(message, at_offset, value["next_offset"])
            _INT64.pack_into(message, at_ms, value["commit_ms"])
        return pa.py_buffer(message)


_INT64 = struct.Struct("<q")
_MARKS = random.Random()


@functools.lru_cache(maxsize=1024)
def _template(shape: tuple[tuple[bytes, ...], tuple[str, ...]]) -> _Template | None:
    return _Template.find(*shape)


_NULL_FIELDS: Mapping[str, object] = {"next_offset": 0, "metadata": "", "commit_ms": 0}


def _values(values: list[Mapping[str, object] | None]) -> pa.Array:
    """The value column laid straight on its buffers, as pa.array(values, VALUE_TYPE) makes it (a null value's
    fields 0, "" and 0): the conversion of Python dicts cost the coordinator more than the rest of a commit's
    batch. Each value is None or has the three fields (an int, a str and an int)."""
    n = len(values)
    present = [v or _NULL_FIELDS for v in values]
    texts = [cast(str, v["metadata"]).encode() for v in present]
    ends = struct.pack(f"<{n + 1}i", 0, *itertools.accumulate(map(len, texts)))
    validity = None
    if None in values:  # a tombstone or a marker: the struct's null bits, its fields' values stand as they are
        validity = pa.py_buffer(bytes(sum(1 << j for j in range(8) if i + j < n and values[i + j] is not None)
                                      for i in range(0, n, 8)))
    return pa.Array.from_buffers(VALUE_TYPE, n, [validity], children=[
        _int64s(pa.int64(), [v["next_offset"] for v in present]),
        pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(ends), pa.py_buffer(b"".join(texts))]),
        _int64s(pa.int64(), [v["commit_ms"] for v in present])])


def _int64s(type_: pa.DataType, values: Sequence[object]) -> pa.Array:
    """A column of 64-bit `type_` over `values` (ints, none null), packed straight into its buffer."""
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(struct.pack(f"<{len(values)}q", *values))])


@functools.lru_cache(maxsize=64)
def _no_headers(n: int) -> pa.Array:
    return pa.nulls(n, HEADERS_TYPE)


@functools.lru_cache(maxsize=1024)
def _keys(keys: tuple[bytes, ...]) -> pa.Array:
    return pa.array(keys, pa.binary())
