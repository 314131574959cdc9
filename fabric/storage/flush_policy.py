"""Kafka's flush policy (flush.messages, flush.ms): when a partition's writes are fsynced. Durability comes
from replication (or, embedded, from the watermark as the commit point), so by default the page cache is left
to the operating system; a topic that asks for it is fsynced after so many records or so much time."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fabric.storage.log import Log


class FlushPolicy:
    """Counts the records `plog` wrote since its last fsync, and fsyncs when its topic's config asks."""

    def __init__(self, plog: Log) -> None:
        self.plog = plog
        self.unflushed = 0  # records written since the last fsync
        self.last_flush_ms = plog.clock.now_ms()

    def wrote(self, records: int) -> None:
        """Count `records` just written (lock held)."""
        self.unflushed += records

    def maybe_flush(self) -> None:
        """fsync if flush.messages records were written or flush.ms passed since the last fsync (lock held)."""
        config = self.plog.config
        if (self.unflushed >= config["flush.messages"]
                or self.plog.clock.now_ms() - self.last_flush_ms >= config["flush.ms"]):
            self.flush()

    def flush(self) -> None:
        """fsync the active segment, the high watermark and the directory (so a rolled or adopted segment's name
        is durable too)."""
        plog = self.plog
        segs = plog.segments()
        if segs:
            segs[-1].fsync()
        plog.hw.fsync()
        fd = os.open(plog.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.unflushed = 0
        self.last_flush_ms = plog.clock.now_ms()
