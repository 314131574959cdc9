"""confluent-kafka's Producer.purge() on every kind of cluster: the records still buffered are dropped, their
delivery callbacks get KafkaError._PURGE_QUEUE, and nothing of them is written; an append already under way is never cut
short (it reports its real outcome), and purge(blocking=True) waits for it; a transactional producer refuses."""
from __future__ import annotations

import threading

import pytest

from fabric import TopicPartition
from fabric.client.delivery import Drain
from fabric.common.errors import IllegalStateError, InvalidArgumentError, PurgedError
from fabric.kafka import KafkaError, Producer


def test_purge_drops_the_buffered_records_and_later_ones_are_delivered(fab, drain):
    fab.create_topic("orders", partitions=2)
    reports: list[tuple[KafkaError | None, int]] = []
    with Producer({"bootstrap.servers": fab.url, "linger.ms": 600_000}) as producer:
        futures = [producer.send("orders", b"dropped-%d" % i, partition=i % 2) for i in range(3)]
        producer.produce("orders", b"dropped-3", on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        assert len(producer) == 4 and not any(f.done() for f in futures)  # lingering: all still buffered
        producer.purge()
        assert all(isinstance(f.exception(), PurgedError) for f in futures)
        with pytest.raises(PurgedError):
            futures[0].get(timeout=30)
        [(error, offset)] = reports  # confluent-kafka's err: a KafkaError value
        assert error.code() == KafkaError._PURGE_QUEUE and not error.retriable() and offset == -1
        assert len(producer) == 0 and producer.flush(timeout=30) == 0
        after = [producer.send("orders", b"after-%d" % i, partition=i % 2) for i in range(2)]
        assert producer.flush() == 0
    assert [(m.partition, m.offset) for m in (f.get(timeout=30) for f in after)] == [(0, 0), (1, 0)]
    consumer = fab.consumer("orders", auto_offset_reset="earliest")
    assert sorted((r.partition, r.offset, r.value) for r in drain(consumer, 2)) == [(0, 0, b"after-0"),
                                                                                     (1, 0, b"after-1")]
    assert consumer.highwater(TopicPartition("orders", 0)) == 1 and consumer.highwater(TopicPartition("orders", 1)) == 1


def test_purge_leaves_an_append_under_way_to_land_and_blocking_waits_for_it(fab, monkeypatch):
    """A batch being appended (held here inside its append) is left alone: purge(blocking=False) returns at once
    with it still counted, purge() waits for it to land, and its record reports where it landed."""
    fab.create_topic("orders", partitions=1)
    producer = fab.producer(linger_ms=600_000)
    entered, release = threading.Event(), threading.Event()
    appends = producer._appender.by_partition

    def held(*args, **kwargs):
        entered.set()
        assert release.wait(30)
        return appends(*args, **kwargs)
    monkeypatch.setattr(producer._appender, "by_partition", held)
    in_flight = producer.send("orders", b"in-flight")
    flusher = threading.Thread(target=producer.flush)
    flusher.start()
    assert entered.wait(30)
    queued = producer.send("orders", b"queued")
    producer.purge(blocking=False)  # returns with the append still held
    assert isinstance(queued.exception(), PurgedError) and not in_flight.done() and len(producer) == 1

    landed_first: list[bool] = []
    purger = threading.Thread(target=lambda: (producer.purge(), landed_first.append(in_flight.done())))
    waiting, real_wait = threading.Event(), Drain.wait

    def seen_waiting(drain, timeout=None):
        if threading.current_thread() is purger:
            waiting.set()
        return real_wait(drain, timeout)
    monkeypatch.setattr(Drain, "wait", seen_waiting)
    purger.start()
    assert waiting.wait(30) and not in_flight.done()  # purge() is waiting for the append under way
    release.set()
    purger.join(30)
    flusher.join(30)
    assert landed_first == [True] and in_flight.get(timeout=30).offset == 0 and len(producer) == 0
    producer.close()


def test_purge_is_refused_by_a_transactional_producer(fab):
    with fab.producer(transactional_id="billing") as producer:
        with pytest.raises(IllegalStateError, match=r"abort_transaction\(\)"):
            producer.purge()


@pytest.mark.parametrize("arguments", [{"in_queue": 1}, {"in_flight": "yes"}, {"blocking": None}])
def test_purge_refuses_arguments_that_are_not_bools(fab, arguments):
    fab.create_topic("orders", partitions=1)
    with fab.producer(linger_ms=600_000) as producer:
        future = producer.send("orders", b"kept")
        [name] = arguments
        with pytest.raises(InvalidArgumentError, match=f"purge\\(\\) {name} must be True or False"):
            producer.purge(**arguments)
        assert not future.done() and len(producer) == 1  # nothing was purged
        assert future.get(timeout=30).offset == 0
