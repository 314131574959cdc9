"""Log.offset_after_records (fabric/storage/reader.py): the offset after the first N records a reader gets, counted
from frame headers across compaction's gaps (single offsets, whole batches, whole merged segments), transaction
markers and aborted records, checked against what a read returns from every start offset."""
from __future__ import annotations

import pyarrow as pa
import pytest

from fabric.common.config import TopicConfig
from fabric.common.errors import OffsetOutOfRangeError
from fabric.common.records import TIMESTAMP, storage_schema
from fabric.common.types import ProducerBatch
from fabric.storage.log import Log
from fabric.storage.reader import READ_COMMITTED, READ_UNCOMMITTED

CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1200", "index.interval.bytes": "200",
          "segment.ms": str(2**62)}


def keyed(schema: pa.Schema, pairs: list[tuple[bytes, object]]) -> pa.RecordBatch:
    n = len(pairs)
    return pa.RecordBatch.from_arrays(
        [pa.array([1_000_000] * n, TIMESTAMP), pa.array([k for k, _ in pairs], pa.binary()),
         pa.nulls(n, schema.field("headers").type), pa.array([v for _, v in pairs], schema.field("value").type)],
        schema=schema)


def delivered(plog: Log, isolation: str = READ_COMMITTED) -> list[int]:
    """The offsets a reader gets from the log start, read the ordinary way."""
    out, offset, end = [], plog.start_offset, plog.end_offset
    while offset < end:
        fetched = plog.fetch(offset, 1 << 20, None, isolation)
        assert fetched, f"no progress at offset {offset}"
        out += [f.offset + i for f in fetched for i in range(f.batch.num_rows)]
        offset = fetched[-1].offset + fetched[-1].batch.num_rows
    return out


def assert_counts_match_reads(plog: Log, isolation: str = READ_COMMITTED) -> None:
    """From every offset, for every count up to past the end: the offset after that many delivered records."""
    offsets, end = delivered(plog, isolation), plog.end_offset
    for start in range(plog.start_offset, end + 1):
        ahead = [o for o in offsets if o >= start]
        for count in range(len(ahead) + 2):
            want = start if count == 0 else ahead[count - 1] + 1 if count <= len(ahead) else end
            assert plog.offset_after_records(start, count, isolation=isolation) == want, (start, count)


def test_counts_cross_compaction_gaps_of_single_offsets_batches_and_merged_segments(tmp_path) -> None:
    schema = storage_schema()
    plog = Log(str(tmp_path / "p"), schema, TopicConfig(CONFIG))
    for r in range(12):  # a frame per segment; keys a and b are rewritten by every batch, every third has its own
        own = [(f"u{r}".encode(), b"own")] if r % 3 == 0 else []
        plog.append(keyed(schema, [(b"a", b"%d" % r), *own, (b"b", b"%d" % r)]))
    segments = len(plog.segments())
    assert plog.clean(force=True).cleaned
    plog.append(keyed(schema, [(b"c", b"1")]))
    plog.clean(force=True)  # a second pass merges the small segments the first one left
    assert len(plog.segments()) < segments  # whole batches became gap frames, and their segments were merged
    offsets = delivered(plog)
    assert offsets == [1, 8, 15, 22, 26, 27, 28]  # gaps of one offset, of whole batches, of merged segments
    assert plog.offset_after_records(2, 1) == 9  # a run of gaps is skipped at no cost in records
    assert_counts_match_reads(plog)
    assert plog.offset_after_records(0, 5, end_offset=offsets[2]) == offsets[2]  # fewer before the end given


def test_markers_and_aborted_records_are_not_counted_by_committed_readers(tmp_path) -> None:
    schema = storage_schema()
    plog = Log(str(tmp_path / "p"), schema, TopicConfig({**CONFIG, "segment.bytes": str(1 << 20)}))
    plog.append(keyed(schema, [(b"a", b"1"), (b"b", b"1")]))
    plog.append(keyed(schema, [(b"a", b"x"), (b"c", b"x"), (b"d", b"x")]), producer=ProducerBatch(8, 0, 0),
                transactional=True)
    plog.write_marker(8, 1, commit=False)
    plog.append(keyed(schema, [(b"b", b"2")]), producer=ProducerBatch(9, 0, 0), transactional=True)
    plog.write_marker(9, 0, commit=True)
    plog.append(keyed(schema, [(b"e", b"1")]))
    assert plog.offset_after_records(0, 3) == 7  # a1 b1, then past 3 aborted and a marker to b2 (offset 6)
    assert plog.offset_after_records(0, 3, isolation=READ_UNCOMMITTED) == 3
    assert_counts_match_reads(plog)
    assert_counts_match_reads(plog, READ_UNCOMMITTED)
    plog.clean(force=True)  # the aborted records go, the markers stay
    assert_counts_match_reads(plog)


def test_a_typed_topic_and_a_range_that_is_all_gaps(tmp_path) -> None:
    schema = storage_schema(pa.schema([("user", pa.string()), ("amount", pa.int64())]))
    plog = Log(str(tmp_path / "p"), schema, TopicConfig(CONFIG))
    for r in range(30):
        plog.append(keyed(schema, [(b"u1", {"user": "ann", "amount": r}), (b"u2", {"user": "bob", "amount": r})]))
    plog.append(keyed(schema, [(b"u3", {"user": "cy", "amount": 0})]))
    plog.clean(force=True)
    assert delivered(plog) == [58, 59, 60]
    assert plog.offset_after_records(0, 1) == 59
    assert plog.offset_after_records(3, 10, end_offset=40) == 40  # nothing but gaps: the end, no error
    assert_counts_match_reads(plog)


def test_offsets_outside_the_log_are_refused(tmp_path) -> None:
    schema = storage_schema()
    plog = Log(str(tmp_path / "p"), schema, TopicConfig(CONFIG))
    plog.append(keyed(schema, [(b"a", b"1")]))
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 5 is outside the log's range \[0, 1\]"):
        plog.offset_after_records(5, 1)
    assert plog.offset_after_records(1, 3) == 1  # at the end: nothing to count
