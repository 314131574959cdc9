"""A topic's batches are appended one at a time, outside the producer's lock (Kafka's accumulator): send() does
not wait for the append in flight, and what it sends meanwhile gathers into the next batch, which goes as soon as
that append ends. Over a real embedded fabric whose first append is held until the test lets it answer."""
from __future__ import annotations

import threading

from fabric.client.producer import Producer
from fabric.common.errors import CoordinatorUnavailableError


def test_sends_while_a_batch_is_in_flight_return_at_once_and_go_together_next(flaky) -> None:
    held, gate = threading.Event(), threading.Event()
    timer = threading.Timer(60, gate.set)  # (a producer that made send() wait still ends the test)
    timer.start()
    flaky.fail("append", 1, CoordinatorUnavailableError("the answer was lost"), after=True,
               then=lambda: (held.set(), gate.wait()))
    try:
        with Producer(flaky, linger_ms=0) as producer:
            first = producer.send("t", b"first")
            assert held.wait(60), "the first batch was never appended"
            later = [producer.send("t", b"second"), producer.send("t", b"third")]
            assert not gate.is_set(), "send() waited for the append in flight"
            assert not any(f.done() for f in later)
            gate.set()
            assert first.get(30).offset == 0  # its retry finds it written (idempotence)
            assert [f.get(30).offset for f in later] == [1, 2]
        assert flaky.calls["append"] == 3  # the first, its retry, then one append of both later records
    finally:
        gate.set()
        timer.cancel()
