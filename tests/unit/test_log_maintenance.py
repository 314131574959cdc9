"""Background log maintenance (fabric/storage/log_maintenance.py) in the embedded fabric: a writing process's
thread expires and compacts topics nobody writes to, survives a broken partition and stops on close; and
compaction and retention on demand (`Fabric.compact_topic`, `enforce_retention`) with their refusals."""
from __future__ import annotations

import logging
import os
import shutil
import threading

import pytest

from fabric.client.admin import Fabric
from fabric.client.embedded import CHECK_INTERVAL_ENV, INTERVAL_ENV, RETENTION_ENV, EmbeddedCluster
from fabric.common.errors import InvalidConfigError, UnknownTopicError
from fabric.common.waiting import wait_for

OLD_MS = 1_000_000  # a CreateTime in 1970: expired for any retention.ms
FAST_MS = 20  # log.retention.check.interval.ms of the maintaining process


def writer(root: str, interval_ms: int | None = None) -> Fabric:
    return Fabric(EmbeddedCluster(root, retention_check_interval_ms=interval_ms))


def produce(fab: Fabric, topic: str, pairs: list[tuple[bytes, bytes]], timestamp: int | None = None) -> None:
    """Send `pairs` as one producer, a batch each (the cleaner keeps a producer's last batch whole: it is one
    record, the latest of its key)."""
    with fab.producer(linger_ms=0, batch_size=1) as producer:
        for key, value in pairs:
            producer.send(topic, value, key=key, timestamp=timestamp)


def start_maintenance_by_writing(fab: Fabric) -> None:
    """An embedded fabric maintains the directory's logs from its first write: write once to a topic of its own."""
    fab.create_topic("busy")
    produce(fab, "busy", [(b"k", b"v")])
    assert fab.cluster.maintenance is not None


def test_an_idle_topic_expires_by_the_background_loop_alone(fabric_dir):
    with writer(fabric_dir) as old:  # wrote long ago (old CreateTime), then went away
        old.create_topic("idle", 2, config={"retention.ms": 60_000})
        produce(old, "idle", [(b"k%d" % i, b"v%d" % i) for i in range(10)], timestamp=OLD_MS)
        assert old.cluster.maintenance is not None  # its own loop never ran: the first pass is an interval away
    ends = [p.end_offset for p in Fabric(EmbeddedCluster(fabric_dir)).describe_topic("idle").partitions]
    assert sum(ends) == 10
    with writer(fabric_dir, FAST_MS) as fab:
        start_maintenance_by_writing(fab)
        wait_for(lambda: all(p.start_offset == p.end_offset for p in fab.describe_topic("idle").partitions),
                 what="the idle topic to expire")
        assert [p.end_offset for p in fab.describe_topic("idle").partitions] == ends  # offsets are kept
        busy = fab.describe_topic("busy").partitions[0]
        assert (busy.start_offset, busy.end_offset) == (0, 1)  # within its retention: kept


def test_an_idle_compacted_topic_is_cleaned_by_the_background_loop(fabric_dir, storage):
    config = {"cleanup.policy": "compact", "segment.bytes": 1200, "max.compaction.lag.ms": 1}
    latest: dict[bytes, bytes] = {}
    with writer(fabric_dir) as old:
        old.create_topic("table", config=config)
        pairs = [(b"k%d" % k, b"r%d-k%d-" % (r, k) + b"x" * 30) for r in range(20) for k in range(5)]
        produce(old, "table", pairs)
        latest.update(pairs)
        assert old.describe_topic("table").partitions[0].segments > 3
    with writer(fabric_dir, FAST_MS) as fab:
        start_maintenance_by_writing(fab)
        plog = fab.cluster.log("table", 0)
        # max.compaction.lag.ms: the loop rolls the active segment too, so one record per key is left
        def cleaned() -> list | None:
            records = storage.keyed_records(plog)
            return records if len(records) == len(latest) else None

        records = wait_for(cleaned, what="the idle compacted topic to be cleaned")
        assert {key: value for _, key, value in records} == latest
        assert plog.end_offset == 100  # offsets keep their values


def test_the_loop_survives_a_broken_partition_and_maintains_the_others(fabric_dir, caplog):
    with writer(fabric_dir) as old:
        old.create_topic("broken")  # listed before "idle": the pass must go on past it
        old.create_topic("idle", config={"retention.ms": 60_000})
        produce(old, "idle", [(b"k", b"v")] * 3, timestamp=OLD_MS)
    partition = os.path.join(fabric_dir, "broken", "0")
    shutil.rmtree(partition)
    with open(partition, "w") as f:  # a file where the partition's directory should be
        f.write("not a directory")
    with caplog.at_level(logging.INFO, logger="fabric.storage.log_maintenance"), writer(fabric_dir, FAST_MS) as fab:
        start_maintenance_by_writing(fab)
        maintenance = fab.cluster.maintenance
        wait_for(lambda: fab.describe_topic("idle").partitions[0].start_offset == 3, what="the idle topic to expire")
        passes = maintenance.passes
        wait_for(lambda: maintenance.passes >= passes + 2, what="two more passes")
        assert maintenance._thread.is_alive()
    failures = [r for r in caplog.records if r.levelno == logging.WARNING and "broken-0" in r.getMessage()]
    assert len(failures) >= 2, caplog.text  # every pass tried it again, and said so
    assert "the other partitions go on" in failures[0].getMessage()
    assert any("idle-0: retention deleted 1 segment(s)" in r.getMessage() for r in caplog.records
               if r.levelno == logging.INFO), caplog.text
    assert not maintenance._thread.is_alive()  # close() stopped and joined it


def test_only_a_writing_process_maintains(fabric_dir):
    with writer(fabric_dir, FAST_MS) as reader:
        reader.create_topic("t")
        reader.list_topics()
        reader.describe_topic("t")
        assert reader.cluster.maintenance is None
        start_maintenance_by_writing(reader)
        first = reader.cluster.maintenance
        produce(reader, "t", [(b"k", b"v")])
        assert reader.cluster.maintenance is first  # one loop per process


def test_the_interval_comes_from_the_argument_the_environment_or_kafkas_default(fabric_dir, monkeypatch):
    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert EmbeddedCluster(fabric_dir).retention_check_interval_ms == 300_000
    monkeypatch.setenv(INTERVAL_ENV, "1500")
    assert EmbeddedCluster(fabric_dir).retention_check_interval_ms == 1500
    assert EmbeddedCluster(fabric_dir, retention_check_interval_ms=700).retention_check_interval_ms == 700
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    with pytest.raises(InvalidConfigError, match=r"log.retention.check.interval.ms \(\$FABRIC_LOG_RETENTION_CHECK_"
                                                 r"INTERVAL_MS\) must be a number of milliseconds"):
        EmbeddedCluster(fabric_dir)
    with pytest.raises(InvalidConfigError, match="log.retention.check.interval.ms must be a number of millis"):
        EmbeddedCluster(fabric_dir, retention_check_interval_ms=0)


def test_a_writing_process_forgets_abandoned_groups_as_the_environment_or_kafkas_defaults_say(fabric_dir,
                                                                                                   monkeypatch):
    """offsets.retention.minutes and its check interval for a writing embedded process: Kafka's defaults, or the
    environment's, a bad one named; the pass runs from the first write until the fabric closes."""
    for name in (RETENTION_ENV, CHECK_INTERVAL_ENV):
        monkeypatch.delenv(name, raising=False)
    assert EmbeddedCluster(fabric_dir).offsets_retention == (7 * 24 * 60, 600_000)
    monkeypatch.setenv(RETENTION_ENV, "60")
    monkeypatch.setenv(CHECK_INTERVAL_ENV, "2000")
    assert EmbeddedCluster(fabric_dir).offsets_retention == (60, 2000)
    monkeypatch.setenv(RETENTION_ENV, "0")
    with pytest.raises(InvalidConfigError, match=r"offsets.retention.minutes \(\$FABRIC_OFFSETS_RETENTION_MINUTES\) "
                                                 r"must be a number of minutes from 1"):
        EmbeddedCluster(fabric_dir)
    monkeypatch.setenv(RETENTION_ENV, "60")

    def passes() -> int:
        return sum(t.name == "offsets-retention" and t.is_alive() for t in threading.enumerate())
    before = passes()
    with writer(fabric_dir) as fab:
        start_maintenance_by_writing(fab)
        produce(fab, "busy", [(b"k", b"v")])
        assert passes() == before + 1  # one per process, from the first write
    assert passes() == before  # stopped with the fabric


def test_compact_topic_reports_what_it_did_per_partition(fab, drain):
    fab.create_topic("table", 2, config={"cleanup.policy": "compact", "segment.bytes": 1200})
    produce(fab, "table", [(b"k%d" % (i % 4), b"v%d-" % i + b"x" * 40) for i in range(60)])
    before = [p.size_bytes for p in fab.describe_topic("table").partitions]
    reports = fab.compact_topic("table")
    assert [r.partition for r in reports] == ["table-0", "table-1"]
    for report, size in zip(reports, before, strict=True):
        assert report.cleaned
        assert report.records_removed > 0 and report.bytes_after < report.bytes_before <= size
    values = {r.key: r.value for r in drain(fab.consumer("table", auto_offset_reset="earliest"), 4)}
    assert len(values) == 4 and all(v.startswith(b"v5") for v in values.values())  # the latest of each key
    again = fab.compact_topic("table")
    assert sum(r.records_removed for r in again) == 0


def test_compact_topic_refuses_unknown_and_delete_only_topics(fab):
    with pytest.raises(UnknownTopicError, match="nope"):
        fab.compact_topic("nope")
    fab.create_topic("events")
    with pytest.raises(InvalidConfigError, match=r"topic 'events' is not compacted \(cleanup.policy=delete\).*"
                                                 r"fabric topics alter events --config cleanup.policy=compact"):
        fab.compact_topic("events")
    fab.alter_topic_config("events", {"cleanup.policy": "compact,delete"})
    assert fab.compact_topic("events")[0].reason  # accepted now (nothing to clean in an empty topic)

