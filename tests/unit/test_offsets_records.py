"""The offsets topic's record batches (fabric/coordinator/offsets_records.py), laid on their buffers by hand or made
from the IPC message of an earlier commit of the same shape: the same batch pyarrow's conversion of the rows' Python
values makes, tombstones and markers included; and the offsets cache, which takes an instance's own rows as it takes
records read back."""
from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from fabric.common.records import TIMESTAMP
from fabric.coordinator import offsets_records
from fabric.coordinator.offsets_records import (
    HEADERS_TYPE,
    LEADER_KEY,
    SCHEMA,
    VALUE_TYPE,
    batch,
    build,
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


SHAPES = st.lists(st.tuples(st.binary(min_size=1, max_size=30), st.text(max_size=40)), min_size=1, max_size=8)
NUMBERS = st.tuples(st.integers(0, 1 << 62), INT64, INT64)


@given(shape=SHAPES, first=st.lists(NUMBERS, min_size=8, max_size=8), second=st.lists(NUMBERS, min_size=8, max_size=8))
def test_commits_of_one_shape_made_from_its_template_are_the_batches_built_column_by_column(shape, first, second
                                                                                            ) -> None:
    """A second commit of the same keys and metadata is made from the first's IPC message, its numbers replaced:
    byte for byte the message of the batch built column by column, whichever numbers either holds."""
    for numbers in (first, second):
        rows = [(key, {"next_offset": offset, "metadata": text, "commit_ms": ms})
                for (key, text), (_, offset, ms) in zip(shape, numbers[:len(shape)], strict=True)]
        made, built = batch(rows, numbers[0][0]), build(rows, numbers[0][0])
        made.validate(full=True)
        assert made.equals(built)
        assert made.serialize().to_pybytes() == built.serialize().to_pybytes()


def test_a_shape_whose_marks_are_not_found_once_is_built_column_by_column(monkeypatch) -> None:
    class Repeating:  # every mark the same: each occurs three times, so none can be told apart
        def getrandbits(self, bits: int) -> int:
            return 12345

    monkeypatch.setattr(offsets_records, "_MARKS", Repeating())
    rows = [(b"never-seen-key", {"next_offset": 7, "metadata": "m", "commit_ms": 9})]
    assert offsets_records._template(((b"never-seen-key",), ("m",))) is None
    assert batch(rows, 5).equals(build(rows, 5))


def test_a_batch_of_a_marker_or_a_tombstone_is_built_and_no_message_made_for_it(monkeypatch) -> None:
    """batch() is for rows not written as they are made (a publish's part, a leader's marker): rows that are built
    get no IPC message (encoded() makes one, for the log)."""
    def no_message(made: pa.RecordBatch) -> pa.Buffer:
        raise AssertionError("an IPC message made for a batch() of built rows")
    monkeypatch.setattr(offsets_records.Encoded, "of", no_message)
    for rows in ([(LEADER_KEY, None)], [(offset_key("g", ("t", 0)), None)]):
        assert batch(rows, 5).equals(build(rows, 5))


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


@given(st.text(max_size=30), st.text(max_size=30), st.integers(0, (1 << 31) - 1))
def test_a_kept_offset_key_is_the_json_key_and_parses_back_to_its_parts(group, topic, partition) -> None:
    """offset_key and key_parts keep what they made (a consumer commits the same partitions again and again): the
    key is the compact JSON array records have always had, made again the same, and parsed back to its parts."""
    key = offset_key(group, (topic, partition))
    assert key == json.dumps(["offset", group, topic, partition], separators=(",", ":")).encode()
    assert offset_key(group, (topic, partition)) == key
    assert offsets_records.key_parts(key) == ("offset", group, topic, partition)
    assert offsets_records.key_parts(group_key(group)) == ("group", group)
