"""Long polling (Kafka's fetch.max.wait.ms) over a real embedded fabric: a consumer at the end of a partition
makes one fetch that the fabric holds until a record is appended, instead of fetching again and again."""
from __future__ import annotations

import math
import threading

from fabric.client.consumer import Consumer
from fabric.client.producer import Producer
from fabric.common.errors import OffsetOutOfRangeError
from fabric.common.waiting import wait_for


def test_a_fetch_at_the_end_waits_for_the_next_append(flaky):
    consumer = Consumer(flaky, auto_offset_reset="earliest", fetch_max_wait_ms=600_000)
    consumer.assign([("t", 0)])

    def append_once_held() -> None:
        wait_for(lambda: flaky.calls["fetch"] >= 1, 60, "the consumer's long-polling fetch")
        with Producer(flaky, linger_ms=0) as producer:
            producer.send("t", b"x").result(timeout=30)
    writer = threading.Thread(target=append_once_held)
    writer.start()
    assert [r.value for r in consumer.poll(timeout=600)] == [b"x"]
    writer.join(60)
    assert flaky.calls["fetch"] == 1  # one partition: the first fetch is held until the append woke it
    assert consumer.poll(timeout=0) == []  # a zero timeout never waits
    assert flaky.calls["fetch"] == 2


def test_a_fetch_past_the_end_is_refused_at_once_however_long_it_may_wait(flaky):
    """The end is checked before the hold: an offset past it is out of range now, not after max_wait_ms."""
    with Producer(flaky, linger_ms=0) as producer:
        producer.send("t", b"x").result(timeout=30)
    done: list = []

    def fetch_past_the_end() -> None:
        try:
            flaky.fetch("t", 0, 5, 1 << 20, max_wait_ms=300_000)
        except OffsetOutOfRangeError as exc:
            done.append(exc)
    fetcher = threading.Thread(target=fetch_past_the_end, daemon=True)
    fetcher.start()
    fetcher.join(60)
    assert len(done) == 1 and "outside the log's range [0, 1]" in str(done[0])
    assert flaky.fetch("t", 0, 1, 1 << 20, max_wait_ms=1) == []  # at the end: held, then nothing


def test_an_infinite_poll_timeout_means_as_long_as_it_takes(flaky):
    """poll(timeout=math.inf) (and one so large a float holds it only approximately) waits as long as it takes, as
    Kafka's poll(Duration.ofMillis(Long.MAX_VALUE)); it was an OverflowError turning inf into milliseconds."""
    with Producer(flaky, linger_ms=0) as producer:
        producer.send("t", b"x").result(timeout=30)
        producer.send("t", b"y").result(timeout=30)
    consumer = Consumer(flaky, auto_offset_reset="earliest", max_poll_records=1)
    consumer.assign([("t", 0)])
    assert [r.value for r in consumer.poll(timeout=math.inf)] == [b"x"]
    assert consumer.poll_batch(timeout=1e300).column("value").to_pylist() == [b"y"]
