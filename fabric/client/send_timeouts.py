"""A producer's timeouts, as Kafka's: delivery_timeout_ms bounds a send from send() to its outcome, retries and
waits included; request_timeout_ms bounds each request of it (a metadata refresh, a producer id, one append and
the acks=all wait for the in-sync replicas), never past the delivery deadline. Kafka requires
delivery.timeout.ms >= linger.ms + request.timeout.ms, so that a batch always has one whole request's time after
it lingered; the fabric checks the same."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from fabric.common.errors import ClientTimeoutError, FabricError, InvalidConfigError


def delivery_timeout_ms(config: Mapping[str, Any], given: Collection[str]) -> int:
    """The producer's delivery_timeout_ms: InvalidConfigError naming the fix if it was `given` (config keys with
    '_') below linger_ms + request_timeout_ms; the default raised to that sum if it is below it, as Kafka does."""
    delivery, linger, request = (config["delivery_timeout_ms"], config["linger_ms"], config["request_timeout_ms"])
    if delivery >= linger + request:
        return int(delivery)
    if "delivery_timeout_ms" in given:
        raise InvalidConfigError(
            f"producer config delivery_timeout_ms={delivery} must be at least linger_ms + request_timeout_ms "
            f"({linger} + {request} = {linger + request}), as in Kafka: a batch needs one request's time after it "
            "lingered; raise delivery_timeout_ms or lower request_timeout_ms")
    return int(linger + request)


@dataclass(frozen=True)
class Deadline:
    """When the outcome of a send (a batch, a send_batch call) must be known: `at`, in time.monotonic() seconds,
    `delivery_s` after it began; each request of it may take `request_s` at most."""

    at: float
    delivery_s: float
    request_s: float

    @classmethod
    def starting(cls, began: float, delivery_ms: int, request_ms: int) -> Deadline:
        """The deadline of a send that began at `began` (time.monotonic())."""
        return cls(began + delivery_ms / 1000, delivery_ms / 1000, request_ms / 1000)

    def left(self, now: float | None = None) -> float:
        """Seconds until the deadline (<= 0: passed)."""
        return self.at - (time.monotonic() if now is None else now)

    def request(self, now: float | None = None) -> float:
        """How long the next request may take: request_s, or less if the deadline comes first (<= 0: passed)."""
        return min(self.request_s, self.left(now))

    def passed(self, what: str, last: FabricError | None) -> FabricError:
        """The error of a send whose deadline passed: the last retriable error it got (same type, the deadline
        added to its message; an attempt cut off by the deadline itself does not replace an earlier error), or
        ClientTimeoutError if it never got an answer."""
        limit = f"delivery_timeout_ms={self.delivery_s * 1000:.0f} passed"
        if last is None:
            return ClientTimeoutError(f"{what} was not sent: {limit} while it waited behind this producer's other "
                                      "batches; it was not written")
        error = type(last)(f"{last} ({what}: gave up, {limit}, retries included)")
        error.__cause__ = last
        return error
