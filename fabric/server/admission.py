"""What the broker checks of every write before any of it can become visible, whoever sent it: stored rows in
the topic's storage schema, frames whose payload decodes against that schema (fully validated, since a client
may have crafted it) with the record count and timestamps their header claims, and no batch (one append, one
frame) whose records weigh more than the topic's max.message.bytes (fabric.common.record_sizes). A write that
fails a check is refused whole; readers of the partition are never handed something they cannot decode.

The Spark sink's publish is a hot path: its frames are already CRC-checked (frame.split_frames); decoding a
record-batch message is zero-copy (uncompressed) and the checks are vectorised, a few tens of µs per frame.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa

from fabric.common import record_sizes
from fabric.common.config import TopicConfig
from fabric.common.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, SchemaMismatchError
from fabric.common.record_checks import MAX_TIMESTAMP_US, check_timestamps
from fabric.common.redaction import shorten
from fabric.server.wire import schema_text
from fabric.storage import frame
from fabric.storage.batch_encoding import Encoded, Rows, check_keys
from fabric.storage.frame import FrameHeader

Frame = tuple[FrameHeader, pa.Buffer]


def check_rows(topic: str, batch: Rows, schema: pa.Schema, max_bytes: int,
               config: TopicConfig | None = None) -> None:
    """Stored rows for `topic`: exactly its storage schema, valid, within max_bytes (check_sizes), and (a
    compacted topic's `config`) each with a key. Rows a maker in this process encoded itself (Encoded, never
    what a request carries) are checked for their schema: the maker vouches for the rest."""
    if not batch.schema.equals(schema):
        raise SchemaMismatchError(
            f"rows for topic {topic!r} must have its storage schema ({schema_text(schema)}), got "
            f"({schema_text(batch.schema)}); produce with a fabric producer (fabric.records.to_storage)")
    if isinstance(batch, Encoded):
        return
    valid(batch, f"a batch for topic {topic!r}")
    missing = batch.column(0).null_count  # (the timestamps: first in every storage schema)
    if missing:
        raise InvalidRecordError(f"{missing} of the {batch.num_rows} rows for topic {topic!r} have no timestamp; "
                                 "every stored row needs one (fabric.common.records.to_storage sets them)")
    check_timestamps(batch.column(0))  # (1970 to 9999, as a producer's send() checks: readers convert them)
    check_sizes(topic, batch, max_bytes)
    if config is not None:
        check_keys(batch, config, topic)


def check_frames(topic: str, frames: Iterable[Frame], schema: pa.Schema, max_bytes: int,
                 dense: bool = False, config: TopicConfig | None = None) -> None:
    """Sealed frames for `topic` (CRCs already checked): schema frames carry no records; data frames (never a
    marker or a compaction gap, which only the log writes) decode against its storage schema with their
    header's record count and timestamps, each within max_bytes (check_sizes), and (a compacted topic's
    `config`) each with a key. `dense`: data frames must be based from 0 without gaps (a staged file, which may
    be adopted as a segment as it is)."""
    expected = 0
    for number, (header, payload) in enumerate(frames):
        where = f"frame {number} for topic {topic!r}"
        if header.is_schema:  # never copied; adopted only if it is the log's schema (Log.adopt_segment)
            if header.record_count:
                raise CorruptRecordError(f"{where} is a schema frame claiming {header.record_count} records; "
                                         "encode with the topic's frame_encoder")
            continue
        if header.is_control or header.is_gap:
            raise CorruptRecordError(f"{where} is a {'transaction marker' if header.is_control else 'compaction gap'}"
                                     ", which only the log writes; publish data frames only")
        if dense and header.base_offset != expected:
            raise CorruptRecordError(f"{where} has base offset {header.base_offset}, expected {expected}: a staged "
                                     "file's frames are based from 0 without gaps")
        expected += header.record_count
        batch = _decode(payload, schema, where)
        if batch.num_rows != header.record_count:
            raise CorruptRecordError(f"{where} claims {header.record_count} records but holds {batch.num_rows}; "
                                     "it is refused (every offset must hold a record)")
        _check_timestamps(header, batch, where)
        check_sizes(topic, batch, max_bytes)
        if config is not None:
            check_keys(batch, config, topic)


def check_sizes(topic: str, batch: pa.RecordBatch, max_bytes: int) -> None:
    """RecordTooLargeError if the batch's records (keys, values and headers) weigh more than max_bytes, the
    topic's max.message.bytes: the largest record batch it takes, as in Kafka. The weight is read from the
    columns' offsets; only a batch over the limit has its records measured one by one, to name the one over it."""
    if not batch.num_rows or record_sizes.fits(batch, max_bytes):
        return
    valid(batch, f"a batch for topic {topic!r}")  # its records are weighed by their offsets, which must hold
    total = record_sizes.batch_bytes(batch)
    if total <= max_bytes:
        return
    sizes = record_sizes.record_sizes(batch) if record_sizes.record_bound(batch) > max_bytes else None
    if sizes is not None and int(np.max(sizes)) > max_bytes:
        raise RecordTooLargeError(
            f"a record of {int(np.max(sizes))} bytes (row {int(np.argmax(sizes))}) exceeds max.message.bytes="
            f"{max_bytes} of topic {topic!r}; nothing was written: raise it with `fabric topics alter {topic} "
            "--config max.message.bytes=N` or send smaller records")
    raise batch_too_large(topic, batch.num_rows, total, max_bytes)


def batch_too_large(topic: str, records: int, total: int, max_bytes: int) -> RecordTooLargeError:
    """The refusal of a batch of `records` records weighing `total` bytes, over max_bytes (max.message.bytes)."""
    return RecordTooLargeError(
        f"a batch of {records} records of {total} bytes exceeds max.message.bytes={max_bytes} of topic {topic!r}, "
        f"the largest record batch it takes; nothing was written: raise it with `fabric topics alter {topic} "
        "--config max.message.bytes=N` or send the records in smaller batches (a fabric producer splits its "
        "batches by this limit)")


def _decode(payload: pa.Buffer, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """The frame's batch, decoded against the topic's storage schema and fully validated."""
    try:
        batch = frame.decode_batch(payload, schema)
        batch.validate(full=True)
    except (pa.ArrowException, ValueError) as exc:
        raise SchemaMismatchError(f"{where} does not decode as a record batch of the topic's storage schema "
                                  f"({shorten(str(exc), 160)}); encode with the topic's frame_encoder") from None
    return batch


def valid(batch: pa.RecordBatch, what: str) -> pa.RecordBatch:
    """`batch` if its buffers are consistent (offsets in bounds, valid UTF-8: a reader can decode every row), else
    CorruptRecordError naming `what`."""
    try:
        batch.validate(full=True)
    except (pa.ArrowException, ValueError) as exc:
        raise CorruptRecordError(f"{what} is not a valid Arrow batch: {shorten(str(exc), 160)}") from None
    return batch


def _check_timestamps(header: FrameHeader, batch: pa.RecordBatch, where: str) -> None:
    """The header's first and max timestamps are the rows' (they drive time lookups and retention)."""
    column = batch.column(0)
    if column.null_count:
        raise CorruptRecordError(f"{where} has rows without a timestamp")
    if not batch.num_rows:
        return
    stamps = np.frombuffer(column.buffers()[1], np.int64)[column.offset:column.offset + len(column)]
    first, largest = int(stamps[0]), int(stamps.max())
    if (header.first_timestamp, header.max_timestamp) != (first, largest):
        raise CorruptRecordError(f"{where}: its header's timestamps ({header.first_timestamp}, "
                                 f"{header.max_timestamp}) are not its rows' ({first}, {largest})")
    if int(stamps.min()) < 0 or largest > MAX_TIMESTAMP_US:
        check_timestamps(column)  # (names the row out of range)
