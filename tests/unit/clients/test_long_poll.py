"""Long polling (Kafka's fetch.max.wait.ms) over a real embedded fabric: a consumer at the end of a partition
makes one fetch that the fabric holds until a record is appended, instead of fetching again and again."""
from __future__ import annotations

import threading

from fabric.client.consumer import Consumer
from fabric.client.producer import Producer
from fabric.common.waiting import wait_for


def test_a_fetch_at_the_end_waits_for_the_next_append(flaky):
    consumer = Consumer(flaky, auto_offset_reset="earliest", fetch_max_wait_ms=600_000)
    consumer.assign([("t", 0)])

    def append_once_held() -> None:
        wait_for(lambda: flaky.calls["fetch"] >= 2, 60, "the consumer's second, long-polling fetch")
        with Producer(flaky, linger_ms=0) as producer:
            producer.send("t", b"x").result(timeout=30)
    writer = threading.Thread(target=append_once_held)
    writer.start()
    assert [r.value for r in consumer.poll(timeout=600)] == [b"x"]
    writer.join(60)
    assert flaky.calls["fetch"] == 2  # an empty pass, then one fetch held until the append woke it
    assert consumer.poll(timeout=0) == []  # a zero timeout never waits
    assert flaky.calls["fetch"] == 3
