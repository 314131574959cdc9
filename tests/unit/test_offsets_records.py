"""The offsets topic's record batches (fabric/coordinator/offsets_records.py), laid on their buffers by hand: the
same batch pyarrow's conversion of the rows' Python values makes, tombstones and markers included; and the
offsets cache, which takes an instance's own rows as it takes records read back."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from fabric.common.records import TIMESTAMP
from fabric.coordinator.offsets_records import (
    HEADERS_TYPE,
    LEADER_KEY,
    SCHEMA,
    VALUE_TYPE,
    batch,
    group_key,
    offset_key,
)
from fabric.coordinator.offsets_topic import _Cache

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


GROUPS, TOPICS = st.sampled_from(["g", "h"]), st.sampled_from(["t", "u"])
KEYS = st.one_of(st.builds(lambda g, t, p: offset_key(g, (t, p)), GROUPS, TOPICS, st.integers(0, 3)),
                 st.builds(group_key, GROUPS), st.just(LEADER_KEY))
COMMITS = st.lists(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6), min_size=1, max_size=8)


@given(appends=COMMITS)
def test_the_offsets_cache_takes_a_commits_rows_as_it_takes_their_records_read_back(appends) -> None:
    """An instance applies its own commits' rows without reading their records back (_Cache.apply_rows): the same
    offsets, tombstones and position as reading the records (_Cache.apply), group and leader records skipped."""
    from_rows, from_records = _Cache(), _Cache()
    offset = 0
    for rows in appends:
        from_rows.apply_rows(offset, rows)
        from_records.apply(offset, batch(rows, 0))
        offset += len(rows)
        assert (from_rows.groups, from_rows.position) == (from_records.groups, from_records.position)
    assert from_rows.position == offset
