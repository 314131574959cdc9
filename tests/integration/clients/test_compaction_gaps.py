"""Readers of a compacted topic, on an embedded fabric and over a coordinator service: compaction's gaps (single
offsets, whole batches, merged segments, a removed tombstone at the end) are skipped like markers, never as an
error or data loss; seeks into a gap land on the next record; committed positions after a gap are right; and
offset_after_records counts the records a fetch returns. (The count on a cluster's data nodes, over transaction
markers and aborted records: tests/integration/test_transactions.py.)"""
from __future__ import annotations

import os
from typing import Callable

import pyarrow as pa
import pytest

from fabric.common.config import TopicConfig
from fabric.common.errors import InvalidRequestError
from fabric.common.records import storage_schema
from fabric.common.waiting import wait_for
from fabric.storage.cleaner import BUSY, CleanReport
from fabric.storage.log import Log

TOPIC = "changelog"
Written = tuple[int, bytes, bytes | None]  # offset, key, value


def compacted_topic(fab, fabric_dir: str) -> tuple[list[Written], int]:
    """A compacted topic whose partition went through two forced cleaner passes, as `fabric topics compact` runs
    them on the directory the fabric (or the service) keeps it in, or (a cluster) at the partition's leader node:
    returns the surviving (offset, key, value) of each key, computed from what was written, and the end offset.
    Its last record, a tombstone, is gone too."""
    fab.create_topic(TOPIC, config={"cleanup.policy": "compact", "segment.bytes": 2048, "delete.retention.ms": 0})
    writes: list[Written] = []
    with fab.producer(enable_idempotence=False, linger_ms=0) as producer:  # no producer's last batch kept whole
        for r in range(8):
            keys = [b"k%d" % k for k in range(5)] + ([b"u%d" % r] if r % 3 == 0 else [])
            values = [b"r%d" % r] * len(keys)
            batch = producer.send_batch(TOPIC, pa.table({"key": keys, "value": values}))
            writes += [(batch[0].offset + i, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
        offset = producer.send(TOPIC, None, key=b"k0").result(30).offset  # a tombstone: deletes k0, then goes
        writes.append((offset, b"k0", None))
    if fab.list_nodes():
        clean = lambda: fab.compact_topic(TOPIC)[0]  # noqa: E731
    else:
        info = fab.cluster.coordinator.topic(TOPIC)
        plog = Log(os.path.join(fabric_dir, TOPIC, "0"), storage_schema(None), TopicConfig(info.config))
        clean = lambda: plog.clean(force=True)  # noqa: E731
    assert forced_pass(clean).cleaned
    assert forced_pass(clean).cleaned  # the tombstone's delete.retention.ms (0) has passed since the first
    latest = {key: (offset, value) for offset, key, value in writes}
    survivors = sorted((offset, key, value) for key, (offset, value) in latest.items() if value is not None)
    end = fab.describe_topic(TOPIC).partitions[0].end_offset
    assert end == writes[-1][0] + 1 and survivors[-1][0] < end - 1  # the log ends in a gap
    return survivors, end


def forced_pass(clean: Callable[[], CleanReport]) -> CleanReport:
    """The report of a forced pass, run again while a node's background cleaner holds the partition (it cleans
    what is due by its dirty ratio, so the forced pass that follows still has the rolled segment to clean)."""
    return wait_for(lambda: (report := clean()).reason != BUSY and report, what="the background cleaner to finish")


def read(records) -> list[Written]:
    return [(r.offset, r.key, r.value) for r in records]


def test_a_consumer_reads_exactly_the_surviving_records_across_gaps_and_commits_past_them(fab, fabric_dir, drain):
    survivors, end = compacted_topic(fab, fabric_dir)
    consumer = fab.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                            max_poll_records=2)
    consumer.assign([(TOPIC, 0)])
    got = drain(consumer, len(survivors))
    assert read(got) == survivors
    assert consumer.poll(0.5) == []  # the trailing gap: nothing more, no error
    assert consumer.position(TOPIC, 0) == end  # the position moved past it
    consumer.commit()
    assert consumer.committed() == {(TOPIC, 0): end}
    assert fab.describe_group("g")[0].lag == 0
    consumer.close()
    # a new member of the group resumes after the gap, and reads nothing twice
    again = fab.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    again.assign([(TOPIC, 0)])
    assert again.poll(0.5) == [] and again.position(TOPIC, 0) == end
    again.close()


def test_seeks_into_gaps_land_on_the_next_record_and_batches_read_the_same(fab, fabric_dir, drain):
    survivors, end = compacted_topic(fab, fabric_dir)
    offsets = [o for o, _, _ in survivors]
    gaps = [o for o in range(end) if o not in offsets]
    consumer = fab.consumer(auto_offset_reset="earliest", max_poll_records=1)
    consumer.assign([(TOPIC, 0)])
    for gap in gaps:
        consumer.seek(TOPIC, 0, gap)
        following = [s for s in survivors if s[0] > gap]
        if following:
            assert read(drain(consumer, 1)) == following[:1], gap
        else:  # a read whose whole range is gone: empty, and the position moves to the end
            assert consumer.poll(0.5) == [] and consumer.position(TOPIC, 0) == end, gap
    consumer.seek(TOPIC, 0, 0)
    table = consumer.poll_batch(10)
    while table.num_rows < len(survivors):
        table = pa.concat_tables([table, consumer.poll_batch(10)])
    assert list(zip(table["offset"].to_pylist(), table["key"].to_pylist(), table["value"].to_pylist(),
                    strict=True)) == survivors
    consumer.close()


def test_offset_after_records_counts_what_a_fetch_returns(fab, fabric_dir):
    survivors, end = compacted_topic(fab, fabric_dir)
    offsets = [o for o, _, _ in survivors]
    cluster = fab.cluster
    for start in range(end + 1):
        ahead = [o for o in offsets if o >= start]
        for count in (1, 2, len(ahead), len(ahead) + 1):
            want = ahead[count - 1] + 1 if 0 < count <= len(ahead) else end if count else start
            assert cluster.offset_after_records(TOPIC, 0, start, count) == want, (start, count)
    assert cluster.offset_after_records(TOPIC, 0, 0, 1000, end_offset=offsets[1]) == offsets[1]


@pytest.mark.parametrize("args, message", [
    (dict(offset=-1, count=1), "offset must be an int from 0"),
    (dict(offset=0, count=-5), "count must be an int from 0"),
    (dict(offset=0, count=1, end_offset=-2), "end_offset must be an int from 0"),
    (dict(offset=0, count=1, isolation_level="dirty"), "isolation_level must be one of read_committed"),
])
def test_offset_after_records_refuses_bad_arguments(fab, args, message):
    fab.create_topic("plain")
    with fab.producer() as producer:
        producer.send("plain", b"v").result(30)
    with pytest.raises(InvalidRequestError, match=message):
        fab.cluster.offset_after_records("plain", 0, **args)
    assert fab.cluster.offset_after_records("plain", 0, 0, 1) == 1
