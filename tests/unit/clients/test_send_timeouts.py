"""A producer's timeouts, as Kafka's: delivery_timeout_ms bounds a send from send() to its outcome, retries
included, request_timeout_ms each request of it (every Flight call made for it gives up by then), and
flush(timeout), close(timeout) and a future's result(timeout) wait no longer than asked, leaving what is still
unsent queued (flush, result) or failed (close). Over a real embedded fabric whose appends fail or hang on
demand (FlakyCluster); the same over real processes with a paused leader: tests/integration/test_client_limits.py."""
from __future__ import annotations

import math
import threading
import time

import pytest

from fabric.client.producer import Producer
from fabric.client.remote import RemoteCluster
from fabric.client.send_timeouts import Deadline
from fabric.common.errors import (
    ClientTimeoutError,
    CoordinatorUnavailableError,
    InvalidConfigError,
    LeaderNotAvailableError,
)
from fabric.common.waiting import wait_for
from fabric.server.connection import call_deadline, time_left

SLACK_S = 5.0  # what a loaded machine may add to a wait that should end at once


def test_delivery_timeout_must_leave_one_request_after_the_linger_as_in_kafka(flaky) -> None:
    with pytest.raises(InvalidConfigError, match=r"delivery_timeout_ms=1000 must be at least linger_ms \+ "
                                                 r"request_timeout_ms \(5 \+ 30000 = 30005\)"):
        Producer(flaky, delivery_timeout_ms=1000)
    with Producer(flaky, delivery_timeout_ms=1000, request_timeout_ms=500) as fitting:
        assert fitting.config["delivery_timeout_ms"] == 1000
    with Producer(flaky, request_timeout_ms=200_000) as defaulted:  # the default is raised to fit, with no error
        assert defaulted.config["delivery_timeout_ms"] == 200_005


def test_a_deadline_gives_each_request_its_timeout_until_the_delivery_timeout_is_near() -> None:
    deadline = Deadline.starting(100.0, delivery_ms=5000, request_ms=2000)
    assert (deadline.left(101.0), deadline.request(101.0)) == (4.0, 2.0)
    assert deadline.request(104.0) == 1.0  # the last request gets only what is left
    assert deadline.request(106.0) < 0
    never_sent = deadline.passed("a batch to t-0", None)
    assert isinstance(never_sent, ClientTimeoutError) and isinstance(never_sent, TimeoutError)
    assert never_sent.retriable and "delivery_timeout_ms=5000 passed" in str(never_sent)
    last = LeaderNotAvailableError("partition t-0 is offline")
    given_up = deadline.passed("a batch to t-0", last)
    assert type(given_up) is LeaderNotAvailableError and given_up.__cause__ is last
    assert str(given_up).startswith("partition t-0 is offline") and "delivery_timeout_ms=5000 passed" in str(given_up)


def test_calls_inside_a_call_deadline_give_up_by_it() -> None:
    cluster = RemoteCluster("fabric://127.0.0.1:1?timeout_ms=60000")  # nothing listens there
    try:
        assert cluster.hold_ms == 48_000  # a server may hold a call for most of the URL's timeout
        with call_deadline(10):
            assert time_left(60) <= 10
            with call_deadline(30):  # an inner block never extends an outer one
                assert time_left(60) <= 10
            with call_deadline(0.5):
                assert cluster.hold_ms <= 400
                began = time.monotonic()
                with pytest.raises(CoordinatorUnavailableError, match=r"within 0\.\d+ s"):
                    cluster.coordinator.list_topics()
                assert time.monotonic() - began < 0.5 + SLACK_S
        assert time_left(60) == 60
    finally:
        cluster.close()


def test_a_send_that_keeps_failing_gives_up_at_its_delivery_timeout(flaky) -> None:
    budgets: list[float] = []
    inner = flaky.append

    def append(*args, **kwargs):
        budgets.append(time_left(3600))  # how long the producer lets this request take
        return inner(*args, **kwargs)

    flaky.append = append
    with Producer(flaky) as warm:  # a process's first batch may take seconds to set up (imports) on a busy machine
        assert warm.send("t", b"first").get(60).offset == 0
    budgets.clear()
    with Producer(flaky, delivery_timeout_ms=3000, request_timeout_ms=500, linger_ms=0,
                  retry_backoff_ms=50) as producer:
        flaky.fail("append", 10**6, LeaderNotAvailableError("the leader of t-0 did not answer"))
        began = time.monotonic()
        with pytest.raises(LeaderNotAvailableError, match="did not answer.*delivery_timeout_ms=3000 passed"):
            producer.send("t", b"x").get(30)
        took = time.monotonic() - began
    assert 2.9 < took < 3 + SLACK_S
    assert len(budgets) > 2 and max(budgets) <= 0.5  # retried, each attempt within request_timeout_ms
    assert flaky.partition_state("t", 0).end_offset == 1


@pytest.fixture
def hanging(flaky):
    """flaky, whose next append is made and then hangs until `gate` is set (an answer that does not come),
    then fails retriably; the idempotent producer's retry finds it written. `gate` opens by itself after 60 s."""
    gate = threading.Event()
    flaky.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True, then=gate.wait)
    timer = threading.Timer(60, gate.set)
    timer.start()
    yield flaky, gate
    gate.set()
    timer.cancel()


def test_flush_with_a_timeout_raises_and_keeps_the_records_queued(hanging) -> None:
    flaky, gate = hanging
    with Producer(flaky, linger_ms=60_000) as producer:
        future = producer.send("t", b"x")
        with pytest.raises(ClientTimeoutError, match=r"flush\(timeout=0\) ran out"):
            producer.flush(timeout=0)
        began = time.monotonic()
        with pytest.raises(ClientTimeoutError, match=r"flush\(timeout=0.2\) ran out.*stay queued"):
            producer.flush(timeout=0.2)  # the batch is being appended now, and hangs
        assert time.monotonic() - began < 0.2 + SLACK_S
        with pytest.raises(TimeoutError, match=r"not appended within result\(timeout=0.1\)"):
            future.get(timeout=0.1)
        assert not future.done()
        gate.set()
        producer.flush()
        assert future.get(0).offset == 0
        producer.flush(timeout=0)  # nothing left to send: no error
    assert flaky.partition_state("t", 0).end_offset == 1  # written once


def test_flush_and_close_with_an_infinite_timeout_wait_as_long_as_it_takes(flaky) -> None:
    """flush(timeout=math.inf) and close(timeout=math.inf) (Kafka's close(Duration.ofMillis(Long.MAX_VALUE))) send
    everything; a lock's wait longer than threading.TIMEOUT_MAX was an OverflowError."""
    producer = Producer(flaky, linger_ms=60_000)
    first = producer.send("t", b"x")
    assert producer.flush(timeout=math.inf) == 0 and first.get(0).offset == 0
    second = producer.send("t", b"y")
    producer.close(timeout=1e300)
    assert second.get(0).offset == 1


def test_close_with_a_timeout_gives_up_and_fails_what_is_still_buffered(hanging) -> None:
    flaky, gate = hanging
    flaky.create_topic("u", 1, {}, None)
    producer = Producer(flaky, linger_ms=60_000)
    in_flight = producer.send("t", b"in flight")  # drained first (buffers go in the order they began): it hangs
    buffered = producer.send("u", b"buffered")
    began = time.monotonic()
    producer.close(timeout=0.3)
    assert time.monotonic() - began < 0.3 + SLACK_S
    gate.set()
    assert in_flight.get(30).offset == 0  # the append under way ends on its own
    wait_for(buffered.done, 30, "the buffered record to fail")
    assert isinstance(buffered.exception(), ClientTimeoutError)
    assert "closed before this record was sent" in str(buffered.exception())
    assert (flaky.partition_state("t", 0).end_offset, flaky.partition_state("u", 0).end_offset) == (1, 0)


def test_the_delivery_deadline_reports_the_last_answer_not_the_attempt_it_cut_off(flaky):
    """A send refused as offline, then retried into a server that never answers until the delivery deadline cuts
    that attempt off: the error is the refusal, which says what is wrong, with the deadline added."""
    with Producer(flaky, delivery_timeout_ms=1000, request_timeout_ms=1000, retry_backoff_ms=50,
                  linger_ms=0) as producer:
        flaky.fail("append", 1, LeaderNotAvailableError("t-0 is offline: no in-sync replica is alive"))
        flaky.hang("append", 100)
        with pytest.raises(LeaderNotAvailableError, match="t-0 is offline.*delivery_timeout_ms=1000 passed"):
            producer.send("t", b"a").result(timeout=30)
    assert flaky.calls["append"] >= 2
