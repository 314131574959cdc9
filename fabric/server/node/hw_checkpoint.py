"""A replica's high-watermark checkpoint (Kafka's replication-offset-checkpoint, a file per partition here):
the high watermark last written to `replication-high-watermark` in the partition's directory, so that a restarted
replica starts from it (at most its log end) rather than from zero."""
from __future__ import annotations

import os

from fabric.storage.log import Log
from fabric.storage.watermark import HighWatermark

HW_CHECKPOINT = "replication-high-watermark"


class HighWatermarkCheckpoint:
    """The checkpoint of one replica's high watermark, and what it holds; not thread-safe (the replica's lock is
    held around it)."""

    def __init__(self) -> None:
        self.written = -1  # what the file holds (-1: not read yet)

    def load(self, plog: Log) -> int:
        """The checkpointed high watermark, at most `plog`'s end (0 when the file holds none it can trust)."""
        reading = self._file(plog).read()
        self.written = min(reading.value if reading.trusted and reading.value is not None else 0, plog.end_offset)
        return self.written

    def due(self, hw: int) -> bool:
        """Whether `hw` is known and not what the file holds."""
        return hw >= 0 and hw != self.written

    def write(self, plog: Log, hw: int) -> None:
        """Write `hw` to `plog`'s checkpoint if it is due."""
        if self.due(hw):
            self._file(plog).write(hw)
            self.written = hw

    @staticmethod
    def _file(plog: Log) -> HighWatermark:
        return HighWatermark(os.path.join(plog.directory, HW_CHECKPOINT))
