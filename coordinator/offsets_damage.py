"""Loading the offsets topic past damaged records, as Kafka's coordinator loads its offsets partitions skipping
what it cannot read: no user can seek inside the internal topic, so a damaged range raised to the group calls
(CorruptRangeError, whose advice is to seek past it) would fail every one of them for good.

A damaged range's commits are lost: the cache keeps what the records around it say (a group whose last commit
was there falls back to its previous one, or to none), and the loss is logged at WARNING, once per range. What
the range held is never served.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator

import pyarrow as pa

from fabric.coordinator.offsets_records import OFFSETS_TOPIC
from fabric.storage.scan import CorruptRangeError, Damage

log = logging.getLogger(__name__)
Read = Callable[[int, int], Iterator[tuple[int, pa.RecordBatch]]]  # OffsetsLog.read


class SkippingReader:
    """Reads an offsets log's partitions (`read`: OffsetsLog.read) past damaged ranges, each logged once."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self._reported: set[tuple[int, int]] = set()  # (partition, first offset) of the ranges logged

    def read(self, partition: int, start: int, skipped: Callable[[int], None]
             ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(offset, batch) of the partition from `start` to its end, as OffsetsLog.read, without the damaged
        ranges: at each, skipped(the offset after it) is called and the reading goes on from there. Damage whose
        end is unknown cannot be skipped: its CorruptRangeError is raised."""
        position = start
        while True:
            try:
                for offset, records in self._read(partition, position):
                    position = offset + records.num_rows
                    yield offset, records
                return
            except CorruptRangeError as exc:
                damage = exc.damage
                if damage.next_offset is None or damage.next_offset <= position:
                    raise
                self._report(partition, damage)
                position = damage.next_offset
                skipped(position)

    def _report(self, partition: int, damage: Damage) -> None:
        """Log the loss of the damaged range's commits, the first time this reader meets it."""
        key = (partition, damage.first_offset)
        if key in self._reported:
            return
        self._reported.add(key)
        log.warning("%s-%d: %s: skipped, the group offsets committed there are lost (a group of this partition "
                    "whose last commit was there falls back to its previous one, or to none, until it commits "
                    "again); restore the segment from a backup to get them back", OFFSETS_TOPIC, partition,
                    damage.describe())
