"""A consumer's offset store (confluent-kafka's): what its commit() without offsets, its auto-commit and its commit
as a rebalance takes partitions away commit. With `enable_auto_offset_store` (the default, as librdkafka's
`enable.auto.offset.store`), that is the position of what poll() handed out; without it, only the next-offsets the
application stored with store_offsets(), once it has processed their records: at-least-once delivery, committed in
the background by auto-commit, with no commit call per record.

Invariant: only partitions assigned to the consumer have a stored offset (an offset stored for a partition the
consumer then lost is forgotten, never committed over its new owner's).
"""
from __future__ import annotations

from typing import Any, Collection

from fabric.client import partition_args
from fabric.common import checks
from fabric.common.errors import InvalidArgumentError, UnknownPartitionError
from fabric.common.records import Record
from fabric.common.types import TopicPartition


class OffsetStore:
    """The next-offsets a consumer commits when it is not told which: its positions while `automatic`, else those
    stored."""

    def __init__(self, automatic: bool) -> None:
        self.automatic = automatic
        self._stored: dict[TopicPartition, int] = {}

    def store(self, message: Record | None, offsets: Any, assigned: Collection[TopicPartition]) -> None:
        """Keep the offset after `message`, or `offsets` (confluent-kafka's [TopicPartition(topic, partition,
        offset)], or {tp: offset}), for the next commit; refused while automatic (every record handed out is stored
        already) and for a partition not `assigned`, storing none of them."""
        if self.automatic:
            raise InvalidArgumentError("store_offsets() stores offsets for the next commit when the consumer does not "
                                       "store them itself: create it with enable.auto.offset.store=False "
                                       "(enable_auto_offset_store=False)")
        chosen = partition_args.commit_offsets(offsets, message)
        if chosen is None:
            raise InvalidArgumentError("store_offsets() takes a message (a record) or offsets=[TopicPartition(topic, "
                                       "partition, offset)]")
        offsets = checks.by_partition(chosen, "store_offsets()", checks.offset)
        foreign = sorted(tp for tp in offsets if tp not in assigned)
        if foreign:
            raise UnknownPartitionError(f"store_offsets(): {foreign} not assigned to this consumer (assigned: "
                                        f"{sorted(assigned)}); only a partition's owner stores its offsets")
        self._stored.update(offsets)

    def committable(self, positions: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """What a commit without offsets commits: `positions` (of what was handed out, a dict of the caller's own)
        while automatic, else a copy of the offsets stored."""
        return positions if self.automatic else dict(self._stored)

    def keep(self, assigned: Collection[TopicPartition]) -> None:
        """Forget the offsets stored for partitions no longer `assigned`."""
        self._stored = {tp: offset for tp, offset in self._stored.items() if tp in assigned}
