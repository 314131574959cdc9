"""`TopicWriter`: a Spark ForeachWriter that produces each row to a fabric topic as it comes.

It is the fabric's sink for real-time mode (`trigger(realTime=...)`), whose sink allowlist has `foreach` (and
Kafka, console, a memory sink) but no data source's sink, so format("fabric") cannot be one. Columns as the
fabric sink's: `value` (binary or string), optional `key` (binary or string), `headers` and `partition`.

Latency: Spark feeds a Python foreach writer rows in pickled batches that fill as rows come, and the last ones
when the real-time batch ends, so records arrive seconds after they were written (docs/performance.md).

Guarantee: at least once. A record is sent as soon as Spark hands its row over (linger 0) and each task's records
are acknowledged (acks=all) before the task ends. A task that fails, or a query restarted from its checkpoint,
writes again the records of its unfinished real-time batch: readers may see those twice. The micro-batch sink,
format("fabric"), is the exactly-once one.
"""
from __future__ import annotations

from typing import Any

from fabric.client.admin import Fabric
from fabric.client.producer import Producer
from fabric.client.url import open_cluster


class TopicWriter:
    """Produces rows to `topic` at `url`; Spark pickles it to every task, which opens its own connection."""

    def __init__(self, url: str, topic: str) -> None:
        self.url = url
        self.topic = topic
        self._fabric: Fabric | None = None
        self._producer: Producer | None = None

    def open(self, partition_id: int, epoch_id: int) -> bool:
        """A task's start: connect, with a producer that sends each record at once."""
        self._fabric = Fabric(open_cluster(self.url))
        self._producer = self._fabric.producer(linger_ms=0, acks="all")
        return True

    def process(self, row: Any) -> None:
        """Send one row's record (not waiting for it: close() does)."""
        assert self._producer is not None, "process() before open()"
        fields = row.asDict()
        self._producer.send(self.topic, fields["value"], key=fields.get("key"), headers=fields.get("headers"),
                            partition=fields.get("partition"))

    def close(self, error: BaseException | None) -> None:
        """The task's end: wait until every record sent is acknowledged (unless the task failed), then disconnect."""
        try:
            if self._producer is not None:
                if error is None:
                    self._producer.flush()
                self._producer.close()
        finally:
            if self._fabric is not None:
                self._fabric.close()
            self._fabric = self._producer = None
