"""The producer's and consumer's retry loops follow FabricError.retriable: a retriable error (a coordinator
failing over, a rebalance) is retried after retry_backoff_ms, any other error is raised at once."""
from __future__ import annotations

import time

import pytest

from fabric.client.consumer import Consumer
from fabric.client.producer import Producer
from fabric.common.errors import AuthorizationError, CoordinatorUnavailableError, RebalanceInProgressError

FAST = dict(retry_backoff_ms=1)


def test_error_types_say_whether_they_are_retriable():
    assert CoordinatorUnavailableError.retriable and RebalanceInProgressError.retriable
    assert not AuthorizationError.retriable


def test_producer_retries_a_retriable_append_error(flaky):
    flaky.fail("append", 2, CoordinatorUnavailableError("failing over"))
    with Producer(flaky, **FAST) as producer:
        assert producer.send("t", b"x").result(timeout=10).offset == 0
    assert flaky.calls["append"] == 3
    assert flaky.partition_state("t", 0).end_offset == 1  # written once


def test_producer_raises_a_non_retriable_append_error_at_once(flaky):
    flaky.fail("append", 5, AuthorizationError("not allowed"))
    with Producer(flaky, **FAST) as producer, pytest.raises(AuthorizationError, match="not allowed"):
        producer.send("t", b"x").result(timeout=10)
    assert flaky.calls["append"] == 1
    assert flaky.partition_state("t", 0).end_offset == 0


def test_producer_gives_up_after_its_retries(flaky):
    flaky.fail("append", 5, CoordinatorUnavailableError("still failing over"))
    with Producer(flaky, retries=2, **FAST) as producer, pytest.raises(CoordinatorUnavailableError):
        producer.send("t", b"x").result(timeout=10)
    assert flaky.calls["append"] == 3  # the first try and two retries


def test_consumer_retries_a_retriable_fetch_error(flaky):
    with Producer(flaky) as producer:
        producer.send("t", b"x").result(timeout=10)
    flaky.fail("fetch", 2, RebalanceInProgressError("rebalancing"))
    consumer = Consumer(flaky, auto_offset_reset="earliest", **FAST)
    consumer.assign([("t", 0)])
    assert [r.value for r in consumer.poll(timeout=10)] == [b"x"]
    assert flaky.calls["fetch"] == 3


def test_consumer_raises_a_non_retriable_fetch_error_at_once(flaky):
    flaky.fail("fetch", 5, AuthorizationError("not allowed"))
    consumer = Consumer(flaky, auto_offset_reset="earliest", **FAST)
    consumer.assign([("t", 0)])
    started = time.monotonic()
    with pytest.raises(AuthorizationError):
        consumer.poll(timeout=30)
    assert flaky.calls["fetch"] == 1 and time.monotonic() - started < 10


def test_consumer_raises_a_retriable_error_once_its_timeout_passed(flaky):
    flaky.fail("fetch", 10**6, CoordinatorUnavailableError("down"))
    consumer = Consumer(flaky, auto_offset_reset="earliest", **FAST)
    consumer.assign([("t", 0)])
    with pytest.raises(CoordinatorUnavailableError):
        consumer.poll(timeout=0.2)
    assert flaky.calls["fetch"] > 1
