"""An append's rows checked against its topic (fabric.server.flight_server.stored_rows): max.message.bytes bounds
the whole append, its batches together, by the records' weight (keys, values, headers), not their buffers; the
request's bytes are counted from the buffers as read."""
from __future__ import annotations

import time

import pyarrow as pa
import pytest

from fabric.common import record_sizes
from fabric.common.errors import RecordTooLargeError
from fabric.common.records import PLAIN_SCHEMA, to_storage
from fabric.common.types import TopicInfo
from fabric.server.flight_server import stored_rows
from fabric.server.metrics import ServerMetrics


def one(value: bytes) -> pa.RecordBatch:
    return to_storage(pa.table({"value": [value]}), None, time.time_ns() // 1000).to_batches()[0]


def test_batches_within_the_limit_together_are_one_batch_though_their_buffers_weigh_more() -> None:
    topic = TopicInfo("t", 1, {"max.message.bytes": "250"})
    batches = [one(b"a" * 100), one(b"b" * 100)]
    assert sum(b.get_total_buffer_size() for b in batches) > 250  # the records are weighed, not the buffers
    rows = stored_rows(topic, PLAIN_SCHEMA, batches)
    assert rows.column("value").to_pylist() == [b"a" * 100, b"b" * 100]
    assert record_sizes.batch_bytes(rows) == 200


def test_batches_each_within_the_limit_but_over_it_together_are_refused() -> None:
    topic = TopicInfo("t", 1, {"max.message.bytes": "250"})
    with pytest.raises(RecordTooLargeError, match="a batch of 3 records of 300 bytes exceeds max.message.bytes=250"):
        stored_rows(topic, PLAIN_SCHEMA, iter([one(b"a" * 100), one(b"b" * 100), one(b"c" * 100)]))


def test_the_rows_bytes_are_counted_for_the_request_metrics() -> None:
    metrics = ServerMetrics()
    batches = [one(b"a" * 100), one(b"b" * 300)]
    with metrics.requests.measure("produce"):
        stored_rows(TopicInfo("t", 1), PLAIN_SCHEMA, batches)
    counted = metrics.registry.get_sample_value("fabric_produce_bytes_total")
    assert counted == sum(b.get_total_buffer_size() for b in batches) > 400
