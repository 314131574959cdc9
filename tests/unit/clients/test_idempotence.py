"""The idempotent producer (KIP-98) over a real embedded fabric: a retry after a lost answer writes nothing
twice and answers the first write's offset; without idempotence (or with acks=1) it is at least once; a batch
that finally fails makes the producer take a new producer id, so no later batch is taken for its retry."""
from __future__ import annotations

import pyarrow as pa
import pytest

from fabric.client.producer import Producer
from fabric.common.errors import (
    CoordinatorUnavailableError,
    FabricError,
    InvalidConfigError,
    UnknownProducerIdError,
)

FAST = dict(retry_backoff_ms=1, linger_ms=0)


def test_a_retry_after_a_lost_answer_is_not_written_twice(flaky):
    with Producer(flaky, **FAST) as producer:
        assert producer.send("t", b"a").result(timeout=10).offset == 0
        flaky.fail("append", 2, CoordinatorUnavailableError("the answer was lost"), after=True)
        assert producer.send("t", b"b").result(timeout=10).offset == 1  # the first write's offset
        assert producer.send("t", b"c").result(timeout=10).offset == 2
    assert flaky.calls["append"] == 5
    stored = [v for f in flaky.fetch("t", 0, 0, 1 << 20) for v in f.batch.column("value").to_pylist()]
    assert stored == [b"a", b"b", b"c"]


def test_without_idempotence_a_lost_answer_is_written_again(flaky):
    with Producer(flaky, enable_idempotence=False, **FAST) as producer:
        flaky.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True)
        assert producer.send("t", b"a").result(timeout=10).offset == 1
    assert flaky.partition_state("t", 0).end_offset == 2  # at least once


def test_a_failed_batch_gives_the_producer_a_new_id(flaky):
    with Producer(flaky, retries=0, **FAST) as producer:
        producer.send("t", b"a").result(timeout=10)
        flaky.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True)
        with pytest.raises(CoordinatorUnavailableError):
            producer.send("t", b"b").result(timeout=10)  # written, but the producer cannot know
        assert producer.send("t", b"c").result(timeout=10).offset == 2  # under a new id: not taken for b's retry
    assert flaky.partition_state("t", 0).end_offset == 3


def test_idempotence_needs_acks_all(flaky):
    with pytest.raises(InvalidConfigError, match="enable_idempotence needs acks=all"):
        Producer(flaky, acks="1", enable_idempotence=True)
    with Producer(flaky, acks="1", **FAST) as producer:  # the default gives way to acks=1, as in Kafka
        assert producer.send("t", b"a").result(timeout=10).offset == 0


def test_a_producer_the_partition_forgot_takes_a_new_id_and_sends_again(flaky):
    with Producer(flaky, **FAST) as producer:
        producer.send("t", b"a").result(timeout=10)
        flaky.fail("append", 1, UnknownProducerIdError("the partition has no state of the producer"))
        assert producer.send("t", b"b").result(timeout=10).offset == 1
    assert flaky.calls["append"] == 3 and flaky.partition_state("t", 0).end_offset == 2


def test_a_closed_producer_refuses_to_send(flaky):
    producer = Producer(flaky, **FAST)
    producer.close()
    with pytest.raises(FabricError, match="send\\(\\) on a closed producer; create a new one"):
        producer.send("t", b"a")
    with pytest.raises(FabricError, match="send_batch\\(\\) on a closed producer; create a new one"):
        producer.send_batch("t", pa.table({"value": [b"a"]}))
    assert flaky.partition_state("t", 0).end_offset == 0
