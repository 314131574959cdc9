"""How a Kafka user learns that a record was delivered, on every kind of cluster: kafka-python's future
(`get`, `add_callback`, `add_errback`), confluent-kafka's `on_delivery` / `callback`, and records sent with a
linger and never flushed, which are sent when the producer is collected or the program exits, never lost."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fabric.client.delivery import RecordMetadata
from fabric.common.errors import InvalidConfigError, UnknownPartitionError


def test_future_get_and_callbacks_report_where_each_record_landed(fab):
    fab.create_topic("events", partitions=2)
    landed: list[tuple[str, RecordMetadata]] = []
    delivered: list[tuple[object, RecordMetadata | None]] = []
    ts = time.time_ns() // 1_000_000
    with fab.producer(linger_ms=60_000) as producer:
        future = producer.send("events", b"a", partition=1, timestamp_ms=ts)
        future.add_callback(lambda m: landed.append(("cb", m)))
        future.add_callback(lambda tag, m, suffix: landed.append((tag + suffix, m)), "with", suffix="-args")
        future.add_errback(lambda exc: landed.append(("errback", exc)))
        producer.send("events", b"b", partition=0, timestamp=ts, on_delivery=lambda err, m: delivered.append((err, m)))
        producer.send("events", b"cc", key=b"key", partition=0, timestamp=ts, headers={"hé": b"v"},
                      callback=lambda err, m: delivered.append((err, m)))
        assert not future.is_done and landed == [] and delivered == []  # lingering: nothing sent yet
        metadata = future.get(timeout=30)
    assert metadata == RecordMetadata("events", 1, 0, ts, -1, 1, -1) and future.succeeded()
    assert future.exception() is None and landed == [("cb", metadata), ("with-args", metadata)]
    assert delivered == [(None, RecordMetadata("events", 0, 0, ts, -1, 1, -1)),
                         (None, RecordMetadata("events", 0, 1, ts, 3, 2, 4))]  # (kafka-python's sizes: "hé" is 3)
    assert metadata.checksum is None and metadata.serialized_value_size == 1
    late: list[RecordMetadata] = []
    future.add_callback(late.append)  # added after delivery: called at once
    assert late == [metadata]


def test_a_failed_send_calls_errbacks_and_on_delivery_with_the_error(fab):
    fab.create_topic("events", partitions=1)
    errors: list[BaseException] = []
    delivered: list[tuple[BaseException | None, RecordMetadata | None]] = []
    done = threading.Event()
    with fab.producer(linger_ms=60_000) as producer:
        future = producer.send("events", b"x", on_delivery=lambda err, m: (delivered.append((err, m)), done.set()))
        future.add_errback(errors.append).add_callback(lambda m: errors.append(AssertionError("called back")))
        fab.delete_topic("events")  # the batch fails when it is sent
        with pytest.raises(Exception) as failed:
            future.get(timeout=30)
    assert done.is_set() and future.failed() and future.exception() is failed.value
    assert errors == [failed.value] and delivered == [(failed.value, None)]


def test_a_callback_that_raises_fails_neither_the_send_nor_the_other_callbacks(fab):
    fab.create_topic("events", partitions=1)
    called: list[int] = []
    with fab.producer(linger_ms=60_000) as producer:
        future = producer.send("events", b"x", callback=lambda err, m: 1 / 0)
        future.add_callback(lambda m: called.append(m.offset))
        assert future.get(timeout=30).offset == 0
    assert called == [0]


def test_bad_delivery_callbacks_are_refused_at_send(fab):
    fab.create_topic("events", partitions=1)
    with fab.producer() as producer:
        with pytest.raises(InvalidConfigError, match="callback= or on_delivery="):
            producer.send("events", b"x", callback=print, on_delivery=print)
        with pytest.raises(InvalidConfigError, match="must be callable"):
            producer.send("events", b"x", callback="print")
        with pytest.raises(UnknownPartitionError):
            producer.send("events", b"x", partition=5, callback=print)


def test_a_producer_dropped_unflushed_is_flushed_when_collected(fab, drain):
    fab.create_topic("events", partitions=1)
    producer = fab.producer(linger_ms=600_000)
    for i in range(5):
        producer.send("events", f"{i}".encode())
    del producer
    gc.collect()
    with fab.consumer("events", auto_offset_reset="earliest") as consumer:
        assert [r.value for r in drain(consumer, 5)] == [b"0", b"1", b"2", b"3", b"4"]


def test_records_sent_by_a_program_that_exits_without_flushing_are_delivered(fab, drain):
    fab.create_topic("events", partitions=1)
    program = textwrap.dedent(f"""
        import fabric
        producer = fabric.connect({fab.url!r}).producer(linger_ms=600_000)
        for i in range(100):
            producer.send("events", str(i).encode())
        print("sent", flush=True)
    """)  # the module-level producer lives until the interpreter exits
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "sent", done.stderr
    with fab.consumer("events", auto_offset_reset="earliest") as consumer:
        assert sorted(int(r.value) for r in drain(consumer, 100)) == list(range(100))
