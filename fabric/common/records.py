"""Record layout: the Arrow schema batches are stored in, and the columns readers get back.

Stored columns: timestamp (µs, UTC), key (binary), headers (list<struct<key, value>>), and value: binary
for a plain topic, or a struct of the topic's value schema for a typed topic. Offsets are not stored: a
batch's rows are dense from the frame's base offset.
"""
from __future__ import annotations

import functools
import re
import struct
import zoneinfo
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fabric.common.errors import InvalidRecordError, SchemaMismatchError
from fabric.common.record_checks import CONVERSION_ERRORS, check_timestamps, mismatch

TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS = pa.list_(HEADER_TYPE)
CREATE_TIME, LOG_APPEND_TIME = 0, 1
TIMESTAMP_TYPES = {"CreateTime": CREATE_TIME, "LogAppendTime": LOG_APPEND_TIME}
_FIXED_OFFSET = re.compile(r"[+-](?:[01][0-9]|2[0-3]):[0-5][0-9]")
RESERVED = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def _stored(value: pa.DataType) -> pa.Schema:
    return pa.schema([("timestamp", TIMESTAMP), ("key", pa.binary()), ("headers", HEADERS), ("value", value)])


PLAIN_SCHEMA = _stored(pa.binary())


def storage_schema(value_schema: pa.Schema | None = None) -> pa.Schema:
    """The schema a topic's batches are stored with (a plain topic's is built once: PLAIN_SCHEMA)."""
    return PLAIN_SCHEMA if value_schema is None else _stored(pa.struct(list(value_schema)))


def _nested_types(dtype: pa.DataType) -> Iterator[pa.DataType]:
    """`dtype` and every type nested in it (struct fields, list items, map keys and items)."""
    yield dtype
    for i in range(dtype.num_fields):
        yield from _nested_types(dtype.field(i).type)


def validate_time_zone(tz: str) -> str:
    """Return `tz` if readers can resolve it: an IANA zone name (e.g. UTC, Europe/Paris) or a fixed offset
    +HH:MM / -HH:MM; else SchemaMismatchError. (Arrow stores any string, but reading such values fails.)"""
    if _FIXED_OFFSET.fullmatch(tz):
        return tz
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise SchemaMismatchError(
            f"unknown time zone {tz!r}; use an IANA zone name such as UTC or Europe/Paris (case matters), or a "
            "fixed offset such as +01:00") from None
    return tz


def validate_value_schema(schema: pa.Schema) -> pa.Schema:
    """Check a typed topic's value schema can be stored and read back unambiguously."""
    if not isinstance(schema, pa.Schema) or not len(schema):
        raise SchemaMismatchError("a typed topic's schema must be a non-empty pyarrow.Schema")
    for field in schema:
        if not field.name:
            raise SchemaMismatchError("a value field has an empty name; give every field a name")
        if field.name in RESERVED:
            raise SchemaMismatchError(
                f"value field {field.name!r} clashes with the record column of that name; rename it "
                f"(reserved: {', '.join(RESERVED)})")
        for dtype in _nested_types(field.type):
            if pa.types.is_dictionary(dtype):
                raise SchemaMismatchError(
                    f"value field {field.name!r} is dictionary-encoded, which topics do not store; "
                    "decode it first (pyarrow.compute.cast to its value type)")
            if pa.types.is_timestamp(dtype) and dtype.tz is not None:
                try:
                    validate_time_zone(dtype.tz)
                except SchemaMismatchError as exc:
                    raise SchemaMismatchError(f"value field {field.name!r} ({dtype}): {exc}") from None
    if len(set(schema.names)) != len(schema.names):
        raise SchemaMismatchError(f"value schema repeats a field name: {schema.names}")
    return schema


def value_schema_of(storage: pa.Schema) -> pa.Schema | None:
    """The typed value schema inside a storage schema, or None for a plain topic."""
    value = storage.field("value").type
    return pa.schema(list(value)) if pa.types.is_struct(value) else None


def _as_binary(array: pa.Array | pa.ChunkedArray, name: str) -> pa.Array:
    if pa.types.is_binary(array.type):
        return array
    if pa.types.is_string(array.type) or pa.types.is_large_binary(array.type) \
            or pa.types.is_large_string(array.type) or pa.types.is_null(array.type):
        return pc.cast(array, pa.binary())
    raise SchemaMismatchError(f"column {name!r} must be binary or string, got {array.type}")


def _column(table: pa.Table, name: str, length: int, dtype: pa.DataType) -> pa.Array:
    if name in table.column_names:
        return table.column(name)
    return null_headers(length) if dtype == HEADERS else pa.nulls(length, dtype)


def null_headers(length: int) -> pa.Array:
    """`length` null header lists, straight from zeroed buffers. Not pa.nulls: its empty child arrays keep
    offset buffers sized for `length` rows, which every slice of it then serializes in full (80 bytes per
    row of the whole column)."""
    validity, offsets = pa.py_buffer(bytes((length + 7) // 8)), pa.py_buffer(bytes(4 * (length + 1)))
    return pa.Array.from_buffers(HEADERS, length, [validity, offsets], null_count=length,
                                 children=[pa.array([], HEADER_TYPE)])


@functools.lru_cache(maxsize=64)
def _null_headers_cached(length: int) -> pa.Array:
    return null_headers(length)


def _few_null_headers(length: int) -> pa.Array:
    """null_headers(length), the same array again for a few rows (arrays are immutable)."""
    return _null_headers_cached(length) if length <= 64 else null_headers(length)


_ONE_OFFSETS = struct.Struct("<ii")  # a one-row binary column's offsets: 0 and the value's length
_ONE_STAMP = struct.Struct("<q")
_NULL_BINARY = pa.nulls(1, pa.binary())


def _one_binary(value: bytes | None) -> pa.Array:
    """A one-row binary column over `value`'s own bytes (no copy), or the null one."""
    if value is None:
        return _NULL_BINARY
    return pa.Array.from_buffers(pa.binary(), 1, [None, pa.py_buffer(_ONE_OFFSETS.pack(0, len(value))),
                                                  pa.py_buffer(value)])


def _one_row(value: bytes | None, key: bytes | None, headers: list | None, stamp_us: int) -> pa.RecordBatch:
    """plain_rows of one record, its columns laid straight on their buffers: a tenth of what converting the
    Python values (pa.array, four times) costs, which is most of a one-record send().get()."""
    stamp = pa.Array.from_buffers(TIMESTAMP, 1, [None, pa.py_buffer(_ONE_STAMP.pack(stamp_us))])
    listed = pa.array([headers], HEADERS) if headers else _few_null_headers(1)
    return pa.RecordBatch.from_arrays([stamp, _one_binary(key), listed, _one_binary(value)], schema=PLAIN_SCHEMA)


def plain_rows(values: Sequence[bytes | None], keys: Sequence[bytes | None], headers: Sequence[list | None],
               timestamps_ms: Sequence[int | None], now_us: int) -> pa.RecordBatch:
    """The stored rows of records for a plain topic, built straight in their stored types from Python values
    that send() checked one by one (bytes or None; header dicts; timestamps in ms in the record range, None
    for `now_us`): what to_storage makes of them, without its passes over the columns."""
    if len(values) == 1:
        stamp = timestamps_ms[0]
        return _one_row(values[0], keys[0], headers[0], now_us if stamp is None else stamp * 1000)
    stamps = [now_us if t is None else t * 1000 for t in timestamps_ms]
    listed = pa.array(headers, HEADERS) if any(headers) else _few_null_headers(len(headers))
    return pa.RecordBatch.from_arrays([pa.array(stamps, TIMESTAMP), pa.array(keys, pa.binary()), listed,
                                       pa.array(values, pa.binary())], schema=PLAIN_SCHEMA)


def _from_millis(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """An integer timestamp column (milliseconds since the epoch) as stored timestamps."""
    try:
        return pc.multiply_checked(pc.cast(column, pa.int64()), 1000).cast(TIMESTAMP)
    except (pa.ArrowInvalid, OverflowError):
        raise InvalidRecordError("column 'timestamp' holds integers far outside milliseconds from 1970 to 9999 "
                                 "(0 to 253402300799999): give milliseconds since the epoch, or a timestamp "
                                 "column") from None


def to_storage(table: pa.Table | pa.RecordBatch, value_schema: pa.Schema | None, now_us: int,
               null_values: pa.BooleanArray | None = None) -> pa.Table:
    """Convert user columns (value or typed value fields, key, headers, timestamp) to stored columns.
    `null_values` marks the records of a typed topic whose whole value is null (tombstones sent one by one)."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    extra = {"partition", "topic"}
    if value_schema is None:
        if "value" not in table.column_names:
            raise SchemaMismatchError(
                f"a batch for a plain topic needs a 'value' column; got {table.column_names}")
        value = _as_binary(table.column("value"), "value")
        allowed = {"key", "value", "headers", "timestamp"} | extra
    else:
        value = typed_values(table, value_schema, null_values)
        allowed = {"key", "headers", "timestamp"} | extra | set(value_schema.names)
    unknown = [c for c in table.column_names if c not in allowed]
    if unknown:
        raise SchemaMismatchError(
            f"unexpected column(s) {unknown}: neither record columns nor fields of the topic's schema; drop them "
            f"(expected {sorted(allowed - extra)})")
    ts = _column(table, "timestamp", n, TIMESTAMP)
    if pa.types.is_integer(ts.type):  # milliseconds since the epoch, as send()'s timestamp= and Kafka's
        ts = _from_millis(ts)
    if ts.type != TIMESTAMP:
        try:
            ts = pc.cast(ts, TIMESTAMP)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(f"column 'timestamp' cannot be read as a timestamp: {exc}") from None
    check_timestamps(ts)
    if ts.null_count:
        ts = pc.fill_null(ts, pa.scalar(now_us, TIMESTAMP))
    headers = _column(table, "headers", n, HEADERS)
    if headers.type != HEADERS:
        wrong = SchemaMismatchError(
            f"column 'headers' must be list<struct<key: string, value: binary>>, got {headers.type}")
        item = headers.type.value_type if pa.types.is_list(headers.type) or pa.types.is_large_list(headers.type) \
            else None
        if item is not None and pa.types.is_struct(item) and sorted(f.name for f in item) != ["key", "value"]:
            raise wrong  # a cast would match fields by name and null those missing: the headers' contents lost
        try:
            headers = pc.cast(headers, HEADERS)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise wrong from None
    key = _as_binary(_column(table, "key", n, pa.binary()), "key")
    return pa.Table.from_arrays([ts, key, headers, value], schema=storage_schema(value_schema))


def _null_like(dtype: pa.DataType) -> bool:
    """A type inferred from empty or all-null data, which casts to anything without loss."""
    if pa.types.is_null(dtype):
        return True
    return pa.types.is_list(dtype) and _null_like(dtype.value_type)


def _lossless(source: pa.DataType, target: pa.DataType) -> bool:
    """True for casts that change no value: from null-like types, or between time zones of one instant
    (Spark hands out timestamps in its session zone, e.g. Etc/UTC for a UTC field)."""
    if _null_like(source):
        return True
    return (pa.types.is_timestamp(source) and pa.types.is_timestamp(target) and source.unit == target.unit
            and (source.tz is None) == (target.tz is None))


def typed_values(table: pa.Table, value_schema: pa.Schema, null_values: pa.BooleanArray | None = None
                 ) -> pa.ChunkedArray:
    """The value struct column from a table's value-field columns, checked against the schema; null where
    `null_values` is true (a non-nullable field may be null there: the whole value is)."""
    arrays = []
    for field in value_schema:
        if field.name not in table.column_names:
            raise SchemaMismatchError(
                f"typed topic value field {field.name!r} ({field.type}) is missing from the batch")
        column = table.column(field.name)
        if column.type != field.type and _lossless(column.type, field.type):
            column = column.cast(field.type)
        if column.type != field.type:
            raise SchemaMismatchError(
                f"typed topic value field {field.name!r} must be {field.type}, got {column.type}")
        if not field.nullable and column.null_count and (  # (nulls where the whole value is null are its own)
                null_values is None or pc.any(pc.and_not(column.is_null(), null_values)).as_py()):
            raise SchemaMismatchError(f"typed topic value field {field.name!r} is not nullable but has nulls")
        arrays.append(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    return pa.chunked_array([pa.StructArray.from_arrays(arrays, fields=list(value_schema), mask=null_values)])


def typed_rows(values: Sequence[Mapping[str, Any] | None], value_schema: pa.Schema) -> pa.StructArray:
    """Build the value struct from per-record dicts, naming the field that does not fit."""
    try:
        return pa.array(values, type=pa.struct(list(value_schema)))
    except CONVERSION_ERRORS as exc:
        raise mismatch(values, value_schema, exc) from None


def output_schema(value_schema: pa.Schema | None, columns: Iterable[str] | None = None) -> pa.Schema:
    """The columns readers get: Kafka's record columns, with typed value fields in place of value."""
    fields = [pa.field("key", pa.binary())]
    fields += [pa.field("value", pa.binary())] if value_schema is None else list(value_schema)
    fields += [pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
               pa.field("offset", pa.int64()), pa.field("timestamp", TIMESTAMP),
               pa.field("timestampType", pa.int32()), pa.field("headers", HEADERS)]
    schema = pa.schema(fields)
    if columns is None:
        return schema
    wanted = list(columns)
    missing = [c for c in wanted if c not in schema.names]
    if missing:
        raise SchemaMismatchError(f"unknown column(s) {missing}; available: {schema.names}")
    return pa.schema([schema.field(c) for c in wanted])


def stored_columns(columns: Iterable[str]) -> list[str]:
    """The stored columns that reader `columns` are built from (offset, topic, partition and timestampType
    need none, but a batch keeps at least one column to carry its row count)."""
    wanted = set(columns)
    stored: list[str] = [c for c in ("timestamp", "key", "headers") if c in wanted]
    if wanted - set(RESERVED) or "value" in wanted:  # typed value fields live in the value struct
        stored.append("value")
    return stored or ["timestamp"]


def to_output(batch: pa.RecordBatch, base_offset: int, topic: str, partition: int, timestamp_type: int,
              schema: pa.Schema) -> pa.RecordBatch:
    """Stored rows (all stored columns, or those `stored_columns` names) → reader columns, in `schema`'s
    order; only the requested columns are built."""
    n = batch.num_rows
    arrays = []
    value = batch.column("value") if "value" in batch.schema.names else None
    for field in schema:  # a typed value field is only asked for when the value struct was read
        name = field.name
        if name == "offset":
            arrays.append(pa.array(np.arange(base_offset, base_offset + n, dtype=np.int64)))
        elif name == "topic":
            arrays.append(pa.repeat(pa.scalar(topic, pa.string()), n) if n else pa.array([], pa.string()))
        elif name == "partition":
            arrays.append(pa.array(np.full(n, partition, dtype=np.int32)))
        elif name == "timestampType":
            arrays.append(pa.array(np.full(n, timestamp_type, dtype=np.int32)))
        elif name in ("timestamp", "key", "headers", "value"):
            arrays.append(batch.column(name))
        else:
            assert value is not None, f"column {name!r} needs the stored value column"
            arrays.append(value.field(name) if value.null_count == 0 else pc.struct_field(value, name))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class Record:
    """One consumed record, with Kafka's ConsumerRecord attributes (kafka-python's serialized sizes, checksum and
    leader_epoch too)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: Any
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    timestamp_type: int
    stored_sizes: tuple[int, int] | None = None  # the key's and value's as stored, once a deserializer turned them

    @property
    def serialized_key_size(self) -> int:
        """The key's size in bytes as stored; -1 for a null key (kafka-python's)."""
        return self.stored_sizes[0] if self.stored_sizes is not None else stored_size(self.key)

    @property
    def serialized_value_size(self) -> int:
        """The value's size in bytes as stored; -1 for a null value or a typed topic's (its columns have none)."""
        return self.stored_sizes[1] if self.stored_sizes is not None else stored_size(self.value)

    @property
    def serialized_header_size(self) -> int:
        """The headers' keys and values in bytes; -1 without headers (kafka-python's)."""
        if not self.headers:
            return -1
        return sum(len(k.encode()) + (len(v) if v is not None else 0) for k, v in self.headers)

    @property
    def checksum(self) -> None:
        """None: a batch is checked as a whole (kafka-python's, for Kafka's v2 batches)."""
        return None

    @property
    def leader_epoch(self) -> int:
        """-1: the fetch does not say which leader epoch wrote the record (kafka-python's unknown)."""
        return -1


def stored_size(data: Any) -> int:
    """len() of stored bytes; -1 for null or a typed value (kafka-python's serialized sizes: a consumed record's, a
    sent one's RecordMetadata)."""
    return len(data) if isinstance(data, (bytes, bytearray, memoryview)) else -1


def stored_records(batch: pa.RecordBatch, topic: str, partition: int, offset: int, timestamp_type: int
                   ) -> list[Record]:
    """Stored rows of a partition, from `offset` on → Record objects (timestamps in ms since the epoch, as
    Kafka's; a typed value as a dict, a null one as None)."""
    cols = dict(zip(batch.schema.names, batch.columns, strict=True))
    # (µs to ms, truncated toward zero as Arrow's integer divide does; in Python, not a compute kernel call that
    # costs more than the whole conversion of a small batch)
    ts: list[Any] = [t if t is None else (t // 1000 if t >= 0 else -(-t // 1000))
                     for t in cols["timestamp"].view(pa.int64()).to_pylist()]
    keys, values = cols["key"].to_pylist(), cols["value"].to_pylist()
    headers = [[(h["key"], h["value"]) for h in hs] if hs else [] for hs in cols["headers"].to_pylist()]
    return [Record(topic, partition, offset + i, keys[i], values[i], headers[i], ts[i], timestamp_type)
            for i in range(batch.num_rows)]
