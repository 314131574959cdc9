"""confluent-kafka's partition EOF events (`enable.partition.eof`): with it on, a consumer's poll() that finds no
record answers, once per partition each time its position reaches the partition's end, a Message whose error()
is KafkaError._PARTITION_EOF, as librdkafka does; a program reading "until the end" stops on them. Reaching the
end is looked at only when a poll found nothing, so a consumer with records to read asks nothing more."""
from __future__ import annotations

from typing import Any, Iterable

from fabric.client.confluent_message import TIMESTAMP_NOT_AVAILABLE, ConfluentMessage
from fabric.client.kafka_error import KafkaError
from fabric.common.records import Record
from fabric.common.types import TopicPartition

CHECK_S = 1.0  # a poll waiting without a timeout looks at the partitions' ends this often


class PartitionEnds:
    """The partitions whose end was reported since their last record: each is reported again only after a record
    of it was delivered."""

    def __init__(self) -> None:
        self._reported: set[TopicPartition] = set()

    def moved(self, records: Iterable[Record]) -> None:
        """`records` were delivered: their partitions' ends are behind them now."""
        for record in records:
            self._reported.discard((record.topic, record.partition))

    def reached(self, consumer: Any, most: int) -> list[ConfluentMessage]:
        """The EOF events of up to `most` assigned partitions whose position is at their end, not reported yet."""
        assigned = set(consumer.assignment())
        self._reported &= assigned  # (a partition given up and assigned again is reported again)
        waiting = sorted(tp for tp in assigned if tp not in self._reported)
        if not waiting:
            return []
        ends = consumer.end_offsets(waiting)
        events: list[ConfluentMessage] = []
        for tp in waiting:
            position = consumer.position(tp)
            if position >= ends[tp] and len(events) < most:
                self._reported.add(tp)
                error = KafkaError(KafkaError._PARTITION_EOF,  # type: ignore[attr-defined]
                                   f"Fetch from broker reached end of partition at offset {position}")
                events.append(ConfluentMessage(tp[0], tp[1], position, None, None, None,
                                               (TIMESTAMP_NOT_AVAILABLE, 0), error))
        return events
