"""Task side of the fabric sink: turn Spark's Arrow batches into staged frame files per (topic, partition).

Each task converts its rows to stored rows (`fabric.records.to_storage`), places them with the producer's
partitioner (murmur2 of the key, explicit `partition`, sticky for null keys) and appends them, already
encoded as on-disk frames (`Cluster.frame_encoder`, based from 0), to one file per (topic, partition) under
the batch's staging directory, after the topic's schema frame: each file is a whole segment. A frame holds at
most FRAME_BYTES, and never more than the topic's max.message.bytes (the largest batch it takes), so a large
micro-batch is split into frames, never refused. The driver then publishes those bytes without re-encoding
them, large files without even copying them (`sinks.commit`).
"""
from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import WriterCommitMessage

from fabric.client.cluster import Cluster, FrameEncoder
from fabric.client.partitioner import StickyPartitioner, assign_partitions
from fabric.common import record_sizes
from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.config import TopicConfig
from fabric.common.errors import SchemaMismatchError
from fabric.common.records import to_storage
from fabric.common.types import TopicInfo

FRAME_BYTES = 1 << 20  # stored bytes per frame: large enough to amortise per-frame costs


@dataclass(frozen=True)
class StagedFile:
    """One task's frames for one partition."""

    topic: str
    partition: int
    path: str
    records: int


@dataclass
class StagedBatch(WriterCommitMessage):
    """A task's commit message: its staged files, and the sink id and batch they belong to."""

    sink_id: str
    batch: str
    files: list[StagedFile] = field(default_factory=list)
    writer: int | None = None  # on a replicated cluster: the producer id the task wrote its transaction with


class Stager:
    """Stages the rows of one task; `add` each Arrow batch, then `finish` for the commit message's files."""

    def __init__(self, cluster: Cluster, directory: str, topic: str | None, codec: str = "none") -> None:
        self.cluster = cluster
        self.directory = directory
        self.topic = topic
        self.codec = codec
        self._token = uuid.uuid4().hex[:12]
        self._topics: dict[str, tuple[TopicInfo, FrameEncoder, int]] = {}
        self._sticky = StickyPartitioner()
        self._pending: dict[tuple[str, int], list[pa.RecordBatch]] = {}
        self._pending_bytes: dict[tuple[str, int], int] = {}
        self._files: dict[tuple[str, int], tuple] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        """Convert, partition and buffer one input batch (frames are written as buffers fill up)."""
        if not batch.num_rows:
            return
        for topic, rows in self._by_topic(batch):
            info = self._topic(topic)[0]
            stored = to_storage(rows, info.value_schema, SYSTEM_CLOCK.now_us())
            explicit = rows.column("partition") if "partition" in rows.schema.names else None
            parts = assign_partitions(topic, stored.column("key"), explicit, info.partitions, self._sticky)
            for p, run in _split(stored, parts):
                self._buffer((topic, p), run)

    def finish(self) -> list[StagedFile]:
        """Write what is buffered, close the files and describe them."""
        for key in list(self._pending):
            self._write(key)
        out = []
        for (topic, p), (f, path, records) in sorted(self._files.items()):
            f.close()
            out.append(StagedFile(topic, p, path, records))
        self._files.clear()
        return out

    # -- internals ---------------------------------------------------------------------------------
    def _by_topic(self, batch: pa.RecordBatch) -> Iterable[tuple[str, pa.RecordBatch]]:
        if self.topic is not None:
            if "topic" in batch.schema.names:
                batch = batch.drop_columns(["topic"])
            yield self.topic, batch
            return
        topics = batch.column("topic")
        if topics.null_count:
            raise SchemaMismatchError(
                "column 'topic' is null in some rows; give every row a topic or set the 'topic' option")
        rest = batch.drop_columns(["topic"])
        names = pc.unique(topics).to_pylist()
        if len(names) == 1:
            yield names[0], rest
            return
        for name in names:
            yield name, rest.filter(pc.equal(topics, name))

    def _topic(self, topic: str) -> tuple[TopicInfo, FrameEncoder, int]:
        """The topic's metadata, frame encoder and the most bytes of records a frame may hold, read once per
        task."""
        cached = self._topics.get(topic)
        if cached is None:
            info = self.cluster.coordinator.topic(topic)
            limit = min(FRAME_BYTES, TopicConfig(info.config)["max.message.bytes"])
            cached = self._topics[topic] = (info, self.cluster.frame_encoder(topic, self.codec), limit)
        return cached

    def _buffer(self, key: tuple[str, int], rows: pa.RecordBatch) -> None:
        self._pending.setdefault(key, []).append(rows)
        self._pending_bytes[key] = self._pending_bytes.get(key, 0) + rows.nbytes
        if self._pending_bytes[key] >= FRAME_BYTES:
            self._write(key)

    def _write(self, key: tuple[str, int]) -> None:
        """Encode the key's buffered rows as frames within the topic's limit and append them to the key's staged
        file."""
        batches = self._pending.pop(key)
        self._pending_bytes.pop(key)
        rows = batches[0] if len(batches) == 1 else \
            pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
        if key not in self._files:
            os.makedirs(self.directory, exist_ok=True)
            path = os.path.join(self.directory, f"{key[0]}-{key[1]}-{self._token}.segment")
            f = open(path, "wb")
            f.write(self._topic(key[0])[1].schema_frame())
            self._files[key] = (f, path, 0)
        _, encoder, limit = self._topic(key[0])
        f, path, records = self._files[key]
        for part in record_sizes.within(rows, limit):
            header, payload = encoder.encode(part, base_offset=records)
            f.write(header)
            f.write(payload)
            records += part.num_rows
        self._files[key] = (f, path, records)


def _split(rows: pa.Table, parts: np.ndarray) -> Iterable[tuple[int, pa.RecordBatch]]:
    """(partition, its rows as one record batch) for each partition present, rows in input order."""
    batch = rows.combine_chunks().to_batches()[0] if rows.num_rows else None
    if batch is None:
        return
    if (parts == parts[0]).all():
        yield int(parts[0]), batch
        return
    order = np.argsort(parts, kind="stable")
    ordered = parts[order]
    cuts = [0, *(np.flatnonzero(np.diff(ordered)) + 1).tolist(), len(order)]
    taken = batch.take(pa.array(order))
    for lo, hi in itertools.pairwise(cuts):
        yield int(ordered[lo]), taken.slice(lo, hi - lo)
