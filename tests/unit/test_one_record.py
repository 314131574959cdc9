"""A one-record batch laid out from its shape's template (fabric.client.one_record) is byte for byte the message
the record's built batch encodes to, for any key and value of any length and any timestamp; a shape whose random
bytes recur in the layout falls back to the built batch; and a log takes the message and reads the record back."""
from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.client import one_record
from fabric.common.records import PLAIN_SCHEMA, plain_rows
from fabric.common.types import TopicInfo
from fabric.storage import frame
from fabric.storage.batch_encoding import Encoded

KEYS = st.one_of(st.none(), st.binary(max_size=300))
STAMPS = st.integers(0, 253_402_300_799_999_999)


@settings(max_examples=300, deadline=None)
@given(key=KEYS, value=st.binary(max_size=3000), stamp=STAMPS, again=STAMPS)
def test_the_template_message_is_the_built_batchs_byte_for_byte(key, value, stamp, again) -> None:
    for stamp_us in (stamp, again):  # (the second: a copy of the shape's template made by the first)
        made = one_record.encoded(value, key, stamp_us)
        built = frame.encode_batch(plain_rows([value], [key], [None], [None], stamp_us)).to_pybytes()
        if made is None:  # (a shape whose bytes recur in its layout: built the usual way)
            continue
        assert made.payload.to_pybytes() == built
        assert (made.num_rows, made.first_timestamp, made.max_timestamp) == (1, stamp_us, stamp_us)
        assert made.batch.to_pylist() == [{"timestamp": made.batch.column(0)[0].as_py(), "key": key,
                                           "headers": None, "value": value}]


def test_templates_of_long_parts_are_made_and_of_recurring_bytes_fall_back(monkeypatch) -> None:
    assert one_record.encoded(b"v" * 100, b"order-17", 1) is not None
    assert one_record.encoded(b"", None, 1) is not None  # (nothing of its own to place but the time)
    monkeypatch.setattr(one_record, "_templates", {})
    monkeypatch.setattr(one_record.os, "urandom", lambda n: bytes(n))  # zero bytes recur in any layout (padding)
    assert one_record.encoded(b"v" * 8, None, 5) is None  # the shape is built the usual way instead
    assert one_record._templates == {(-1, 8): None}  # (and not tried again)


def _info(**config: str) -> TopicInfo:
    return TopicInfo("t", 1, config)


def test_plain_stored_takes_the_template_only_where_the_log_would_take_the_record_as_it_is() -> None:
    now = time.time_ns() // 1000
    value = b"v" * 100
    args = ([value], [b"k"], [None], [None], now)
    assert isinstance(one_record.plain_stored(*args, _info(), True), Encoded)
    kept = [one_record.plain_stored(*args, info, direct) for info, direct in (
        (_info(), False),  # a remote log: the request carries a batch
        (_info(**{"message.timestamp.type": "LogAppendTime"}), True),  # the log stamps it: decoded anyway
        (_info(**{"max.message.bytes": "50"}), True))]  # over the limit: the log's check names it
    assert all(not isinstance(rows, Encoded) and rows.schema.equals(PLAIN_SCHEMA) for rows in kept)
    keyless = one_record.plain_stored([value], [None], [None], [None], now, _info(**{"cleanup.policy": "compact"}),
                                      True)
    assert not isinstance(keyless, Encoded)  # a compacted topic's keyless record: refused by the log's check
    two = one_record.plain_stored([value, value], [None, None], [None, None], [None, None], now, _info(), True)
    assert not isinstance(two, Encoded) and two.num_rows == 2
    headed = one_record.plain_stored([value], [None], [[("h", b"1")]], [None], now, _info(), True)
    assert not isinstance(headed, Encoded)


def test_a_log_appends_the_message_and_reads_the_record_back(storage, tmp_path) -> None:
    log = storage.open_log(str(tmp_path / "t-0"))
    made = one_record.encoded(b"hello", b"k1", 1_700_000_000_000_000)
    assert made is not None
    assert log.append(made) == 0 and log.append(one_record.encoded(b"world", b"k2", 1_700_000_000_000_001)) == 1
    read = [row for fetched in log.read(0, 1 << 20) for row in fetched.batch.to_pylist()]
    assert [(r["key"], r["value"]) for r in read] == [(b"k1", b"hello"), (b"k2", b"world")]
