"""The offsets topic's record batches (fabric/coordinator/offsets_records.py), laid on their buffers by hand: the
same batch pyarrow's conversion of the rows' Python values makes, tombstones and markers included."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from fabric.common.records import TIMESTAMP
from fabric.coordinator.offsets_records import HEADERS_TYPE, SCHEMA, VALUE_TYPE, batch

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
VALUES = st.none() | st.fixed_dictionaries({"next_offset": INT64, "metadata": st.text(max_size=40),
                                             "commit_ms": INT64})
ROWS = st.lists(st.tuples(st.binary(min_size=1, max_size=30), VALUES), min_size=1, max_size=20)


@given(rows=ROWS, now_us=st.integers(0, 1 << 62))
def test_a_batch_is_what_converting_its_rows_makes(rows, now_us) -> None:
    made = batch(rows, now_us)
    made.validate(full=True)
    n = len(rows)
    expected = pa.RecordBatch.from_arrays(
        [pa.array([now_us] * n, TIMESTAMP), pa.array([k for k, _ in rows], pa.binary()), pa.nulls(n, HEADERS_TYPE),
         pa.array([v for _, v in rows], VALUE_TYPE)], schema=SCHEMA)
    assert made.equals(expected)
    assert made.column(3).to_pylist() == [v for _, v in rows]
