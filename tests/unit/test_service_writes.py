"""The broker checks what it writes before anything becomes visible, whoever sent it (embedded here; the service
runs the same Broker): the schema of appended and published rows, the record count a frame header claims
against its payload, CRCs, header timestamps, and max.message.bytes (the largest batch) on every append and
publish. A refused write changes nothing and every partition stays readable. (Over a real service:
tests/integration.)"""
from __future__ import annotations

import os
import struct
import time

import pyarrow as pa
import pytest

from fabric.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidRequestError,
    RecordTooLargeError,
    SchemaMismatchError,
)
from fabric.common.records import storage_schema, to_storage
from fabric.storage import frame

TYPED = pa.schema([("user", pa.string()), ("amount", pa.int64())])
COUNT = struct.Struct("<i")  # a frame header's record count, at byte 28 (inside the CRC)


def rows(values: list, schema: pa.Schema | None = None) -> pa.RecordBatch:
    table = pa.table({"value": values}) if schema is None else pa.Table.from_pylist(values, schema=schema)
    return to_storage(table, schema, time.time_ns() // 1000).to_batches()[0]


def resealed(header_bytes: bytes, payload: pa.Buffer, count: int) -> bytes:
    """The frame with its record count set to `count` and a valid CRC: what a hand-made client could send."""
    header = frame.unpack_header(header_bytes)
    forged = frame.seal(frame.FrameHeader(0, header.base_offset, count, header.first_timestamp,
                                          header.max_timestamp, header.attributes), payload)
    return forged.pack() + payload.to_pybytes()


@pytest.fixture
def topics(fab):
    """fab with a plain topic `plain` (2 partitions, one record in 0) and a typed topic `typed`."""
    fab.create_topic("plain", partitions=2, config={"max.message.bytes": "100"})
    fab.create_topic("typed", schema=TYPED)
    assert fab.cluster.append("plain", 0, rows([b"first"])) == 0
    return fab


def state(fab) -> dict:
    """What a refused write must not change: every partition's end and readable values, committed txns."""
    out = {}
    for topic in ("plain", "typed"):
        for p in range(fab.cluster.coordinator.topic(topic).partitions):
            fetched = fab.cluster.fetch(topic, p, 0, 1 << 20)
            out[(topic, p)] = (fab.cluster.partition_state(topic, p).end_offset,
                               [f.batch.column("value").to_pylist() for f in fetched])
    out["txn"] = fab.cluster.coordinator.transaction_committed("sink:1")
    return out


def refused(fab, call, error, match) -> None:
    before = state(fab)
    with pytest.raises(error, match=match):
        call()
    assert state(fab) == before


def test_publish_refuses_rows_of_another_value_type(topics) -> None:
    wrong = rows([{"user": "u", "amount": 1}], pa.schema([("user", pa.string()), ("amount", pa.float64())]))
    refused(topics, lambda: topics.cluster.publish("sink:1", {("typed", 0): [wrong]}), SchemaMismatchError,
            "must have its storage schema")
    refused(topics, lambda: topics.cluster.publish("sink:1", {("plain", 1): [rows([b"ok"]), wrong]}),
            SchemaMismatchError, "storage schema")
    refused(topics, lambda: topics.cluster.append("plain", 1, wrong), SchemaMismatchError, "storage schema")


def test_publish_refuses_frames_whose_header_lies_about_the_record_count(topics, tmp_path) -> None:
    header, payload = topics.cluster.frame_encoder("plain").encode(rows([b"one"]))
    forged = resealed(header, payload, 100)
    refused(topics, lambda: topics.cluster.publish_frames("sink:1", {("plain", 1): [pa.py_buffer(forged)]}),
            CorruptRecordError, "claims 100 records but holds 1")
    staged = tmp_path / "staged"
    staged.write_bytes(topics.cluster.frame_encoder("plain").schema_frame() + forged)
    refused(topics, lambda: topics.cluster.publish_files("sink:1", {("plain", 1): [str(staged)]}),
            CorruptRecordError, "claims 100 records")
    assert staged.exists()  # a refused staged file is neither adopted nor removed


def test_publish_refuses_torn_frames_and_frames_of_another_schema(topics) -> None:
    header, payload = topics.cluster.frame_encoder("plain").encode(rows([b"one"]))
    torn = bytearray(header + payload.to_pybytes())
    torn[-1] ^= 0xFF
    refused(topics, lambda: topics.cluster.publish_frames("sink:1", {("plain", 1): [pa.py_buffer(bytes(torn))]}),
            CorruptRecordError, "CRC")
    typed_header, typed_payload = topics.cluster.frame_encoder("typed").encode(rows([{"user": "u", "amount": 1}],
                                                                                   TYPED))
    refused(topics, lambda: topics.cluster.publish_frames(
        "sink:1", {("plain", 1): [pa.py_buffer(typed_header + typed_payload.to_pybytes())]}),
        SchemaMismatchError, "does not decode as a record batch of the topic's storage schema")
    schema_header, schema_payload = frame.schema_frame(storage_schema())
    forged_schema = frame.seal(frame.FrameHeader(0, 0, 5, -1, -1, frame.ATTR_SCHEMA), schema_payload)
    refused(topics, lambda: topics.cluster.publish_frames(
        "sink:1", {("plain", 1): [pa.py_buffer(forged_schema.pack() + schema_payload.to_pybytes())]}),
        CorruptRecordError, "schema frame claiming 5 records")


def test_publish_refuses_frames_whose_header_timestamps_are_not_their_rows(topics) -> None:
    batch = rows([b"one"])
    template, payload = topics.cluster.frame_encoder("plain").encode(batch)
    header = frame.unpack_header(template)
    forged = frame.seal(frame.FrameHeader(0, 0, 1, header.first_timestamp, 2**62, header.attributes), payload)
    refused(topics, lambda: topics.cluster.publish_frames(
        "sink:1", {("plain", 1): [pa.py_buffer(forged.pack() + payload.to_pybytes())]}),
        CorruptRecordError, "timestamps")


@pytest.mark.parametrize("stamp", [-1, -2**63, 2**63 - 1])
def test_every_write_refuses_timestamps_outside_1970_to_9999(topics, stamp) -> None:
    """The server checks record timestamps as a producer's send() does, whatever a hand-made client sends: a row
    stamped -2**63 or 2**63-1 µs was stored, then read back as nonsense (and kept by retention forever)."""
    good = rows([b"one"])
    bad = good.set_column(0, "timestamp", pa.array([stamp], good.schema.field("timestamp").type))
    refused(topics, lambda: topics.cluster.append("plain", 1, bad), InvalidRecordError,
            f"row 0 has timestamp {stamp} µs, out of range")
    refused(topics, lambda: topics.cluster.publish("sink:1", {("plain", 1): [good, bad]}), InvalidRecordError,
            "out of range: record timestamps run from 1970-01-01 to 9999-12-31")
    header, payload = topics.cluster.frame_encoder("plain").encode(bad)
    refused(topics, lambda: topics.cluster.publish_frames("sink:1", {("plain", 1): [pa.py_buffer(
        header + payload.to_pybytes())]}), InvalidRecordError, "out of range")


def test_an_append_refuses_acks_other_than_0_1_all(topics) -> None:
    """acks is checked on every server (a data node did, the coordinator's own partitions took any string)."""
    for acks in ("2", "ALL", ""):
        refused(topics, lambda acks=acks: topics.cluster.append("plain", 1, rows([b"x"]), acks=acks),
                InvalidRequestError, f"acks must be one of 0, 1, all \\(-1\\), got '{acks}'")
    assert topics.cluster.append("plain", 1, rows([b"x"]), acks="-1") == 0


def test_every_write_checks_max_message_bytes(topics, tmp_path) -> None:
    big = rows([b"x" * 2_000_000])
    refused(topics, lambda: topics.cluster.append("plain", 1, big), RecordTooLargeError,
            "record of 2000000 bytes .* exceeds max.message.bytes=100 of topic 'plain'")
    refused(topics, lambda: topics.cluster.publish("sink:1", {("plain", 1): [rows([b"ok"]), big]}),
            RecordTooLargeError, "max.message.bytes=100")
    header, payload = topics.cluster.frame_encoder("plain").encode(big)
    refused(topics, lambda: topics.cluster.publish_frames("sink:1", {("plain", 1): [pa.py_buffer(
        header + payload.to_pybytes())]}), RecordTooLargeError, "max.message.bytes=100")
    staged = tmp_path / "big"
    staged.write_bytes(topics.cluster.frame_encoder("plain").schema_frame() + header + payload.to_pybytes())
    refused(topics, lambda: topics.cluster.publish_files("sink:1", {("plain", 1): [str(staged)]}, adopt_bytes=1),
            RecordTooLargeError, "max.message.bytes=100")
    assert topics.cluster.append("plain", 1, rows([b"y" * 100])) == 0  # at the limit is fine
    # max.message.bytes bounds a batch, as in Kafka: three records of 60 bytes are one too many for one append
    refused(topics, lambda: topics.cluster.append("plain", 1, rows([b"z" * 60] * 3)), RecordTooLargeError,
            "a batch of 3 records of 180 bytes exceeds max.message.bytes=100 of topic 'plain'")
    header, payload = topics.cluster.frame_encoder("plain").encode(rows([b"z" * 60] * 2))
    refused(topics, lambda: topics.cluster.publish_frames("sink:1", {("plain", 1): [pa.py_buffer(
        header + payload.to_pybytes())]}), RecordTooLargeError, "a batch of 2 records of 120 bytes")
    assert [topics.cluster.append("plain", 1, rows([b"z" * 60])) for _ in range(3)] == [1, 2, 3]


def test_good_publishes_still_land_and_replays_are_skipped(topics, tmp_path) -> None:
    encoder = topics.cluster.frame_encoder("plain")
    header, payload = encoder.encode(rows([b"a", b"b"]))
    second, payload2 = encoder.encode(rows([b"c"]), 2)
    staged = tmp_path / "staged"
    staged.write_bytes(encoder.schema_frame() + header + payload.to_pybytes() + second + payload2.to_pybytes())
    assert topics.cluster.publish_files("sink:1", {("plain", 1): [str(staged)]}) is True
    assert topics.cluster.publish_files("sink:1", {("plain", 1): [str(staged)]}) is False
    assert state(topics)[("plain", 1)] == (3, [[b"a", b"b"], [b"c"]])
    assert not os.path.exists(os.path.join(str(tmp_path), "missing"))
