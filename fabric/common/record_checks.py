"""What a record may hold, checked once per record where it enters: keys and values, headers, timestamps and
typed values.

The producer checks each record in send() (so a bad record is refused by its own call and never sinks the
records buffered with it); stored-row builders and the server check whole columns with `check_timestamps`.
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fabric.common.errors import InvalidRecordError, SchemaMismatchError, UnknownPartitionError

# 9999-12-31T23:59:59.999Z: the last millisecond Python's datetime, Spark and Java all represent.
MAX_TIMESTAMP_MS = 253_402_300_799_999
MAX_TIMESTAMP_US = MAX_TIMESTAMP_MS * 1000 + 999
CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)
Headers = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]] | None


def payload(data: Any, what: str) -> bytes | None:
    """A key or plain value as bytes (str is utf-8 encoded; None stays None)."""
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, str):
        return _utf8(data, what)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise InvalidRecordError(
        f"a record's {what} must be bytes, str or None, got {type(data).__name__}; encode it first "
        f"(e.g. str(x).encode() or json.dumps(x).encode()){' or create a typed topic' if what == 'value' else ''}")


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise InvalidRecordError(f"a record's {what} is not valid text ({exc.reason} at position {exc.start}); "
                                 "pass bytes, or fix the text") from None


def headers(given: Headers) -> tuple[list[dict[str, Any]] | None, int]:
    """Headers as stored ({"key", "value"} dicts) and their size in bytes; None for no headers."""
    if not given:
        return None, 0
    if isinstance(given, Mapping):
        items: Any = given.items()
    elif isinstance(given, (list, tuple)):
        items = given
    else:
        raise InvalidRecordError(
            f"headers must be a dict or a list of (key, value) pairs, got {type(given).__name__}")
    out, size = [], 0
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[0], str):
            raise InvalidRecordError(
                f"each header must be a (str key, bytes/str/None value) pair, got {item!r:.60}; "
                "e.g. headers=[('source', b'web')] or {'source': b'web'}")
        key, value = item[0], payload(item[1], f"header {item[0]!r} value")
        out.append({"key": key, "value": value})
        size += len(_utf8(key, f"header key {key!r}")) + (len(value) if value is not None else 0)
    return out, size


def timestamp_ms(value: Any) -> int:
    """A record timestamp in milliseconds since the epoch, from 1970 to the year 9999."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidRecordError(
            f"timestamp must be an int of milliseconds since the epoch, got {type(value).__name__} {value!r:.40}")
    value = int(value)
    if not 0 <= value <= MAX_TIMESTAMP_MS:
        raise InvalidRecordError(
            f"timestamp {value} is out of range: give milliseconds since the epoch, from 0 (1970-01-01) "
            f"to {MAX_TIMESTAMP_MS} (9999-12-31); a value in µs or ns is too large")
    return value


def check_timestamps(column: pa.Array | pa.ChunkedArray) -> None:
    """Refuse a timestamp[us] column with a value outside the record timestamp range (naming its row)."""
    if not len(column) or column.null_count == len(column):
        return
    if isinstance(column, pa.Array) and not column.null_count:
        # the usual case read from the values buffer: 3 µs, where a cast and compute's min_max cost 22 µs of a
        # one-record produce on the server
        values = np.frombuffer(column.buffers()[1], np.int64, len(column), column.offset * 8)
        if values.min() >= 0 and values.max() <= MAX_TIMESTAMP_US:
            return
    micros = column.cast(pa.int64())
    bounds = pc.min_max(micros)
    if bounds["min"].as_py() >= 0 and bounds["max"].as_py() <= MAX_TIMESTAMP_US:
        return
    outside = pc.or_(pc.less(micros, 0), pc.greater(micros, MAX_TIMESTAMP_US))
    row = pc.index(outside, True).as_py()
    raise InvalidRecordError(
        f"row {row} has timestamp {micros[row].as_py()} µs, out of range: record timestamps run from "
        "1970-01-01 to 9999-12-31; nothing from this batch was written")


def _accepts(dtype: pa.DataType) -> Callable[[Any], bool]:
    """A quick test of Python values that surely convert to `dtype` (exact types: a bool is not an int);
    anything it does not vouch for is converted by Arrow to find out."""
    if pa.types.is_integer(dtype):
        lo, hi = (-(1 << (dtype.bit_width - 1)), (1 << (dtype.bit_width - 1)) - 1) \
            if pa.types.is_signed_integer(dtype) else (0, (1 << dtype.bit_width) - 1)
        return lambda v: type(v) is int and lo <= v <= hi
    if pa.types.is_float32(dtype) or pa.types.is_float64(dtype):
        return lambda v: type(v) is float
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return lambda v: type(v) is str and v.isascii()
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return lambda v: type(v) is bytes
    if pa.types.is_boolean(dtype):
        return lambda v: type(v) is bool
    return lambda v: False


class TypedValueRule:
    """What a typed topic's values must be, prepared once per schema: a dict of the schema's fields (no
    others), every non-nullable field set, each convertible to its field's Arrow type."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.struct = pa.struct(list(schema))
        self.required = tuple(f.name for f in schema if not f.nullable)
        self._accepts = {f.name: _accepts(f.type) for f in schema}

    def check(self, value: Any) -> dict[str, Any] | None:
        """`value` as the dict to store (None stays None: a tombstone, the whole value null); SchemaMismatchError
        naming the field if it cannot be stored in the topic."""
        if value is None:
            if self.required:
                raise SchemaMismatchError(
                    f"a None value leaves the non-nullable field(s) {list(self.required)} empty; give them values")
            return None
        if not isinstance(value, dict):
            if not isinstance(value, Mapping):
                raise SchemaMismatchError(
                    f"a typed topic takes dict values with fields {self.schema.names}, got {type(value).__name__}")
            value = dict(value)
        for name in self.required:
            if value.get(name) is None:
                raise SchemaMismatchError(f"typed topic value field {name!r} is not nullable; give it a value")
        accepts = self._accepts
        for name, field_value in value.items():
            accept = accepts.get(name)
            if accept is None:
                stray = sorted(str(k) for k in value if k not in accepts)
                raise SchemaMismatchError(
                    f"value has field(s) {stray} that are not in the topic's schema {self.schema.names}; drop "
                    "them (or create a topic whose schema has them)")
            if field_value is not None and not accept(field_value):
                break
        else:
            return value
        try:
            pa.scalar(value, type=self.struct)
        except CONVERSION_ERRORS as exc:
            raise mismatch([value], self.schema, exc) from None
        return value


def mismatch(values: Sequence[Any], schema: pa.Schema, exc: BaseException) -> SchemaMismatchError:
    """The error for values that failed to convert to the schema's struct: it names the first field that does
    not fit, else the first value that is not a dict, else repeats Arrow's reason."""
    for field in schema:
        column = [v.get(field.name) if isinstance(v, Mapping) else None for v in values]
        try:
            pa.array(column, type=field.type)
        except CONVERSION_ERRORS as inner:
            return SchemaMismatchError(f"typed topic value field {field.name!r} must be {field.type}: {inner}")
    for v in values:
        if v is not None and not isinstance(v, Mapping):
            return SchemaMismatchError(
                f"a typed topic takes dict values with fields {schema.names}, got {type(v).__name__}")
    return SchemaMismatchError(f"value does not match the topic schema {schema.names}: {exc}")


def partition(value: Any, count: int, topic: str) -> int:
    """An explicit partition for a record of `topic` (which has `count` partitions)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidRecordError(
            f"partition must be an int (or None to let the key choose), got {type(value).__name__} {value!r:.40}")
    value = int(value)
    if not 0 <= value < count:
        raise UnknownPartitionError(
            f"topic {topic!r} has partitions 0..{count - 1}; there is no partition {value}")
    return value
