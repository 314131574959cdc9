"""max.message.bytes bounds a record batch (one append, one frame), as in Kafka, and the clients split what they
send by it: the producer's accumulated batches and send_batch tables go as several appends, the Spark sink's
staged frames are cut to fit, a single record over the limit is refused at send(). Over a real embedded fabric,
which applies the servers' rule (fabric.server.admission)."""
from __future__ import annotations

import pyarrow as pa
import pytest

from fabric.client import batching
from fabric.common import record_sizes
from fabric.common.errors import RecordTooLargeError
from fabric.common.records import to_storage
from fabric.sinks.staging import Stager
from fabric.storage import frame

LIMIT = 1000


def stored(values: list[bytes | None]) -> pa.RecordBatch:
    return to_storage(pa.table({"value": pa.array(values, pa.binary())}), None, 1_000_000).to_batches()[0]


def values_of(batches: list[pa.RecordBatch]) -> list[bytes | None]:
    return [v for b in batches for v in b.column("value").to_pylist()]


def test_rows_are_cut_into_batches_within_the_limit_in_order() -> None:
    rows = stored([b"a" * 40, b"b" * 40, b"c" * 40, b"d" * 200, b"e" * 10])
    cut = record_sizes.within(rows, 100)
    assert [b.num_rows for b in cut] == [2, 1, 1, 1]  # the record over the limit alone (the server refuses it)
    assert values_of(cut) == values_of([rows])
    assert [record_sizes.batch_bytes(b) for b in cut] == [80, 40, 200, 10]
    assert record_sizes.within(rows, 1000) == [rows]
    assert record_sizes.within(rows.slice(0, 0), 100) == []
    empty = stored([None] * 50)  # records of no bytes fit any number to a batch
    assert record_sizes.within(empty, 1) == [empty]


def test_chunks_keep_to_both_batch_size_and_max_message_bytes() -> None:
    table = pa.Table.from_batches([stored([b"x" * 100] * 95)])
    by_limit = batching.chunks(table, batch_size=1 << 20, max_bytes=LIMIT)
    assert [c.num_rows for c in by_limit] == [10] * 9 + [5]
    by_size = batching.chunks(table, batch_size=2000, max_bytes=1 << 20)
    assert len(by_size) > 4 and sum(c.num_rows for c in by_size) == 95


@pytest.fixture
def small(fab):
    """fab with topic `small` (1 partition) taking batches of at most LIMIT bytes of records."""
    fab.create_topic("small", config={"max.message.bytes": str(LIMIT)})
    return fab


def frames_of(fab, topic: str) -> list[list[bytes]]:
    """The values of each stored batch (frame) of the topic's partition 0, in order."""
    return [f.batch.column("value").to_pylist() for f in fab.cluster.fetch(topic, 0, 0, 1 << 30)]


def test_send_batch_goes_in_appends_within_max_message_bytes(small) -> None:
    values = [b"%03d" % i + b"x" * 97 for i in range(95)]
    with small.producer() as producer:
        landed = producer.send_batch("small", pa.table({"value": values}))
    assert [(m.offset, m.count) for m in landed] == [(i * 10, 10) for i in range(9)] + [(90, 5)]
    assert [len(f) for f in frames_of(small, "small")] == [10] * 9 + [5]
    assert [v for f in frames_of(small, "small") for v in f] == values


def test_a_producers_accumulated_batch_is_split_and_a_record_over_the_limit_refused_at_send(small) -> None:
    values = [b"%03d" % i + b"y" * 197 for i in range(23)]
    with small.producer(linger_ms=60_000) as producer:
        futures = [producer.send("small", v) for v in values]
        with pytest.raises(RecordTooLargeError, match=f"exceeds max.message.bytes={LIMIT} of topic 'small'"):
            producer.send("small", b"z" * (LIMIT + 1))
        producer.flush()
    assert [f.get(0).offset for f in futures] == list(range(23))
    assert [len(f) for f in frames_of(small, "small")] == [5, 5, 5, 5, 3]
    assert [v for f in frames_of(small, "small") for v in f] == values


def test_the_spark_sinks_staged_frames_fit_the_topic_and_publish(small, tmp_path) -> None:
    stager = Stager(small.cluster, str(tmp_path / "staged"), "small")
    values = [b"%04d" % i + b"s" * 96 for i in range(250)]
    stager.add(pa.record_batch({"value": pa.array(values, pa.binary())}))
    [staged] = stager.finish()
    with pa.memory_map(staged.path, "r") as mapped:
        counts = [h.record_count for h, _ in frame.split_frames(mapped.read_buffer()) if not h.is_schema]
    assert counts == [10] * 25
    assert small.cluster.publish_files("sink:1", {("small", 0): [staged.path]})
    assert [v for f in frames_of(small, "small") for v in f] == values
