"""Stored rows to unsealed frames: the header fields a batch's rows decide (record count, timestamps, codec,
timestamp type) and its Arrow IPC payload, plus the one-record frame of a transaction marker. A Log seals them
at its end; a FrameEncoder seals them outside any log. Rows whose maker made their IPC message itself (`Encoded`)
are written as they are. Also the check that a compacted topic's records have keys, made before anything is
written."""
from __future__ import annotations

import struct
from dataclasses import replace
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.codecs import CODECS
from fabric.common.config import TopicConfig
from fabric.common.errors import InvalidRecordError
from fabric.common.records import LOG_APPEND_TIME, TIMESTAMP
from fabric.storage import frame
from fabric.storage.frame import FrameHeader


class Encoded:
    """Stored rows with their Arrow IPC record-batch message already made, uncompressed, against `schema` (the
    log's): a maker that lays the message out itself (the offsets topic's commits) hands it to Log.append, which
    writes it as it is, the batch never built nor encoded again. The maker vouches for what Log.append would check
    or read in a batch: `first_timestamp` and `max_timestamp` are the rows' first and largest, and every row has a
    key. `batch` is the rows themselves, decoded (zero copy) on first use."""

    __slots__ = ("payload", "num_rows", "first_timestamp", "max_timestamp", "schema", "_batch")

    def __init__(self, payload: pa.Buffer, num_rows: int, first_timestamp: int, max_timestamp: int,
                 schema: pa.Schema, batch: pa.RecordBatch | None = None) -> None:
        self.payload, self.num_rows, self.schema, self._batch = payload, num_rows, schema, batch
        self.first_timestamp, self.max_timestamp = first_timestamp, max_timestamp

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> Encoded:
        """A built batch, with its message made (frame.encode_batch) and its timestamps read."""
        first, max_ts = _timestamps(batch.column(0)) if batch.num_rows else (-1, -1)
        return cls(frame.encode_batch(batch), batch.num_rows, first, max_ts, batch.schema, batch)

    @property
    def batch(self) -> pa.RecordBatch:
        if self._batch is None:
            self._batch = frame.decode_batch(self.payload, self.schema)
        return self._batch


Rows: TypeAlias = pa.RecordBatch | Encoded  # stored rows: a batch, or its message as its maker laid it out


def decoded(rows: Rows) -> pa.RecordBatch:
    """The rows as a batch (an Encoded one's, decoded without a copy): what a request to a server carries."""
    return rows.batch if isinstance(rows, Encoded) else rows


def encode(batch: pa.RecordBatch | Encoded, codec: str = "none", timestamp_type: int = 0,
           clock: Clock = SYSTEM_CLOCK) -> tuple[FrameHeader, pa.Buffer]:
    """Encode stored rows into an unsealed frame header (base offset 0) and its payload; with LogAppendTime
    every row is stamped with `clock`'s time now. Encoded rows keep their message where it is what the log
    stores (no codec, CreateTime); otherwise they are decoded and encoded as any batch."""
    if isinstance(batch, Encoded):
        if codec == "none" and timestamp_type != LOG_APPEND_TIME:
            return FrameHeader(0, 0, batch.num_rows, batch.first_timestamp, batch.max_timestamp,
                               CODECS[codec].attribute), batch.payload
        batch = batch.batch
    if timestamp_type == LOG_APPEND_TIME:
        stamp = pa.scalar(clock.now_us(), TIMESTAMP)
        batch = batch.set_column(0, "timestamp", pa.repeat(stamp, batch.num_rows))
    first, max_ts = _timestamps(batch.column(0)) if batch.num_rows else (-1, -1)
    attrs = CODECS[codec].attribute | (frame.ATTR_LOG_APPEND_TIME if timestamp_type == LOG_APPEND_TIME else 0)
    return FrameHeader(0, 0, batch.num_rows, first, max_ts, attrs), frame.encode_batch(batch, codec)


_STAMP = struct.Struct("<q")


def _timestamps(ts: pa.Array) -> tuple[int, int]:
    """The first and the largest timestamp of a column of one or more, read from its values buffer where it has
    no nulls (pyarrow's scalars and compute dispatch cost an append of a few records 5 to 15 us), else pyarrow's."""
    if ts.null_count:
        return ts[0].value, pc.max(ts).value
    if len(ts) == 1:  # (a send().get()'s: one value, read without numpy)
        first = _STAMP.unpack_from(ts.buffers()[1], ts.offset * 8)[0]
        return first, first
    values = np.frombuffer(ts.buffers()[1], np.int64, len(ts), ts.offset * 8)
    return int(values[0]), int(values.max())


def encode_marker(schema: pa.Schema, clock: Clock, producer_id: int, producer_epoch: int, commit: bool,
                  leader_epoch: int) -> tuple[FrameHeader, pa.Buffer]:
    """A transaction marker of producer `producer_id`: one control record (all values null) stamped now,
    committing or (`commit` False) aborting."""
    row = pa.RecordBatch.from_arrays(
        [pa.array([clock.now_us()], TIMESTAMP), *(pa.nulls(1, f.type) for f in list(schema)[1:])], schema=schema)
    template, payload = encode(row)
    attributes = template.attributes | frame.ATTR_CONTROL | frame.ATTR_TRANSACTIONAL | (
        0 if commit else frame.ATTR_ABORT)
    return replace(template, attributes=attributes, leader_epoch=leader_epoch, producer_id=producer_id,
                   producer_epoch=producer_epoch), payload


def check_keys(batch: pa.RecordBatch | Encoded, config: TopicConfig, partition: str) -> None:
    """A compacted topic keeps the latest record of each key, so every record must have one (Kafka refuses
    keyless records there too): InvalidRecordError, nothing written, if one has none. (Encoded rows: their maker
    vouches for it.)"""
    if isinstance(batch, Encoded):
        return
    if "compact" in config["cleanup.policy"] and batch.num_rows and batch.column(1).null_count:
        first = pc.index(pc.is_null(batch.column(1)), True).as_py()
        raise InvalidRecordError(f"partition {partition} is compacted (cleanup.policy={config['cleanup.policy']}), "
                                 f"so every record needs a key; record {first} of the batch has none (nothing of "
                                 "the batch was written): give it a key, or use a topic with cleanup.policy=delete")
