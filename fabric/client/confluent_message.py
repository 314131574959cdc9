"""confluent-kafka's Message: a record's fields through methods (`msg.value()`, `msg.error()`), as produce()'s
delivery callback gets it (DeliveredMessage) and as fabric.kafka.Consumer's poll() answers it (Message)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from fabric.client.delivery import RecordMetadata
from fabric.client.kafka_error import KafkaError
from fabric.common.records import Record

# confluent-kafka's timestamp types: (type, ms) as Message.timestamp() answers
TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME = 0, 1


class ConfluentMessage:
    """The fields of a confluent-kafka Message and its methods; always truthy, whatever len() (the value's size)
    says, so that `if not msg:` skips no empty value or tombstone."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value", "_headers", "_timestamp", "_error")

    def __init__(self, topic: str, partition: int, offset: int, key: Any, value: Any,
                 headers: list[tuple[str, Any]] | None, timestamp: tuple[int, int],
                 error: KafkaError | None = None) -> None:
        self._topic, self._partition, self._offset, self._key, self._value = topic, partition, offset, key, value
        self._headers, self._timestamp, self._error = headers, timestamp, error

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> Any:
        return self._key

    def value(self) -> Any:
        return self._value

    def headers(self) -> list[tuple[str, Any]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        """(confluent-kafka's timestamp type, milliseconds)."""
        return self._timestamp

    def leader_epoch(self) -> int | None:
        """The leader epoch the record was written under: not carried to clients here (None, as confluent-kafka
        answers where it is unknown)."""
        return None

    def latency(self) -> float | None:
        """A delivered message's produce latency: not measured here (None, as for a consumed message)."""
        return None

    def set_key(self, key: Any) -> None:
        """Replace the key (confluent-kafka's, for a program that rewrites messages it passes on)."""
        self._key = key

    def set_value(self, value: Any) -> None:
        self._value = value

    def set_headers(self, headers: list[tuple[str, Any]] | None) -> None:
        self._headers = headers

    def __len__(self) -> int:
        return len(self._value) if isinstance(self._value, (bytes, str)) else 0

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(topic={self._topic!r}, partition={self._partition}, offset={self._offset})"


class DeliveredMessage(ConfluentMessage):
    """What confluent-kafka's produce() hands its delivery callback: the record as produced and where it landed
    (`partition()` and `offset()` -1 where it failed: `error()` says why), and its timestamp as stored (`timestamp()`
    not available where the log stamps it, LogAppendTime, or where the send failed, unless produce() gave one)."""

    __slots__ = ()

    def __init__(self, topic: str, key: Any, value: Any, headers: Any, timestamp_ms: int | None,
                 error: KafkaError | None, metadata: RecordMetadata | None) -> None:
        listed = list(headers.items()) if isinstance(headers, Mapping) else (list(headers) if headers else None)
        partition, offset = (metadata.partition, metadata.offset) if metadata is not None else (-1, -1)
        if metadata is not None and metadata.timestamp >= 0:
            stamped = (TIMESTAMP_CREATE_TIME, metadata.timestamp)
        else:
            stamped = (TIMESTAMP_CREATE_TIME, timestamp_ms) if timestamp_ms else (TIMESTAMP_NOT_AVAILABLE, 0)
        super().__init__(topic, partition, offset, _produced(key), _produced(value), listed, stamped, error)


def _produced(data: Any) -> Any:
    """A key or value as produce() sent it: text as its UTF-8 bytes (confluent-kafka's delivered messages hold
    bytes)."""
    return data.encode() if isinstance(data, str) else data


class Message(ConfluentMessage):
    """A consumed record as confluent-kafka's Message (fabric.kafka.Consumer's poll() and consume()); `record`
    is the fabric's own."""

    __slots__ = ("record",)

    def __init__(self, record: Record) -> None:
        # (the record's CreateTime 0 / LogAppendTime 1 are confluent-kafka's 1 / 2)
        super().__init__(record.topic, record.partition, record.offset, record.key, record.value,
                         record.headers or None, (record.timestamp_type + 1, record.timestamp))
        self.record = record


ProduceCallback = Callable[[KafkaError | None, DeliveredMessage], Any]  # produce()'s, confluent-kafka's shape
