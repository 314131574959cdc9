"""What a stored record weighs against a topic's max.message.bytes (its key, value and headers), read straight
from the Arrow buffers, and the cutting of stored rows into batches within such a limit. One measure for every
party: the producer and the Spark sink cut their batches by it, the servers refuse a batch over the limit by it.

max.message.bytes bounds a record batch, as in Kafka: a batch (one append, one frame) whose records weigh more is
refused whole, so a record over the limit is refused too.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

RECORD_COLUMNS = ("key", "value", "headers")  # what max.message.bytes measures of a record


def batch_bytes(batch: pa.RecordBatch) -> int:
    """The bytes of all of the batch's records, from the columns' offset end points: no pass over the rows."""
    return sum(_extent(batch.column(name))[1] for name in RECORD_COLUMNS)


def fits(batch: pa.RecordBatch | pa.Table, limit: int) -> bool:
    """True if the batch's buffers, all of them, are within `limit` bytes: its records are, whatever they weigh
    (a bound read in O(columns), for the small batches that never come near max.message.bytes)."""
    return batch.get_total_buffer_size() <= limit


def record_bound(batch: pa.RecordBatch) -> int:
    """A bound on the bytes of any one record of the batch (read like batch_bytes): no record weighs more."""
    return sum(_extent(batch.column(name))[0] for name in RECORD_COLUMNS)


def record_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """The bytes of each record of the batch."""
    return sum((row_bytes(batch.column(name)) for name in RECORD_COLUMNS), np.zeros(batch.num_rows, np.int64))


def within(batch: pa.RecordBatch, limit: int) -> list[pa.RecordBatch]:
    """`batch` cut into consecutive slices whose records weigh at most `limit` bytes each (a record heavier than
    the limit alone in its slice); `[batch]` when it is within the limit already, [] when it has no rows."""
    if not batch.num_rows:
        return []
    if fits(batch, limit) or batch_bytes(batch) <= limit:
        return [batch]
    ends = np.cumsum(record_sizes(batch))
    slices, lo = [], 0
    while lo < batch.num_rows:
        before = int(ends[lo - 1]) if lo else 0
        hi = max(int(np.searchsorted(ends, before + limit, side="right")), lo + 1)
        slices.append(batch.slice(lo, hi - lo))
        lo = hi
    return slices


def _extent(array: pa.Array) -> tuple[int, int]:
    """(the most bytes one row can hold, the bytes of all rows) of an array, from its offsets' end points: no
    pass over the rows."""
    kind = array.type
    if not len(array):
        return 0, 0
    if _is_binary(kind):
        offsets = _offsets(array)
        total = int(offsets[-1] - offsets[0])
        return total, total
    if pa.types.is_struct(kind):
        parts = [_extent(array.field(i)) for i in range(kind.num_fields)]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = _offsets(array)
        total = _extent(array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))[1]
        return total, total
    try:
        width = max(kind.bit_width // 8, 1)
    except ValueError:  # no fixed width (maps, unions, ...): all of it
        return array.nbytes, array.nbytes
    return width, width * len(array)


def row_bytes(array: pa.Array) -> np.ndarray:
    """The bytes of each row of an array: lengths of binary data, widths of fixed-size values, sums over
    struct fields and list elements (an estimate by the average for other layouts)."""
    n = len(array)
    kind = array.type
    if not n:
        return np.zeros(0, np.int64)
    if _is_binary(kind):
        return np.diff(_offsets(array)).astype(np.int64)
    if pa.types.is_struct(kind):
        return sum((row_bytes(array.field(i)) for i in range(kind.num_fields)), np.zeros(n, np.int64))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = _offsets(array)
        if offsets[-1] == offsets[0]:  # no elements at all (e.g. every record without headers)
            return np.zeros(n, np.int64)
        inner = np.concatenate([[0], np.cumsum(row_bytes(array.values))])
        return (inner[offsets[1:]] - inner[offsets[:-1]]).astype(np.int64)
    try:
        return np.full(n, max(kind.bit_width // 8, 1), np.int64)
    except ValueError:  # no fixed width (maps, unions, ...): the average row
        return np.full(n, array.nbytes // n, np.int64)


def _is_binary(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_string(kind) or pa.types.is_large_binary(kind) \
        or pa.types.is_large_string(kind)


def _offsets(array: pa.Array) -> np.ndarray:
    """The n+1 offsets of a binary, string or list array, read from its offsets buffer (zero-copy)."""
    wide = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type) \
        or pa.types.is_large_list(array.type)
    offsets = np.frombuffer(array.buffers()[1], np.int64 if wide else np.int32)
    return offsets[array.offset:array.offset + len(array) + 1]
