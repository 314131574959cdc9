"""The record rules of fabric.common (records, record_checks) that clients and the server share: value schemas
and their time zones, what a record's key, value, headers and timestamp may be, and typed values."""
from __future__ import annotations

import math

import pyarrow as pa
import pytest

from fabric.common import record_checks
from fabric.common.errors import InvalidRecordError, SchemaMismatchError, UnknownPartitionError
from fabric.common.record_checks import MAX_TIMESTAMP_MS, TypedValueRule, check_timestamps
from fabric.common.records import TIMESTAMP, to_storage, typed_rows, validate_time_zone, validate_value_schema


@pytest.mark.parametrize("tz", ["UTC", "Etc/UTC", "Europe/Paris", "America/New_York", "+01:00", "-05:30",
                                "+00:00", "-23:59"])
def test_time_zones_readers_resolve_are_accepted(tz):
    assert validate_time_zone(tz) == tz
    schema = pa.schema([("at", pa.timestamp("us", tz=tz))])
    assert validate_value_schema(schema) is schema
    assert pa.array([0], pa.int64()).cast(schema.field("at").type).to_pylist()[0].year in (1969, 1970)


@pytest.mark.parametrize("tz", ["Mars/Base", "utc", "America", "+24:00", "+0100", "+1", "Z", " UTC",
                                "../etc/passwd", "/etc/localtime", ""])
def test_unknown_time_zones_are_refused(tz):
    with pytest.raises(SchemaMismatchError, match="time zone"):
        validate_time_zone(tz)


@pytest.mark.parametrize("dtype", [
    pa.timestamp("us", tz="Mars/Base"),
    pa.list_(pa.timestamp("ms", tz="Mars/Base")),
    pa.struct([("inner", pa.timestamp("s", tz="Mars/Base"))]),
    pa.map_(pa.string(), pa.timestamp("us", tz="Mars/Base")),
])
def test_value_schema_with_an_unknown_time_zone_is_refused_naming_the_field(dtype):
    with pytest.raises(SchemaMismatchError, match=r"field 'at'.*unknown time zone 'Mars/Base'.*\+01:00"):
        validate_value_schema(pa.schema([("ok", pa.string()), ("at", dtype)]))


def test_value_schema_refuses_empty_field_names_and_nested_dictionaries():
    with pytest.raises(SchemaMismatchError, match="empty name"):
        validate_value_schema(pa.schema([("", pa.int64())]))
    with pytest.raises(SchemaMismatchError, match="dictionary"):
        validate_value_schema(pa.schema([("tags", pa.list_(pa.dictionary(pa.int32(), pa.string())))]))


def test_payloads_are_bytes_str_or_none():
    assert record_checks.payload(b"x", "value") == b"x"
    assert record_checks.payload("é", "key") == "é".encode()
    assert record_checks.payload(bytearray(b"ab"), "value") == b"ab"
    assert record_checks.payload(memoryview(b"cd"), "value") == b"cd"
    assert record_checks.payload(None, "key") is None
    for bad in (5, 1.5, {"a": 1}, [b"x"], True):
        with pytest.raises(InvalidRecordError, match="value must be bytes, str or None.*encode it"):
            record_checks.payload(bad, "value")


def test_headers_are_a_dict_or_pairs_of_str_and_bytes():
    assert record_checks.headers(None) == (None, 0)
    assert record_checks.headers({}) == (None, 0)
    assert record_checks.headers({"a": "é", "b": None}) == (
        [{"key": "a", "value": "é".encode()}, {"key": "b", "value": None}], 1 + 2 + 1)
    assert record_checks.headers([("k", b"v"), ["k", b"w"]])[0] == [{"key": "k", "value": b"v"},
                                                                     {"key": "k", "value": b"w"}]
    for bad in ([1, 2], [("k",)], [(1, b"v")], [("k", b"v", b"w")], "k=v", 5):
        with pytest.raises(InvalidRecordError, match="header"):
            record_checks.headers(bad)
    with pytest.raises(InvalidRecordError, match="header 'a' value must be bytes"):
        record_checks.headers({"a": 5})


def test_timestamps_are_ms_from_1970_to_9999():
    assert record_checks.timestamp_ms(0) == 0
    assert record_checks.timestamp_ms(MAX_TIMESTAMP_MS) == MAX_TIMESTAMP_MS
    for bad in (-1, MAX_TIMESTAMP_MS + 1, 2**62, 2**64):
        with pytest.raises(InvalidRecordError, match="out of range.*milliseconds"):
            record_checks.timestamp_ms(bad)
    for bad in (1.5, "1000", True, None):
        with pytest.raises(InvalidRecordError, match="must be an int of milliseconds"):
            record_checks.timestamp_ms(bad)


def test_partition_is_an_int_naming_an_existing_partition():
    assert record_checks.partition(2, 3, "t") == 2
    for bad in ("0", 1.0, True, None):
        with pytest.raises(InvalidRecordError, match="partition must be an int"):
            record_checks.partition(bad, 3, "t")
    for bad in (3, -1):
        with pytest.raises(UnknownPartitionError, match=r"partitions 0\.\.2"):
            record_checks.partition(bad, 3, "t")


def test_timestamp_columns_out_of_range_name_the_row():
    check_timestamps(pa.array([0, None, MAX_TIMESTAMP_MS * 1000], TIMESTAMP))
    check_timestamps(pa.nulls(3, TIMESTAMP))
    with pytest.raises(InvalidRecordError, match="row 2 has timestamp -1 µs"):
        check_timestamps(pa.chunked_array([pa.array([5, 6], TIMESTAMP), pa.array([-1], TIMESTAMP)]))


def test_to_storage_refuses_out_of_range_timestamps():
    table = pa.table({"value": [b"a", b"b"], "timestamp": pa.array([0, 10**15], pa.timestamp("ms"))})  # year 33658
    with pytest.raises(InvalidRecordError, match="row 1"):
        to_storage(table, None, 1)
    assert to_storage(table.slice(0, 1), None, 1).column("timestamp").to_pylist()[0].year == 1970


SCHEMA = pa.schema([("user", pa.string()), ("amount", pa.float64()), pa.field("id", pa.int64(), nullable=False),
                    ("at", pa.timestamp("us", tz="UTC"))])


def test_typed_values_have_only_schema_fields_of_the_right_types():
    rule = TypedValueRule(SCHEMA)
    assert rule.check({"user": "a", "amount": math.nan, "id": 1}) is not None
    with pytest.raises(SchemaMismatchError, match=r"field\(s\) \['oops'\].*drop them"):
        rule.check({"user": "a", "id": 1, "oops": 1})
    with pytest.raises(SchemaMismatchError, match="'id' is not nullable"):
        rule.check({"user": "a"})
    with pytest.raises(SchemaMismatchError, match="non-nullable.*'id'"):
        rule.check(None)
    with pytest.raises(SchemaMismatchError, match="'amount' must be double"):
        rule.check({"id": 1, "amount": "lots"})
    with pytest.raises(SchemaMismatchError, match="'id' must be int64"):
        rule.check({"id": 2**70})
    with pytest.raises(SchemaMismatchError, match="'at' must be timestamp"):
        rule.check({"id": 1, "at": 2**70})  # an OverflowError inside pyarrow
    with pytest.raises(SchemaMismatchError, match="dict values"):
        rule.check([("id", 1)])


def test_typed_rows_name_the_field_that_overflows():
    with pytest.raises(SchemaMismatchError, match="'at' must be timestamp"):
        typed_rows([{"id": 1, "at": 2**70}], SCHEMA)


def test_a_headers_column_whose_structs_are_not_key_and_value_is_refused_not_stored_as_nulls():
    """A cast matches struct fields by name: struct<k, v> used to become headers of null key and value, losing them
    (a Spark sink user's named_struct('k', ..., 'v', ...)). Other spellings of the same pairs still convert."""
    def stored(headers: pa.Array) -> list:
        return to_storage(pa.table({"value": [b"v"], "headers": headers}), None, 0).column("headers").to_pylist()
    pairs = [{"key": "h", "value": b"x"}]
    for bad in (pa.struct([("k", pa.string()), ("v", pa.binary())]), pa.struct([("key", pa.string())]),
                pa.struct([("key", pa.string()), ("value", pa.binary()), ("extra", pa.int32())])):
        headers = pa.array([[{n: "h" if n == "key" else b"x" if n in ("v", "value") else None
                              for n in bad.names}]], pa.list_(bad))
        with pytest.raises(SchemaMismatchError, match="column 'headers' must be list<struct<key: string"):
            stored(headers)
    swapped = pa.struct([("value", pa.string()), ("key", pa.string())])
    assert stored(pa.array([[{"value": "x", "key": "h"}]], pa.list_(swapped))) == [pairs]
    assert stored(pa.array([[("h", b"x")]], pa.map_(pa.string(), pa.binary()))) == [pairs]


def test_an_integer_timestamp_column_is_milliseconds_as_sends():
    """send_batch()'s integer timestamps are milliseconds since the epoch, as send(timestamp=) and Kafka's (they
    were read as microseconds: 2023 became 1970-01-20)."""
    stored = to_storage(pa.table({"value": [b"a"], "timestamp": pa.array([1_700_000_000_123], pa.int64())}), None, 1)
    assert stored.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000]
    for absurd in (-1, 253_402_300_800_000, 2**62):
        with pytest.raises(InvalidRecordError, match="timestamp"):
            to_storage(pa.table({"value": [b"a"], "timestamp": pa.array([absurd], pa.int64())}), None, 1)
