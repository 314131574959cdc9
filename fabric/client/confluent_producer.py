"""confluent-kafka's producer calls over the fabric producer's own: produce(), whose delivery callback gets a
message with confluent-kafka's methods, poll(), which has no callbacks left to serve, and purge()."""
from __future__ import annotations

from typing import Any, Protocol

from fabric.client.confluent_message import DeliveredMessage, ProduceCallback
from fabric.client.delivery import DeliveryCallback, Drain, RecordMetadata, SendFuture
from fabric.client.kafka_error import KafkaError
from fabric.common import checks
from fabric.common.errors import IllegalStateError, InvalidArgumentError, InvalidConfigError, PurgedError
from fabric.common.record_checks import Headers


class _Sends(Protocol):
    def send(self, topic: str, value: Any = None, key: bytes | str | None = None, headers: Headers = None,
             partition: int | None = None, timestamp: int | None = None, *,
             callback: DeliveryCallback | None = None) -> SendFuture: ...


class _Purges(Protocol):
    config: dict[str, Any]

    def _purge(self, dropped: BaseException | None) -> list[Drain]: ...


class ConfluentProducerCalls:
    """What a producer (fabric.client.producer.Producer) takes as confluent-kafka's, over its send()."""

    def produce(self: _Sends, topic: str, value: Any = None, key: bytes | str | None = None, partition: int = -1,
                on_delivery: ProduceCallback | None = None, timestamp: int = 0, headers: Headers = None, *,
                callback: ProduceCallback | None = None) -> SendFuture:
        """confluent-kafka's produce(): send() with its defaults, partition -1 (the partitioner picks) and
        timestamp 0 (now), whose delivery callback (`on_delivery` or `callback`) gets confluent-kafka's (err,
        message): err None, or a KafkaError (`err.code()`, `err.str()`, `err.retriable()`, ...); the message a
        DeliveredMessage, with `.topic()`, `.partition()`, `.offset()`, `.value()`, `.error()` (err), ..."""
        if callback is not None and on_delivery is not None:
            raise InvalidConfigError("produce() takes callback= or on_delivery= (the same thing), not both")
        report = callback or on_delivery
        chosen = None if partition == -1 else partition
        if report is None:
            return self.send(topic, value, key, headers, chosen, timestamp or None)
        if not callable(report):
            raise InvalidConfigError(f"produce(on_delivery=...) must be callable(error, message), got "
                                     f"{type(report).__name__}")
        reported: ProduceCallback = report

        def delivered(error: BaseException | None, metadata: RecordMetadata | None) -> None:
            failure = None if error is None else KafkaError.of(error)  # (confluent-kafka's err: a value, not raised)
            reported(failure, DeliveredMessage(topic, key, value, headers, timestamp, failure, metadata))
        return self.send(topic, value, key, headers, chosen, timestamp or None, callback=delivered)

    def poll(self, timeout: float | None = None) -> int:
        """confluent-kafka's producer poll(): delivery callbacks run here as each outcome is known (on the
        producer's own threads), so none wait to be served: 0, at once, whatever the `timeout`."""
        if timeout is not None and timeout != -1:
            checks.timeout(timeout, "poll() timeout")
        return 0

    def purge(self: _Purges, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """confluent-kafka's purge(): with `in_queue`, drop the records still buffered, not yet taken into an
        append: their futures fail with PurgedError (their delivery callbacks run with it) and neither len() nor
        flush() counts them. An append under way may land whatever is done here, so purge never makes an outcome
        unknown: with `in_flight`, those appends are left to report their real outcome, and `blocking` waits for
        them (a flush of nothing new). Refused by a transactional producer: abort_transaction() drops its records."""
        for name, flag in (("in_queue", in_queue), ("in_flight", in_flight), ("blocking", blocking)):
            if type(flag) is not bool:
                raise InvalidArgumentError(f"purge() {name} must be True or False, got {checks.shown(flag)}")
        if self.config["transactional_id"]:
            raise IllegalStateError("purge() does not drop a transaction's records: a transactional producer drops "
                                    "them with abort_transaction()")
        dropped = PurgedError("purge() dropped this record from the producer's buffer before it was sent: it was "
                              "not written") if in_queue else None
        appending = self._purge(dropped)
        if in_flight and blocking:
            for drain in appending:
                drain.wait()
