"""What a consumer fetched and has not handed out yet: runs of stored rows, each with the partition and offset it
starts at.

Rows stay in their stored columns until they are handed out. poll() makes Records straight from them, and
poll_batch() builds the reader columns (topic, partition, offset, ...) only then, so a fetch that poll() hands
out builds no Arrow arrays at all.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, NamedTuple

import pyarrow as pa

from fabric.common.records import Record, stored_records, to_output
from fabric.common.types import TopicPartition


class FetchedRun(NamedTuple):
    """Stored rows of partition `tp` holding offsets from `offset` on, one per row; `nbytes` is their share of
    the bytes fetched (what bytes-consumed-total counts)."""

    tp: TopicPartition
    offset: int
    batch: pa.RecordBatch
    timestamp_type: int
    nbytes: int

    @classmethod
    def of(cls, tp: TopicPartition, offset: int, batch: pa.RecordBatch, timestamp_type: int) -> FetchedRun:
        """A run of a fetched batch, its bytes counted from its buffers (cheap: nbytes walks nested offsets)."""
        return cls(tp, offset, batch, timestamp_type, batch.get_total_buffer_size())

    def split(self, rows: int) -> tuple[FetchedRun, FetchedRun]:
        """The first `rows` rows and the rest, the bytes shared in proportion."""
        n = self.batch.num_rows
        head = self.nbytes * rows // n
        return (self._replace(batch=self.batch.slice(0, rows), nbytes=head),
                self._replace(offset=self.offset + rows, batch=self.batch.slice(rows), nbytes=self.nbytes - head))

    def records(self) -> list[Record]:
        """The rows as Records (no Arrow arrays built)."""
        return stored_records(self.batch, self.tp[0], self.tp[1], self.offset, self.timestamp_type)

    def output(self, schema: pa.Schema) -> pa.RecordBatch:
        """The rows as reader columns, in `schema`'s order (see fabric.common.records.output_schema)."""
        return to_output(self.batch, self.offset, self.tp[0], self.tp[1], self.timestamp_type, schema)


class FetchBuffer:
    """Fetched runs in the order they are to be handed out."""

    def __init__(self) -> None:
        self._runs: deque[FetchedRun] = deque()

    def __bool__(self) -> bool:
        return bool(self._runs)

    def extend(self, runs: list[FetchedRun]) -> None:
        self._runs.extend(runs)

    def take(self, limit: int) -> list[FetchedRun]:
        """Up to `limit` rows, oldest first (a run is split where the limit falls)."""
        out = []
        while self._runs and limit > 0:
            run = self._runs.popleft()
            if run.batch.num_rows > limit:
                run, rest = run.split(limit)
                self._runs.appendleft(rest)
            out.append(run)
            limit -= run.batch.num_rows
        return out

    def take_all(self) -> list[FetchedRun]:
        out = list(self._runs)
        self._runs.clear()
        return out

    def drop(self, unwanted: Callable[[TopicPartition], bool]) -> None:
        """Forget the runs of partitions no longer read."""
        kept = [run for run in self._runs if not unwanted(run.tp)]
        self._runs.clear()
        self._runs.extend(kept)

    def first_offsets(self) -> dict[TopicPartition, int]:
        """The first offset buffered of each partition that has runs here (where its consumed position is)."""
        out: dict[TopicPartition, int] = {}
        for run in self._runs:
            out.setdefault(run.tp, run.offset)
        return out
