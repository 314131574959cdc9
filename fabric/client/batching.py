"""How a producer cuts what it sends into appends: records grouped by partition, each partition's run cut into
chunks of about batch_size bytes, none heavier than the topic's max.message.bytes (the largest batch a server
takes, fabric.common.record_sizes), and each record's offset found again from where its chunk landed."""
from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fabric.client.delivery import BatchMetadata
from fabric.common import record_sizes
from fabric.common.errors import InvalidRecordError, RecordTooLargeError


def check_topic_column(topic: str, table: pa.Table) -> None:
    """send_batch writes every row to its `topic`: a 'topic' column may only repeat it (or be null)."""
    if "topic" not in table.column_names:
        return
    column = table.column("topic")
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        if pc.all(pc.equal(column, topic)).as_py() is not False:
            return
    elif pa.types.is_null(column.type):
        return
    raise InvalidRecordError(
        f"send_batch({topic!r}, ...) writes every row to topic {topic!r}, but the table's 'topic' column names "
        "other topics; drop that column, or split the table by topic and send each part to its own topic")


def check_sizes(topic: str, rows: pa.Table, max_bytes: int) -> None:
    """RecordTooLargeError naming the first of the stored `rows` heavier than max.message.bytes: no append can
    carry it, so none of them is sent."""
    if not rows.num_rows:
        return
    sizes = record_sizes.record_sizes(rows.combine_chunks().to_batches()[0])
    over = np.flatnonzero(sizes > max_bytes)
    if len(over):
        raise RecordTooLargeError(
            f"row {over[0]} is {sizes[over[0]]} bytes, over max.message.bytes={max_bytes} of topic {topic!r}; "
            f"nothing from this batch was written: raise it with `fabric topics alter {topic} --config "
            "max.message.bytes=N` or send smaller records")


def chunks(rows: pa.Table | pa.RecordBatch, batch_size: int, max_bytes: int) -> list[pa.RecordBatch]:
    """Stored rows of one partition cut into record batches (one append and one frame each) of about
    `batch_size` bytes, none whose records weigh more than `max_bytes` (record_sizes.within)."""
    if rows.num_rows == 1 and isinstance(rows, pa.RecordBatch):  # (a send().get()'s: nothing to cut)
        return [rows]
    if record_sizes.fits(rows, batch_size * 2) or rows.nbytes <= batch_size * 2:
        pieces = [rows] if isinstance(rows, pa.RecordBatch) else rows.combine_chunks().to_batches()
    else:
        total = rows.nbytes
        step = max(1, rows.num_rows * batch_size // max(total, 1))
        pieces = [_batch(rows.slice(i, step)) for i in range(0, rows.num_rows, step)]
    return [chunk for piece in pieces for chunk in record_sizes.within(piece, max_bytes)]


def _batch(rows: pa.Table | pa.RecordBatch) -> pa.RecordBatch:
    return rows if isinstance(rows, pa.RecordBatch) else rows.combine_chunks().to_batches()[0]


def run(rows: pa.Table | pa.RecordBatch, lo: int, hi: int) -> pa.Table | pa.RecordBatch:
    """Rows [lo, hi) of `rows`: `rows` itself when that is all of them (one partition's, most often)."""
    return rows if lo == 0 and hi == rows.num_rows else rows.slice(lo, hi - lo)


def by_partition(rows: pa.Table | pa.RecordBatch, parts: np.ndarray
                 ) -> tuple[pa.Table | pa.RecordBatch, list[tuple[int, int, int]]]:
    """`rows` sorted (stably) by their partition `parts`, and the run (partition, lo, hi) of each partition."""
    if len(parts) == 1 or len(parts) and (parts == parts[0]).all():  # one partition (or null keys' sticky one)
        return rows, [(int(parts[0]), 0, len(parts))]
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    if len(order) and not (order[:-1] < order[1:]).all():
        rows = rows.take(pa.array(order))
    cuts = np.flatnonzero(np.diff(sorted_parts)) + 1
    bounds = [0, *cuts.tolist(), len(order)]
    return rows, [(int(sorted_parts[lo]), lo, hi) for lo, hi in itertools.pairwise(bounds) if lo != hi]


def record_offsets(parts: np.ndarray, metas: list[BatchMetadata]) -> np.ndarray:
    """Each record's offset, in send order, from where its partition's run landed (`metas`: its chunks, in
    partition order)."""
    if len(metas) == 1 and metas[0].count == len(parts):  # one partition, one chunk: in send order
        return np.arange(metas[0].offset, metas[0].offset + metas[0].count)
    offsets = np.empty(len(parts), np.int64)
    if metas:
        offsets[np.argsort(parts, kind="stable")] = np.concatenate(
            [np.arange(m.offset, m.offset + m.count) for m in metas])
    return offsets
