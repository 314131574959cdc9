"""The fabric source's offset planning on the driver, without a Spark session: read limits Spark passes to the
stream reader, and minPartitions splitting offset ranges into tasks. (The source in real Spark queries:
tests/integration/test_source.py.)"""
from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

from fabric.common.errors import FabricError
from fabric.sources.fabric_source import FabricStreamReader, spark_schema
from fabric.sources.offsets import DataLossError, OffsetRange, split_ranges


def test_read_limits_from_spark_are_honoured(fab, fabric_url):
    fab.create_topic("t", partitions=2)
    with fab.producer() as producer:  # backlog: partition 0 has 30 records, partition 1 has 10
        for partition, count in ((0, 30), (1, 10)):
            for _ in range(count):
                producer.send("t", b"v", partition=partition)
    source = FabricStreamReader({"url": fabric_url, "subscribe": "t", "startingOffsets": "earliest",
                                 "maxOffsetsPerTrigger": "8"}, spark_schema(None, False))
    start = source.initialOffset()
    assert start == {"t": {"0": 0, "1": 0}}
    assert source.getDefaultReadLimit() == ReadMaxRows(8)
    assert source.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 30, "1": 10}}
    assert source.latestOffset(start, ReadMaxRows(8)) == {"t": {"0": 6, "1": 2}}  # in proportion to backlog
    assert source.latestOffset(start, ReadMaxRows(2)) == {"t": {"0": 1, "1": 1}}  # every backlog progresses
    assert source.latestOffset(start, ReadMinRows(100)) == start
    per_record = fab.describe_topic("t").partitions[0].size_bytes / 30
    by_bytes = source.latestOffset(start, ReadMaxBytes(int(per_record * 4)))["t"]
    assert by_bytes["0"] >= 1 and by_bytes["1"] >= 1 and by_bytes["0"] + by_bytes["1"] <= 4


def test_min_offsets_per_trigger_holds_triggers_back_until_enough_or_the_delay(fab, fabric_url):
    fab.create_topic("t", partitions=2)
    with fab.producer() as producer:  # 3 offsets on each partition: 6 in all
        for partition in (0, 1):
            for _ in range(3):
                producer.send("t", b"v", partition=partition)
    options = {"url": fabric_url, "subscribe": "t", "startingOffsets": "earliest", "minOffsetsPerTrigger": "7"}
    waiting = FabricStreamReader({**options, "maxTriggerDelay": "1h"}, spark_schema(None, False))
    start = waiting.initialOffset()
    assert waiting.getDefaultReadLimit() == ReadMinRows(7)
    assert waiting.latestOffset(start, waiting.getDefaultReadLimit()) == start  # 6 < 7: no batch
    assert waiting.latestOffset(start, ReadMinRows(6)) == {"t": {"0": 3, "1": 3}}  # the minimum sums partitions
    assert waiting.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 3, "1": 3}}  # Trigger.Once
    capped = FabricStreamReader({**options, "minOffsetsPerTrigger": "2", "maxOffsetsPerTrigger": "4"},
                                spark_schema(None, False))
    assert capped.latestOffset(start, capped.getDefaultReadLimit()) == {"t": {"0": 2, "1": 2}}  # both apply
    overdue = FabricStreamReader({**options, "maxTriggerDelay": "0s"}, spark_schema(None, False))
    assert overdue.latestOffset(start, overdue.getDefaultReadLimit()) == {"t": {"0": 3, "1": 3}}
    waiting.prepareForTriggerAvailableNow()  # an availableNow run must end, with what there is
    assert waiting.latestOffset(start, waiting.getDefaultReadLimit()) == {"t": {"0": 3, "1": 3}}


def test_max_offsets_per_trigger_counts_records_across_compaction_gaps(fab, fabric_url):
    fab.create_topic("c", partitions=2, config={"cleanup.policy": "compact"})
    with fab.producer() as producer:  # 5 rounds of the same 20 keys on each partition
        for r in range(5):
            for p in (0, 1):
                producer.send_batch("c", pa.table({"key": [b"k%d" % k for k in range(20)],
                                                   "value": [b"r%d" % r] * 20, "partition": [p] * 20}))
    for p in (0, 1):
        assert fab.cluster.log("c", p).clean(force=True).cleaned  # only round 4 is left, at offsets 80..99
    source = FabricStreamReader({"url": fabric_url, "subscribe": "c", "startingOffsets": "earliest"},
                                spark_schema(None, False))
    start = source.initialOffset()
    # Kafka's source would plan offsets 0..4 of each partition: nothing but gaps, an empty batch
    assert source.latestOffset(start, ReadMaxRows(10)) == {"c": {"0": 85, "1": 85}}
    assert source.latestOffset({"c": {"0": 85, "1": 90}}, ReadMaxRows(11)) == {"c": {"0": 91, "1": 94}}
    assert source.latestOffset(start, ReadMaxRows(200)) == {"c": {"0": 100, "1": 100}}


def test_min_partitions_split_covers_every_offset_once():
    ranges = split_ranges([OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 7)], 4)
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (0, 0, 2), (0, 2, 5), (0, 5, 7), (0, 7, 10), (1, 5, 7)]


def test_group_commit_of_a_batch_retention_overtook_does_not_fail_the_query(fab, fabric_url):
    fab.create_topic("t", config={"segment.bytes": 1024, "retention.ms": -1})
    with fab.producer(batch_size=1) as producer:  # a frame per record, ~4 to a segment
        for i in range(20):
            producer.send("t", b"%03d" % i + b"x" * 200)
    source = FabricStreamReader({"url": fabric_url, "subscribe": "t", "startingOffsets": "earliest",
                                 "groupId": "q"}, spark_schema(None, False))
    source.commit({"t": {"0": 3}})
    assert fab.describe_group("q")[0].committed == 3
    fab.alter_topic_config("t", {"retention.bytes": 1024})
    assert fab.enforce_retention("t") > 0
    source.commit({"t": {"0": 4}})  # below the log start now: only the lag view misses this batch
    assert fab.describe_group("q")[0].committed == 3
    source.commit({"t": {"0": 20}})
    assert fab.describe_group("q")[0].committed == 20


def test_a_topic_deleted_between_two_listings_of_one_trigger_is_reported_as_deleted(fab, fabric_url, monkeypatch):
    """latestOffset lists the topics more than once: a deletion landing between two listings is still the data
    loss "topic was deleted", not "topic does not exist" (a CI run hit it on the cluster)."""
    fab.create_topic("doomed", partitions=1)
    with fab.producer() as producer:
        producer.send("doomed", b"v", partition=0)
    source = FabricStreamReader({"url": fabric_url, "subscribe": "doomed", "startingOffsets": "earliest"},
                                spark_schema(None, False))
    start = source.initialOffset()
    coordinator = source.cluster.coordinator
    listed = coordinator.list_topics

    def listed_then_deleted() -> list[str]:
        topics = listed()
        monkeypatch.setattr(coordinator, "list_topics", listed)
        fab.delete_topic("doomed")
        return topics
    monkeypatch.setattr(coordinator, "list_topics", listed_then_deleted)
    with pytest.raises(DataLossError, match="topic 'doomed' was deleted while the query was reading it"):
        source.latestOffset(start, ReadAllAvailable())


@pytest.mark.parametrize("fail", [True, False])
def test_a_topic_re_created_with_fewer_partitions_is_data_loss_not_an_unknown_partition(fab, fabric_url, fail):
    """A query restarted (or running) after its topic was deleted and re-created with fewer partitions: the
    checkpoint's offsets name partitions that no longer exist. failOnDataLoss=true fails naming them; false skips
    them and reads the new topic (it used to fail with UnknownPartitionError either way, the batch Spark replays
    from the checkpoint included)."""
    fab.create_topic("r", partitions=2)
    with fab.producer() as producer:
        for partition in (0, 1):
            for _ in range(5):
                producer.send("r", b"old", partition=partition)
    source = FabricStreamReader({"url": fabric_url, "subscribe": "r", "startingOffsets": "earliest",
                                 "failOnDataLoss": str(fail).lower()}, spark_schema(None, False))
    done = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert done == {"r": {"0": 5, "1": 5}}
    fab.delete_topic("r")
    fab.create_topic("r", partitions=1)
    with fab.producer() as producer:
        for _ in range(6):
            producer.send("r", b"new", partition=0)
    replayed = {"r": {"0": 5, "1": 5}}  # a batch in the offset log, not yet committed when the query stopped
    if fail:
        with pytest.raises(DataLossError, match="partitions r-1 no longer exist .*failOnDataLoss=false"):
            source.partitions({"r": {"0": 0, "1": 0}}, replayed)
        with pytest.raises(DataLossError, match="partitions r-1 no longer exist"):
            source.partitions(done, source.latestOffset(done, ReadAllAvailable()))
        return
    assert [p.value for p in source.partitions({"r": {"0": 0, "1": 0}}, replayed)] == [OffsetRange("r", 0, 0, 5)]
    latest = source.latestOffset(done, ReadAllAvailable())
    assert latest == {"r": {"0": 6}}
    assert [p.value for p in source.partitions(done, latest)] == [OffsetRange("r", 0, 5, 6)]


@pytest.mark.parametrize("fail", [True, False])
def test_a_batch_replayed_after_its_topic_was_re_created_shorter_reads_the_new_log_once(fab, fabric_url, fail):
    """A batch planned as [10, 20) before its topic was re-created with 5 records, replayed from the checkpoint:
    its range is left as planned (the task reports offsets 10 to 19 as lost, at once on an unreplicated topic),
    and the next batch, starting past the new end, reads the new log from its start: its records come once (the
    replayed batch read them too, from 0, and the next one again)."""
    fab.create_topic("s", partitions=1)
    source = FabricStreamReader({"url": fabric_url, "subscribe": "s", "startingOffsets": "earliest",
                                 "failOnDataLoss": str(fail).lower()}, spark_schema(None, False))
    fab.delete_topic("s")
    fab.create_topic("s", partitions=1)
    with fab.producer() as producer:
        for _ in range(5):
            producer.send("s", b"new")
    assert [p.value for p in source.partitions({"s": {"0": 10}}, {"s": {"0": 20}})] == [OffsetRange("s", 0, 10, 20)]
    latest = source.latestOffset({"s": {"0": 20}}, ReadAllAvailable())
    assert latest == {"s": {"0": 5}}
    if fail:
        with pytest.raises(DataLossError, match="offset 20 of topic 's' partition 0 is past its end 5"):
            source.partitions({"s": {"0": 20}}, latest)
        return
    assert [p.value for p in source.partitions({"s": {"0": 20}}, latest)] == [OffsetRange("s", 0, 0, 5)]


def test_offsets_of_a_damaged_checkpoint_are_refused_naming_the_checkpoint(fab, fabric_url):
    fab.create_topic("t", partitions=1)
    source = FabricStreamReader({"url": fabric_url, "subscribe": "t"}, spark_schema(None, False))
    for damaged in ({"t": {"zero": 3}}, {"t": 3}, {"t": {"0": "x"}}):
        with pytest.raises(FabricError, match="checkpoint is damaged or was written by another source"):
            source.latestOffset(damaged, ReadAllAvailable())
