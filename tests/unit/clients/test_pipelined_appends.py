"""A producer's run of batches to one partition has up to max_in_flight_requests_per_connection of them in flight
(Kafka's pipelining), over a real embedded fabric made to pipeline (its appends are made when waited on, in the
order they were started): each batch lands once and in order through a lost answer, and the batches behind a
refused one, refused in turn for the gap, are sent again after it."""
from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from fabric.client.producer import Producer
from fabric.common.errors import CoordinatorUnavailableError, InvalidConfigError

SMALL = dict(linger_ms=0, retry_backoff_ms=1, batch_size=64)  # a few records per batch
RECORDS = 40


@pytest.fixture
def pipelined(flaky):
    flaky.pipelined_appends = True
    return flaky


def values(prefix: bytes, count: int = RECORDS) -> list[bytes]:
    return [b"%s%03d" % (prefix, i) for i in range(count)]


def stored(cluster) -> list[bytes]:
    return [v for f in cluster.fetch("t", 0, 0, 1 << 20) for v in f.batch.column("value").to_pylist()]


def send(producer: Producer, sent: list[bytes]) -> list[int]:
    """send_batch `sent` to t: the base offset of each batch, checked to follow one another."""
    metas = producer.send_batch("t", pa.table({"value": sent}))
    assert sum(m.count for m in metas) == len(sent)
    assert all(a.offset + a.count == b.offset for a, b in itertools.pairwise(metas))
    return [m.offset for m in metas]


def test_up_to_five_batches_of_a_partition_are_in_flight(pipelined):
    with Producer(pipelined, **SMALL) as producer:
        bases = send(producer, values(b"a"))
    assert len(bases) > 5 and bases[0] == 0
    assert pipelined.most_in_flight == 5 and pipelined.in_flight == 0
    assert stored(pipelined) == values(b"a")


def test_one_in_flight_sends_one_batch_at_a_time(pipelined):
    """Each batch is appended once the one before it was answered: none is started ahead."""
    with Producer(pipelined, max_in_flight_requests_per_connection=1, **SMALL) as producer:
        bases = send(producer, values(b"a"))
    assert pipelined.most_in_flight == 0 and pipelined.calls["append"] == len(bases)
    assert stored(pipelined) == values(b"a")


def test_a_lost_answer_in_flight_is_answered_with_the_first_write(pipelined):
    with Producer(pipelined, **SMALL) as producer:
        pipelined.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True)
        bases = send(producer, values(b"a"))
    assert pipelined.calls["append"] == len(bases) + 1 and stored(pipelined) == values(b"a")


@pytest.mark.parametrize("known", [True, False], ids=["known-producer", "new-producer"])
def test_the_batches_behind_a_refused_one_are_sent_again_after_it(pipelined, known):
    """The four behind the refused batch reach the partition without it: refused as out of order (or, from a
    producer the partition knows nothing of yet, as an unknown producer id), then sent again in order."""
    with Producer(pipelined, **SMALL) as producer:
        first = [b"first"] if known else []
        if known:
            producer.send("t", b"first").result(timeout=10)
        pipelined.fail("append", 1, CoordinatorUnavailableError("not written"))
        bases = send(producer, values(b"a"))
        assert bases[0] == len(first)
        assert pipelined.calls["append"] == len(first) + len(bases) + 1 + 4  # the refused one, and the 4 again
        send(producer, values(b"b"))  # the sequences go on where the run ended
    assert stored(pipelined) == first + values(b"a") + values(b"b")


def test_a_retry_keeps_its_producer_id_when_another_partitions_failure_dropped_it(pipelined):
    """Another partition's batch failing finally drops the producer id (the white-box step below stands for it)
    while a batch written under that id waits for its lost answer: its retry goes with its own fields and is
    answered with the first write's offset, not written again under a new id."""
    with Producer(pipelined, **SMALL) as producer:
        producer.send("t", b"first").result(timeout=10)
        pipelined.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True,
                       then=lambda: producer._sequences._reset(None, "another partition's batch failed"))
        send(producer, values(b"a"))
        send(producer, values(b"b"))  # under the new id
    assert stored(pipelined) == [b"first"] + values(b"a") + values(b"b")


def test_a_batch_that_finally_fails_ends_its_run(pipelined):
    with Producer(pipelined, retries=0, **SMALL) as producer:
        pipelined.fail("append", 1, CoordinatorUnavailableError("not written"))
        with pytest.raises(CoordinatorUnavailableError, match="not written"):
            send(producer, values(b"a"))
        assert pipelined.in_flight == 0  # the batches behind it were answered (refused), none is left waiting
        send(producer, values(b"b"))  # under a new producer id
    assert stored(pipelined) == values(b"b")


def test_without_idempotence_a_retry_may_land_after_the_batches_behind_it(pipelined):
    """As in Kafka: past one in flight, a batch whose answer was lost is written again after the others."""
    with Producer(pipelined, enable_idempotence=False, **SMALL) as producer:
        pipelined.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True)
        producer.send_batch("t", pa.table({"value": values(b"a")}))
    got = stored(pipelined)
    again = got[:len(got) - RECORDS]  # the lost batch's records, written again behind those that were in flight
    assert list(dict.fromkeys(got)) == values(b"a") and again and got[:len(again)] == again
    assert got[len(again) * 2:].index(again[0]) > 0


def test_idempotence_needs_at_most_five_in_flight(flaky):
    with pytest.raises(InvalidConfigError, match="max_in_flight_requests_per_connection of at most 5 .got 6."):
        Producer(flaky, enable_idempotence=True, max_in_flight_requests_per_connection=6)
    with Producer(flaky, max_in_flight_requests_per_connection=6, **SMALL) as producer:  # the default gives way
        flaky.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True)
        producer.send("t", b"a").result(timeout=10)
    assert stored(flaky) == [b"a", b"a"]  # not idempotent: at least once
