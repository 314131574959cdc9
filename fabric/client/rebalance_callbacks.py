"""A group member's rebalance callbacks, in the forms each client takes them, as one set the consumer calls:

- the fabric's own: `on_assign` / `on_revoke` given to the consumer, each called with the partitions;
- confluent-kafka's: `subscribe(topics, on_assign=, on_revoke=, on_lost=)`, each called with the consumer and the
  partitions; without `on_lost`, a loss (the member's session ended) calls `on_revoke`, as librdkafka does;
- kafka-python's: `subscribe(topics, listener=...)`, a ConsumerRebalanceListener whose `on_partitions_assigned`
  and `on_partitions_revoked` are called with the partitions (`on_partitions_lost`, where it has one, on a loss).

The partitions are fabric.TopicPartition objects (`.topic`, `.partition`), equal to (topic, partition) pairs.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fabric.client.topic_partition import TopicPartition, named
from fabric.common.errors import InvalidArgumentError, InvalidConfigError

Handler = Callable[[list[TopicPartition]], Any]


class ConsumerRebalanceListener(abc.ABC):
    """kafka-python's base class of a `subscribe(topics, listener=...)`: a subclass says what to do with the
    partitions the group takes back (before another member gets them) and gives."""

    @abc.abstractmethod
    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """The partitions taken back: commit what was done with their records."""

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """The partitions given."""


@dataclass(frozen=True)
class RebalanceCallbacks:
    """What the consumer calls as its group gives it partitions, takes them back, or finds them lost."""

    on_assigned: Handler | None = None
    on_revoked: Handler | None = None
    on_lost: Handler | None = None  # None: on_revoked

    @classmethod
    def own(cls, on_assign: Any, on_revoke: Any, group_id: str | None) -> RebalanceCallbacks:
        """The fabric consumer's own callbacks (its constructor's), each called with the partitions."""
        if (on_assign or on_revoke) and group_id is None:
            raise InvalidConfigError("on_assign/on_revoke are group rebalance callbacks; pass group_id=... too")
        if not all(callback is None or callable(callback) for callback in (on_assign, on_revoke)):
            raise InvalidArgumentError("on_assign and on_revoke must be functions taking a list of (topic, partition)")
        return cls(on_assign, on_revoke)

    @classmethod
    def given(cls, consumer: Any, on_assign: Any, on_revoke: Any, on_lost: Any, listener: Any,
              group_id: str | None) -> RebalanceCallbacks | None:
        """subscribe()'s: confluent-kafka's callbacks, each called with `consumer` first, or kafka-python's
        `listener`; None where none is given (the consumer keeps the ones it has)."""
        if listener is None and on_assign is None and on_revoke is None and on_lost is None:
            return None
        if group_id is None:
            raise InvalidConfigError("subscribe()'s rebalance callbacks are called as a group moves partitions; "
                                     "create the consumer with a group (group.id / group_id=...)")
        if listener is not None:
            if on_assign is not None or on_revoke is not None or on_lost is not None:
                raise InvalidArgumentError("subscribe() takes listener= (kafka-python's) or on_assign=/on_revoke=/"
                                           "on_lost= (confluent-kafka's), not both")
            methods = [getattr(listener, name, None) for name in ("on_partitions_assigned", "on_partitions_revoked")]
            if not all(callable(method) for method in methods):
                raise InvalidArgumentError("subscribe(listener=...) takes a ConsumerRebalanceListener: an object with "
                                           f"on_partitions_assigned(assigned) and on_partitions_revoked(revoked); got "
                                           f"{type(listener).__name__}")
            return cls(methods[0], methods[1], getattr(listener, "on_partitions_lost", None))
        _callable(("on_assign", on_assign), ("on_revoke", on_revoke), ("on_lost", on_lost))
        return cls(*(None if f is None else _with(consumer, f) for f in (on_assign, on_revoke, on_lost)))

    def assigned(self, partitions: Sequence[tuple[str, int]]) -> None:
        if self.on_assigned is not None:
            self.on_assigned(named(partitions))

    def revoked(self, partitions: Sequence[tuple[str, int]]) -> None:
        if self.on_revoked is not None:
            self.on_revoked(named(partitions))

    def lost(self, partitions: Sequence[tuple[str, int]]) -> None:
        handler = self.on_lost or self.on_revoked
        if handler is not None:
            handler(named(partitions))


def _with(consumer: Any, callback: Callable[[Any, list[TopicPartition]], Any]) -> Handler:
    """confluent-kafka's callback(consumer, partitions) as a Handler of the partitions."""
    return lambda partitions: callback(consumer, partitions)


def _callable(*callbacks: tuple[str, Any]) -> None:
    for name, callback in callbacks:
        if callback is not None and not callable(callback):
            raise InvalidArgumentError(f"{name} must be a function, got {type(callback).__name__}")
