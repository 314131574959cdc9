"""Sparse offset/time indexes against brute-force models, and Log lookups across many segments."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric.common.errors import OffsetOutOfRangeError
from fabric.storage import batch_encoding, frame, mapcache
from fabric.storage.index import IndexOrderError, OffsetIndex, TimeIndex
from fabric.storage.index_builder import IndexBuilder
from fabric.storage.mapcache import MapCache
from fabric.storage.scan import Frame

# old (1970 / 2023) timestamps must not be rolled or expired by the 7-day defaults in these tests
KEEP = dict(retention_ms=-1, segment_ms=2**62)
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# -- OffsetIndex / TimeIndex units -----------------------------------------------------------------
def test_offset_index_floor_basics(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"))
    assert idx.floor(0) is None and idx.last() is None and len(idx) == 0
    for rel, pos in [(0, 100), (5, 300), (9, 700)]:
        idx.append(rel, pos)
    assert len(idx) == 3
    assert idx.floor(0) == (0, 100)
    assert idx.floor(4) == (0, 100)
    assert idx.floor(5) == (5, 300)
    assert idx.floor(8) == (5, 300)
    assert idx.floor(9) == (9, 700)
    assert idx.floor(10**6) == (9, 700)
    assert idx.last() == (9, 700)
    assert idx.is_consistent(701) and not idx.is_consistent(700)
    assert idx.count_below(300) == 1 and idx.count_below(301) == 2
    idx.truncate_entries(1)
    assert idx.floor(10**6) == (0, 100) and len(idx) == 1


def test_a_time_index_rewritten_at_its_size_and_inode_is_read_again(tmp_path):
    """A file replaced twice can get its first inode back at its first size: its time tells it changed, so the
    kept maximum timestamp is read again."""
    idx = TimeIndex(str(tmp_path / "a.timeindex"))
    for ts, rel in [(10, 0), (20, 3)]:
        idx.append(ts, rel)
    assert idx.max_timestamp() == 20
    before = os.stat(idx.path)
    with open(idx.path, "r+b") as f:  # the same inode and size, another last entry
        f.seek(TimeIndex.ENTRY.size)
        f.write(TimeIndex.ENTRY.pack(40, 3))
    os.utime(idx.path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert os.stat(idx.path).st_ino == before.st_ino and idx.max_timestamp() == 40


def test_time_index_first_at_or_after_basics(tmp_path):
    idx = TimeIndex(str(tmp_path / "a.timeindex"))
    assert idx.first_at_or_after(0) is None and idx.max_timestamp() is None
    for ts, rel in [(10, 0), (20, 3), (35, 7)]:
        idx.append(ts, rel)
    assert idx.first_at_or_after(-5) == 0
    assert idx.first_at_or_after(10) == 0
    assert idx.first_at_or_after(11) == 3
    assert idx.first_at_or_after(20) == 3
    assert idx.first_at_or_after(35) == 7
    assert idx.first_at_or_after(36) is None
    assert idx.max_timestamp() == 35
    assert idx.is_consistent(7) and not idx.is_consistent(6)
    assert idx.count_below(3) == 1 and idx.count_below(4) == 2
    idx.truncate_entries(2)  # a cut replaces the file: the kept maximum is read again
    assert idx.max_timestamp() == 20
    idx.append(25, 9)
    assert idx.max_timestamp() == 25
    idx.reset([(5, 0), (6, 1), (7, 2)])  # a rebuild: the same size, another file
    assert idx.max_timestamp() == 7
    idx.delete()
    assert idx.max_timestamp() is None


def test_index_with_torn_tail_ignores_partial_entry(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"))
    idx.append(0, 64)
    idx.append(4, 200)
    with open(idx.path, "ab") as f:
        f.write(b"\x01\x02\x03")  # a torn third entry
    assert len(idx) == 2 and idx.floor(100) == (4, 200)
    assert not idx.is_consistent(1000)  # the odd size is reported


@given(rels=st.lists(st.integers(0, 10_000), unique=True, max_size=60),
       probes=st.lists(st.integers(-5, 10_100), min_size=1, max_size=30))
@settings(max_examples=80, deadline=None)
def test_offset_index_floor_matches_model(rels, probes):
    rels = sorted(rels)
    with tempfile.TemporaryDirectory() as d:
        idx = OffsetIndex(os.path.join(d, "x.index"))
        positions = [64 + 10 * i + r for i, r in enumerate(rels)]  # strictly increasing
        for rel, pos in zip(rels, positions, strict=True):
            idx.append(rel, pos)
        for probe in probes:
            if probe < 0:
                continue  # relative offsets are never negative
            model = [(r, p) for r, p in zip(rels, positions, strict=True) if r <= probe]
            assert idx.floor(probe) == (model[-1] if model else None)
            assert idx.count_below(probe) == sum(p < probe for p in positions)


@given(stamps=st.lists(st.integers(-10**6, 10**15), max_size=60),
       probes=st.lists(st.integers(-10**6 - 5, 10**15 + 5), min_size=1, max_size=30))
@settings(max_examples=80, deadline=None)
def test_time_index_matches_model(stamps, probes):
    """Entries are written the way Segment.append does: only when a batch raises the max timestamp."""
    with tempfile.TemporaryDirectory() as d:
        idx = TimeIndex(os.path.join(d, "x.timeindex"))
        running = None
        for rel, ts in enumerate(stamps):
            if running is None or ts > running:
                idx.append(ts, rel)
                running = ts
        entries = [(ts, rel) for rel, ts in enumerate(stamps) if ts == max(stamps[:rel + 1])
                   and ts not in stamps[:rel]]
        with open(idx.path, "ab") as f:
            f.write(b"\x07" * 5)  # a torn entry after them, left out of every lookup
        assert idx.max_timestamp() == (entries[-1][0] if entries else None)
        for probe in probes:
            model = next((rel for rel, ts in enumerate(stamps) if ts >= probe), None)
            assert idx.first_at_or_after(probe) == model
            assert idx.entry_at_or_after(probe) == next(((ts, rel) for ts, rel in entries if ts >= probe), None)
            assert idx.count_below(max(probe, 0)) == sum(rel < max(probe, 0) for _, rel in entries)


# -- Log lookups across many segments --------------------------------------------------------------
def _build(storage, directory, sizes, stamps_for, **config):
    log = storage.open_log(directory, **config)
    expected = []  # (offset, value, ts)
    n = 0
    for size in sizes:
        values = [f"r{n + i}-{'x' * ((n + i) % 17)}".encode() for i in range(size)]
        stamps = stamps_for(n, size)
        base = log.append(storage.make_batch(values, stamps))
        assert base == n
        expected.extend((n + i, values[i], stamps[i]) for i in range(size))
        n += size
    assert log.end_offset == n
    return log, expected


@given(data=st.data())
@FAST
def test_log_read_from_any_offset(tmp_path_factory, storage, data):
    sizes = data.draw(st.lists(st.integers(0, 25), min_size=1, max_size=40), label="sizes")
    interval = data.draw(st.sampled_from([0, 100, 4096]), label="index.interval.bytes")
    directory = str(tmp_path_factory.mktemp("log"))
    base_ts = 1_700_000_000_000_000
    log, expected = _build(storage, directory, sizes, lambda n, k: [base_ts + n + i for i in range(k)],
                           segment_bytes=1024, index_interval_bytes=interval, **KEEP)
    total = len(expected)
    if total >= 60:
        assert len(log.segments()) > 1
    # a fresh Log object sees the same thing
    for reader in (log, storage.open_log(directory, segment_bytes=1024, **KEEP)):
        assert storage.read_all(reader) == expected
        for offset in sorted(set(data.draw(st.lists(st.integers(0, total), max_size=8), label="probes"))):
            assert storage.read_all(reader, offset) == expected[offset:]
            got = list(reader.read(offset, 1))  # at most about one batch, but never empty below the end
            if offset < total:
                assert got and got[0].offset == offset
                batch = got[0].batch
                assert batch.column(3).to_pylist() == [v for _, v, _ in expected[offset:offset + batch.num_rows]]
            else:
                assert got == []
    with pytest.raises(OffsetOutOfRangeError):
        list(log.read(total + 1, 1 << 20))


@given(data=st.data())
@FAST
def test_offset_for_time_matches_brute_force(tmp_path_factory, storage, data):
    sizes = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=30), label="sizes")
    total = sum(sizes)
    # non-monotonic CreateTime timestamps, with repeats
    stamps = data.draw(st.lists(st.integers(0, 200), min_size=total, max_size=total), label="stamps")
    directory = str(tmp_path_factory.mktemp("log"))
    log, expected = _build(storage, directory, sizes, lambda n, k: stamps[n:n + k], segment_bytes=1024,
                           index_interval_bytes=data.draw(st.sampled_from([0, 300]), label="interval"), **KEEP)
    if total >= 60:
        assert len(log.segments()) > 1
    fresh = storage.open_log(directory, segment_bytes=1024, **KEEP)
    for t in sorted({-1, 0, 200, 201, *stamps[:40], *data.draw(st.lists(st.integers(0, 201), max_size=40))}):
        model = next((o for o, _, ts in expected if ts >= t), None)
        assert log.offset_for_time(t) == model, t
        assert fresh.offset_for_time(t) == model, t


@given(data=st.data())
@FAST
def test_offset_for_time_from_a_log_start_inside_a_segment_matches_brute_force(tmp_path_factory, storage, data):
    """With the log start moved into a segment (DeleteRecords), the frame the time index names may lie below it:
    the lookup reads on from the start, to the record that reaches the time in that segment or a later one."""
    sizes = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=30), label="sizes")
    total = sum(sizes)
    stamps = data.draw(st.lists(st.integers(0, 200), min_size=total, max_size=total), label="stamps")
    log, expected = _build(storage, str(tmp_path_factory.mktemp("log")), sizes, lambda n, k: stamps[n:n + k],
                           segment_bytes=1024, index_interval_bytes=300, **KEEP)
    start = data.draw(st.integers(0, total), label="start")
    log.delete_records(start)
    for t in sorted({0, 201, *stamps[:40]}):
        assert log.offset_for_time(t) == next((o for o, _, ts in expected if o >= start and ts >= t), None), t


def test_offset_for_time_ignores_uncommitted_frames(tmp_path, storage):
    """A batch written but not yet committed (beyond the watermark) is invisible to time lookups too."""
    log = storage.open_log(str(tmp_path), **KEEP)
    log.append(storage.make_batch([b"a", b"b"], [10, 20]))
    with log.lock:
        # a publish in flight: two frames written, the watermark not yet advanced
        for base, (value, ts) in enumerate([(b"c", 30), (b"d", 99)], start=2):
            template, payload = batch_encoding.encode(storage.make_batch([value], [ts]))
            log.write_frame(frame.seal(template.rebased(base), payload), payload)
        assert log.end_offset == 2
        assert log.offset_for_time(15) == 1
        assert log.offset_for_time(50) is None
        assert storage.read_all(log) == [(0, b"a", 10), (1, b"b", 20)]


def test_index_entries_follow_interval(tmp_path, storage):
    log = storage.open_log(str(tmp_path), index_interval_bytes=0)
    for i in range(10):
        log.append(storage.make_batch([b"v%d" % i]))
    seg = log.segments()[-1]
    assert len(seg.index) == 10  # every batch indexed
    entries = seg.index.entries
    assert list(entries["rel"]) == list(range(10))
    assert np.all(np.diff(entries["pos"].astype(np.int64)) > 0)
    sparse = storage.open_log(str(tmp_path / "s"), index_interval_bytes=1 << 20)
    for i in range(10):
        sparse.append(storage.make_batch([b"v%d" % i]))
    assert len(sparse.segments()[-1].index) == 1
    assert storage.read_all(sparse, 7) == [(o, v, t) for o, v, t in storage.read_all(sparse) if o >= 7]


@pytest.mark.parametrize("index_class, entries, bad", [
    (OffsetIndex, [(0, 64), (5, 300)], [(5, 400), (6, 300), (4, 500), (6, 200)]),
    (TimeIndex, [(10, 0), (20, 5)], [(20, 6), (30, 5), (15, 9), (25, 4)]),
])
def test_index_appends_refuse_entries_that_do_not_increase(tmp_path, index_class, entries, bad):
    """Never a silent write: an entry that does not increase both keys would mislead every later lookup."""
    idx = index_class(str(tmp_path / "seg.index"))
    for entry in entries:
        idx.append(*entry)
    for entry in bad:
        with pytest.raises(IndexOrderError, match=f"refused index entry .* in {tmp_path}/seg.index"):
            idx.append(*entry)
    assert [tuple(int(v) for v in e) for e in idx.entries] == entries  # nothing was written


def test_appends_rebuilds_and_adoption_index_alike(tmp_path, storage):
    """One rule (IndexBuilder) makes the entries, whether a segment is appended to, rebuilt or adopted."""
    log = storage.open_log(str(tmp_path), index_interval_bytes=700, **KEEP)
    for i in range(30):
        log.append(storage.make_batch([b"x" * (i * 7 % 90)] * (1 + i % 3), [(i * 37) % 50] * (1 + i % 3)))
    seg = log.segments()[0]
    appended = (seg.index.entries.copy(), seg.timeindex.entries.copy())
    assert 1 < len(appended[0]) < 30 and 1 < len(appended[1]) < 30
    seg.rebuild_indexes(700)
    assert np.array_equal(seg.index.entries, appended[0]) and np.array_equal(seg.timeindex.entries, appended[1])
    builder = IndexBuilder(seg.base_offset, 700)
    for pos, header, _ in storage.scan_frames(seg.path):
        if not header.is_schema:
            builder.add(pos, header)
    assert builder.offsets == [tuple(int(v) for v in e) for e in appended[0]]
    assert builder.times == [tuple(int(v) for v in e) for e in appended[1]]


def test_maps_hold_no_file_descriptor_and_are_bounded(tmp_path):
    """Defect 7's mechanism: a map keeps no descriptor open, the cache keeps at most `capacity` maps, and a map
    follows its file when it grows, shrinks or is replaced."""
    cache = MapCache(capacity=8)
    paths = []
    for i in range(40):
        path = tmp_path / f"f{i}"
        path.write_bytes(b"x" * (i + 1))
        paths.append(str(path))
    open_before = len(os.listdir("/proc/self/fd"))
    held = [cache.get(p) for p in paths]
    assert len(os.listdir("/proc/self/fd")) == open_before
    assert len(cache) == 8 and [b.size for b in held] == list(range(1, 41))  # evicted maps stay readable
    path = tmp_path / "f39"
    with open(path, "ab") as f:
        f.write(b"y")
    assert cache.get(str(path)).to_pybytes() == b"x" * 40 + b"y"
    path.write_bytes(b"z" * 3)  # shrunk in place: never read past its end
    assert cache.get(str(path)).to_pybytes() == b"zzz"
    (tmp_path / "new").write_bytes(b"new")
    os.replace(tmp_path / "new", path)  # replaced by another file of the same size
    assert cache.get(str(path)).to_pybytes() == b"new"


def test_a_growing_file_is_read_through_the_map_it_had_until_it_outgrows_the_reserved_space(tmp_path):
    """A reader at the tail of a growing segment is not mapped again on every read: the map reserves room past
    the file's end, and each buffer stops at the file's size when it was looked at."""
    path = tmp_path / "seg"
    path.write_bytes(b"a" * 100)
    cache = MapCache()
    first = cache.get(str(path))
    with open(path, "ab") as f:
        f.write(b"b" * 50)
    grown = cache.get(str(path))
    assert grown.address == first.address and grown.size == 150 and first.size == 100
    assert grown.to_pybytes() == b"a" * 100 + b"b" * 50 and first.to_pybytes() == b"a" * 100
    with open(path, "ab") as f:
        f.write(b"c" * (2 * mapcache.RESERVE_MIN))  # past the reservation: a new map
    outgrown = cache.get(str(path))
    assert outgrown.address != first.address and outgrown.size == 150 + 2 * mapcache.RESERVE_MIN
    assert outgrown.slice(140, 20).to_pybytes() == b"b" * 10 + b"c" * 10
    os.truncate(path, 120)  # cut back (a follower truncating): the buffer stops at the new end
    assert cache.get(str(path)).to_pybytes() == b"a" * 100 + b"b" * 20


def test_an_append_outlives_a_reader_dropping_the_writers_index_state(tmp_path, storage):
    """A reader may look at a segment while it is appended to (its first read of the schema frame, a scrubber's
    repair: forget_writes, without the partition lock). An append that reaches its index update just after
    still indexes its frame, and the next append resumes the indexes from their files."""
    log = storage.open_log(str(tmp_path), index_interval_bytes=0)
    log.append(storage.make_batch([b"v0"]))
    seg = log.segments()[-1]
    builder = seg._builder
    assert builder is not None
    added = builder.add

    def add_then_dropped(*args):  # the reader's forget_writes, between the writer's two index steps
        added(*args)
        seg.forget_writes()
    builder.add = add_then_dropped
    log.append(storage.make_batch([b"v1"]))
    log.append(storage.make_batch([b"v2"]))
    assert list(seg.index.entries["rel"]) == [0, 1, 2]
    assert [v for _, v, _ in storage.read_all(log)] == [b"v0", b"v1", b"v2"]
    assert log.segments()[-1].data_start > 0 and seg._builder is not None  # a first read keeps the writer's state


def _frame_starts(seg) -> dict[int, int]:
    """{base offset: byte position} of a segment's data frames, from a walk of the whole file."""
    return {item.header.base_offset: item.position for item in seg.walk(seg.data_start, seg.base_offset)
            if isinstance(item, Frame)}


def test_a_read_at_the_tail_walks_from_the_newest_frame_seen_not_from_the_index_entry(tmp_path, storage):
    """A reader at the tail of a segment indexed sparsely starts at the frame it (or, in its process, the writer)
    saw last, instead of walking every frame since the index entry; a log cut back and written again with
    other frames is read right, the stale position checked and dropped."""
    directory = str(tmp_path)
    writer = storage.open_log(directory, index_interval_bytes=1 << 20, **KEEP)
    reader = storage.open_log(directory, index_interval_bytes=1 << 20, **KEEP)  # another process's view
    for i in range(10):
        writer.append(storage.make_batch([b"v%d" % i]))
    seg = writer.segments()[-1]
    starts = _frame_starts(seg)
    assert seg.start(9) == (seg.data_start, 0)  # the one index entry
    assert seg.nearer_start(seg.start(9), 9) == (starts[9], 9)  # the writer saw frame 9 appended
    assert [v for _, v, _ in storage.read_all(reader, 8)] == [b"v8", b"v9"]
    seen = reader.segments()[-1]
    assert seen.nearer_start(seen.start(9), 9) == (starts[9], 9)
    assert seen.nearer_start(seen.start(7), 7) == seen.start(7)  # before the frame seen: the index entry
    writer.append(storage.make_batch([b"v10"]))
    assert [v for _, v, _ in storage.read_all(reader, 10)] == [b"v10"]
    old = _frame_starts(seen)[10]
    assert seen.nearer_start(seen.start(10), 10) == (old, 10)

    assert writer.truncate_to(5)
    for i in range(5, 11):  # longer frames: the position the reader saw frame 10 at is inside another now
        writer.append(storage.make_batch([b"w%d-" % i + b"x" * 50]))
    assert [v for _, v, _ in storage.read_all(reader, 10)] == [b"w10-" + b"x" * 50]
    assert seen.nearer_start(seen.start(10), 10) == (_frame_starts(seen)[10], 10) != (old, 10)
