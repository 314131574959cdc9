"""Fixtures both tiers share: an embedded fabric in a temp dir, `drain` (poll until records arrived), `running`
(a test's background thread, joined however the test ends), the storage kits (build stored batches, open logs,
read them back, stage segment files, replicate raw frames) and the Jepsen-style history of producers and
consumers with its checker (`history`, `histories`).

Test modules get every helper through a fixture of this file or of tests/unit/conftest.py or
tests/integration/conftest.py; they import nothing from tests/ (there is no tests package).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import pyarrow as pa
import pytest
from hypothesis import settings

# Spark's Python workers fail to connect back in sandboxes unless these are set (see README).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The tests' Spark JVMs (drivers, through spark-submit; executors and daemons, tests/spark_cluster.py) live for
# seconds and spend more CPU compiling than running: C1 alone and the serial collector cut a job's CPU by about a
# third on the 2-core machine (test_jobs: 102 s of user CPU against 65 s). Users' jobs keep the JVM's defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# Property and fuzz tests draw the same examples on every run (`make test` and CI), so a failure is a change of
# behaviour and not the luck of the draw; HYPOTHESIS_PROFILE=explore draws new ones to look for more. No example
# has a deadline: a first example that pays for an import (pyarrow's first conversion of Python values imports
# pandas: a quarter of a second) or runs beside a CPU-heavy job would fail on time alone.
settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

import fabric  # noqa: E402
from fabric.common.config import TopicConfig  # noqa: E402
from fabric.common.records import TIMESTAMP, storage_schema  # noqa: E402
from fabric.storage import clean_end, frame, producer_snapshot, truncation  # noqa: E402
from fabric.storage.log import Log  # noqa: E402
from fabric.storage.segment import DATA_SUFFIX  # noqa: E402
from fabric.storage.transactions import TransactionState  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked spark, then those marked slow, run first (a stable sort): `make test` hands the xdist
    workers whole files in this order, so the long ones start early and the short ones fill the end."""
    def weight(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("spark") else 1 if item.get_closest_marker("slow") else 2
    items.sort(key=weight)


@pytest.fixture(scope="session")
def repo_root() -> str:
    """The checkout this test suite belongs to."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fabric_dir(tmp_path) -> str:
    """A fresh directory for an embedded fabric."""
    path = tmp_path / "fabric"
    path.mkdir()
    return str(path)


@pytest.fixture
def fabric_url(fabric_dir: str) -> str:
    return f"file://{fabric_dir}"


@pytest.fixture
def fab(fabric_url: str):
    """A connected embedded fabric, closed after the test."""
    with fabric.connect(fabric_url) as handle:
        yield handle


def _drain(consumer, expected: int, timeout: float = 30.0) -> list:
    """Poll until `expected` records arrived; fail naming the shortfall after `timeout` seconds."""
    records, deadline = [], time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll(0.2)
    assert len(records) == expected, f"got {len(records)} of {expected} records within {timeout} s"
    return records


@pytest.fixture
def drain() -> Callable[..., list]:
    """drain(consumer, expected, timeout=30.0): poll until `expected` records arrived, fail naming the
    shortfall after `timeout` seconds; returns the records."""
    return _drain


@pytest.fixture
def count_calls(monkeypatch) -> Callable[[object, str], Callable[[], int]]:
    """count_calls(owner, method): count the calls of `owner`'s `method` from now on (it still runs); returns a
    function giving the count so far."""
    def count(owner: object, method: str) -> Callable[[], int]:
        calls = [0]
        real = getattr(owner, method)

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, method, counted)
        return lambda: calls[0]
    return count


@contextlib.contextmanager
def _running(thread: Any) -> Iterator[Any]:
    """`thread` started for the block and, however the block ends, halted (its `halt` event set) and joined."""
    thread.start()
    try:
        yield thread
    finally:
        thread.halt.set()
        thread.join()


@pytest.fixture(scope="session")
def running() -> Callable[[Any], contextlib.AbstractContextManager[Any]]:
    """running(thread) → a context manager: the thread (which ends soon after its `halt` event is set) started
    for the block, halted and joined on the way out, also when the test fails, so no thread outlives its test."""
    return _running


# -- storage -------------------------------------------------------------------------------------------------
class StorageKit:
    """Helpers of the storage tests: stored batches, Log objects, reading back, frames on disk."""

    SCHEMA = storage_schema()
    # small, fixed or old (1970 / 2023) timestamps must not be rolled or expired by the 7-day defaults
    KEEP = dict(retention_ms=-1, segment_ms=2**62)
    # make_batch (values only) and open_log for a child process's script, which imports only the installed package
    CHILD_PRELUDE = r"""
import time
import pyarrow as pa
from fabric.common.config import TopicConfig
from fabric.common.records import TIMESTAMP, storage_schema
from fabric.storage.log import Log
SCHEMA = storage_schema()

def make_batch(values):
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [pa.array([time.time_ns() // 1000] * n, TIMESTAMP), pa.array([None] * n, pa.binary()),
         pa.nulls(n, SCHEMA.field("headers").type), pa.array(values, pa.binary())], schema=SCHEMA)

def open_log(directory, **config):
    return Log(directory, SCHEMA, TopicConfig({k.replace("_", "."): v for k, v in config.items()}))
"""

    @staticmethod
    def now_us() -> int:
        return time.time_ns() // 1000

    def make_batch(self, values: list[bytes], timestamps: list[int] | None = None,
                   keys: list[bytes] | None = None) -> pa.RecordBatch:
        """A stored-rows batch of plain-topic records with the given values, µs timestamps and keys (none)."""
        n = len(values)
        if timestamps is None:
            timestamps = [self.now_us()] * n
        return pa.RecordBatch.from_arrays(
            [pa.array(timestamps, TIMESTAMP), pa.array(keys or [None] * n, pa.binary()),
             pa.nulls(n, self.SCHEMA.field("headers").type), pa.array(values, pa.binary())],
            schema=self.SCHEMA)

    def open_log(self, directory: str, **config) -> Log:
        """A new Log object over `directory` (config given with Kafka names, '_' for '.')."""
        overrides = {k.replace("_", "."): v for k, v in config.items()}
        return Log(directory, self.SCHEMA, TopicConfig(overrides))

    @staticmethod
    def read_all(log: Log, offset: int | None = None, max_bytes: int = 1 << 30) -> list[tuple[int, bytes, int]]:
        """(offset, value, timestamp µs) of every committed record from `offset` (default: log start)."""
        if offset is None:
            offset = log.start_offset
        out: list[tuple[int, bytes, int]] = []
        end = log.end_offset
        while offset < end:
            got = False
            for fetched in log.read(offset, max_bytes):
                values = fetched.batch.column(3).to_pylist()
                stamps = fetched.batch.column(0).cast(pa.int64()).to_pylist()
                out.extend((fetched.offset + i, v, t) for i, (v, t) in enumerate(zip(values, stamps, strict=True)))
                offset = fetched.offset + fetched.batch.num_rows
                got = True
            if not got:
                raise AssertionError(f"read({offset}) returned nothing below the watermark {end}")
        return out

    @staticmethod
    def keyed_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) of every record a reader gets from the log start (compaction's gaps skipped)."""
        out: list[tuple[int, bytes | None, bytes | None]] = []
        offset, end = log.start_offset, log.end_offset
        while offset < end:
            fetched = log.fetch(offset, 1 << 20)
            assert fetched, f"no progress at offset {offset}"
            for f in fetched:
                keys, values = f.batch.column(1).to_pylist(), f.batch.column(3).to_pylist()
                out += [(f.offset + i, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
            offset = fetched[-1].offset + fetched[-1].batch.num_rows
        return out

    @staticmethod
    def data_files(directory: str) -> list[str]:
        return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(DATA_SUFFIX))

    @staticmethod
    def scan_frames(path: str, limit: int | None = None) -> list[tuple[int, frame.FrameHeader, bool]]:
        """(position, header, crc ok) of every parseable frame in a data file, up to byte `limit`."""
        with open(path, "rb") as f:
            data = f.read()
        if limit is not None:
            data = data[:limit]
        out, pos = [], 0
        while pos + frame.HEADER_SIZE <= len(data):
            try:
                header = frame.unpack_header(data, pos)
            except frame.FrameError:
                break
            if pos + header.size > len(data):
                break
            out.append((pos, header, frame.verify(data, pos, header)))
            pos += header.size
        return out

    def committed_frames(self, directory: str, hw: int) -> list[tuple[str, int, frame.FrameHeader, bool]]:
        """Every data frame holding offsets below `hw`, across all segments, in file order."""
        out = []
        for path in self.data_files(directory):
            for pos, header, ok in self.scan_frames(path):
                if header.is_schema or header.base_offset >= hw:
                    continue
                out.append((path, pos, header, ok))
        return out

    def __init__(self) -> None:
        self.opened: list[Any] = []  # the clusters `cluster` made, closed after their test

    def cluster(self, root: str, partitions: int = 1, **config):
        """A real EmbeddedCluster in `root` with one plain topic 'events' (config: Kafka keys, '_' for '.'), closed
        after the test (close_clusters)."""
        from fabric.client.embedded import EmbeddedCluster

        cluster = EmbeddedCluster(root)
        self.opened.append(cluster)
        if "events" not in cluster.coordinator.list_topics():
            cluster.create_topic("events", partitions, {k.replace("_", "."): str(v) for k, v in config.items()},
                                 None)
        return cluster

    def close_clusters(self) -> None:
        """Close the clusters made since the last call: their background work must not run on into the next test
        of the worker."""
        while self.opened:
            self.opened.pop().close()

    def fill(self, log: Log, batches: int, start: int = 0, width: int = 3) -> list[tuple[int, bytes, int]]:
        """Append `batches` batches of 1..`width` records with small timestamps; the expected read_all()."""
        expected = []
        n = log.end_offset
        for b in range(batches):
            values = [f"b{start + b}-{i}".encode() for i in range(1 + (b % width))]
            stamps = [1_000 + n + i for i in range(len(values))]
            assert log.append(self.make_batch(values, stamps)) == n
            expected.extend((n + i, v, s) for i, (v, s) in enumerate(zip(values, stamps, strict=True)))
            n += len(values)
        return expected

    def assert_clean(self, directory: str, hw: int) -> None:
        """Every frame on disk is whole and CRC-valid, and the segment files end exactly at a frame boundary."""
        for path in self.data_files(directory):
            frames = self.scan_frames(path)
            assert frames and frames[0][1].is_schema
            assert all(ok for _, _, ok in frames), path
            last_pos, last, _ = frames[-1]
            assert last_pos + last.size == os.path.getsize(path), f"trailing bytes in {path}"
        offsets = [h.next_offset for _, _, h, _ in self.committed_frames(directory, hw)]
        assert not offsets or offsets[-1] == hw

    @staticmethod
    def assert_transactions_agree(plog: Log) -> None:
        """The log's transaction state (kept as it appends, caught up or rebuilt) is what its frame headers give,
        walked from the first: the open transactions, the aborted ranges, each transactional frame's fate."""
        expected, got = TransactionState(plog.name), plog.transactions
        for header in plog.headers(plog.end_offset):
            expected.update(header)
        assert got.open_transactions() == expected.open_transactions()
        assert got.aborted_count() == expected.aborted_count()
        for header in plog.headers(plog.end_offset):
            if header.is_transactional:
                assert got.aborted(header) == expected.aborted(header), header


@pytest.fixture(scope="session")
def storage() -> StorageKit:
    """The storage tests' helpers (make_batch, open_log, read_all, scan_frames, cluster, fill, ...)."""
    return StorageKit()


@pytest.fixture(autouse=True)
def _cli_log_handlers_dropped() -> Iterator[None]:
    """The stderr handler an in-process `fabric` command gave the root logger (fabric.common.logs.configure) goes
    with its test: it writes to that test's captured stderr, which pytest closes, so a later log record (from a
    thread another test left) would print a logging error into whatever test runs then."""
    before = list(logging.getLogger().handlers)
    yield
    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler not in before:
            root.removeHandler(handler)


@pytest.fixture(autouse=True)
def _storage_clusters_closed(storage: StorageKit) -> Iterator[None]:
    """Every cluster a test made with storage.cluster() is closed after it."""
    yield
    storage.close_clusters()


class ReplicaKit:
    """Helpers of the replication storage tests: replica-mode logs, leaders appending in an epoch, followers
    copying raw frames, the KIP-101/KIP-279 truncation a follower does, and a partition's files as bytes."""

    # one or two frames per segment, an index entry per frame: rolls and index entries on every path
    CONFIG = dict(segment_bytes=1500, index_interval_bytes=300, retention_ms=-1, segment_ms=2**62)

    def __init__(self, storage: StorageKit) -> None:
        self.storage = storage

    def open(self, directory: str, recent_bytes: int = 0, **config) -> Log:
        """A replica-mode Log over `directory` (CONFIG, overridden by `config`, Kafka names with '_'), keeping up
        to `recent_bytes` of the frames it writes in memory as a node's does (none by default)."""
        overrides = {k.replace("_", "."): v for k, v in {**self.CONFIG, **config}.items()}
        return Log(directory, self.storage.SCHEMA, TopicConfig(overrides), replica=True, recent_bytes=recent_bytes)

    def lead(self, log: Log, epoch: int, batches: int, tag: str = "") -> list[int]:
        """Append `batches` batches of 1..3 records as the leader of `epoch`; their base offsets."""
        bases = []
        for b in range(batches):
            values = [f"{tag}e{epoch}-b{b}-{i}".encode() * 8 for i in range(1 + b % 3)]
            bases.append(log.append(self.storage.make_batch(values, [1_000 + b] * len(values)), leader_epoch=epoch))
        return bases

    @staticmethod
    def copy(leader: Log, follower: Log, upto: int | None = None, max_bytes: int = 700) -> int:
        """Copy the leader's frames from the follower's log end up to offset `upto` (default: the leader's end),
        as a follower's fetcher does; the follower's new log end."""
        end = leader.end_offset if upto is None else upto
        while follower.end_offset < end:
            raw = leader.read_frames(follower.end_offset, max_bytes, end)
            assert raw.size, f"the leader served nothing from offset {follower.end_offset} below {end}"
            follower.append_frames(raw)
        return follower.end_offset

    @staticmethod
    def reconcile(follower: Log, leader: Log) -> int:
        """Truncate the follower where its log diverges from the leader's (truncation.reconcile, the fetcher's
        rounds of OffsetsForLeaderEpoch); returns the follower's end offset after."""
        return truncation.reconcile(follower,
                                    lambda epoch: leader.leader_epochs.end_offset_for(epoch, leader.end_offset))

    def follow(self, follower: Log, leader: Log, upto: int | None = None) -> int:
        """Reconcile the follower with the leader, then copy up to `upto`."""
        self.reconcile(follower, leader)
        return self.copy(leader, follower, upto)

    @staticmethod
    def files(directory: str) -> dict[str, bytes]:
        """Every file of a partition directory but its lock, its producer state snapshot and its clean end (what
        each replica's process writes for itself), by name, as bytes."""
        out = {}
        for name in sorted(os.listdir(directory)):
            if name not in (".lock", producer_snapshot.FILE, clean_end.FILE):
                with open(os.path.join(directory, name), "rb") as f:
                    out[name] = f.read()
        return out


@pytest.fixture(scope="session")
def replicas(storage: StorageKit) -> ReplicaKit:
    """The replication storage tests' helpers (open, lead, copy, reconcile, follow, files)."""
    return ReplicaKit(storage)


class AdoptionKit:
    """Staged segment files as the Spark sink writes them, for the adopting-publish tests: partition 0 of
    'events' holds 5 records, and a publish stages two large files for partition 0 and a large and a small one
    for partition 1 (files of at least ADOPT bytes are adopted, smaller ones copied)."""

    ADOPT = 20_000
    SHAPES = {("events", 0): [[("a", 100), ("a2", 150)], [("b", 300)]], ("events", 1): [[("c", 200)], [("d", 3)]]}

    def __init__(self, storage: StorageKit) -> None:
        self.storage = storage

    @staticmethod
    def values(tag: str, count: int) -> list[bytes]:
        return [f"{tag}-{i}".encode().ljust(100, b".") for i in range(count)]

    def stage(self, cluster, name: str, frames: list[list[bytes]]) -> tuple[str, list[bytes]]:
        """A staged segment file as the Spark sink writes it: the schema frame, then frames based from 0."""
        directory = os.path.join(cluster.root, "__fabric", "staging", "test")
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name)
        records = 0
        with open(path, "wb") as f:
            encoder = cluster.frame_encoder("events")
            f.write(encoder.schema_frame())
            for values in frames:
                header, payload = encoder.encode(self.storage.make_batch(values, [1_000 + records] * len(values)),
                                                 records)
                f.write(header)
                f.write(payload)
                records += len(values)
        return path, [v for values in frames for v in values]

    def stage_all(self, cluster, suffix: str = "") -> dict:
        """The staged files of one publish, by partition."""
        return {key: [self.stage(cluster, f"p{key[1]}-{i}{suffix}.segment", [self.values(t, n) for t, n in shape])[0]
                      for i, shape in enumerate(shapes)] for key, shapes in self.SHAPES.items()}

    def setup(self, root: str):
        """Partition 0 holds 5 records (a non-empty active segment), partition 1 none; the staged files.
        Returns (cluster, staged files by partition, expected values by partition number)."""
        cluster = self.storage.cluster(root, partitions=2, **StorageKit.KEEP)
        cluster.append("events", 0, self.storage.make_batch(self.values("old", 5), [500] * 5))
        parts = self.stage_all(cluster)
        sizes = [os.path.getsize(p) for paths in parts.values() for p in paths]
        assert min(sizes[:3]) >= self.ADOPT > sizes[3]
        expected = {p: [v for shape in self.SHAPES[("events", p)] for t, n in shape for v in self.values(t, n)]
                    for p in (0, 1)}
        expected[0] = self.values("old", 5) + expected[0]
        return cluster, parts, expected

    def values_of(self, cluster, partition: int) -> list[bytes]:
        return [v for _, v, _ in self.storage.read_all(cluster.log("events", partition))]

    def assert_whole(self, directory: str) -> None:
        """Every segment is a schema frame then whole, CRC-valid frames whose base offsets run on from its name."""
        for name in sorted(n for n in os.listdir(directory) if n.endswith(DATA_SUFFIX)):
            frames = self.storage.scan_frames(os.path.join(directory, name))
            assert frames[0][1].is_schema and all(ok for _, _, ok in frames)
            assert frames[0][1].base_offset == int(name[:-len(DATA_SUFFIX)])
            assert sum(h.size for _, h, _ in frames) == os.path.getsize(os.path.join(directory, name))


@pytest.fixture(scope="session")
def adoption(storage: StorageKit) -> AdoptionKit:
    """The adopting-publish tests' helpers (setup, stage_all, values, values_of, assert_whole, ADOPT)."""
    return AdoptionKit(storage)


# -- histories of producers and consumers, and their checker ---------------------------------------------------
@functools.cache
def _plain_module(name: str) -> ModuleType:
    """A plain module of tests/ loaded by its path (tests/ is no package and nothing puts it on sys.path), once
    per run."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"fabric_tests_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class History:
    """The history of one test's producers and consumers: one JSON-lines file per process in `directory`.

    In this process: `recorder(name)` → a Recorder (tests/history_recorder.py: invoke/ok/fail/info for sends,
    poll/seek for consumers, read for final reads). Child scripts, which import nothing from tests/, begin with
    `child_prelude` (the recorder module's source) and make their own `Recorder(directory, name)`.
    `check(dense=False)` merges every file and checks the whole (tests/history_checker.py)."""

    def __init__(self, tools: HistoryTools, directory: str) -> None:
        self.tools, self.directory = tools, directory
        self.child_prelude = tools.recorder_source

    def recorder(self, process: str) -> Any:
        return self.tools.Recorder(self.directory, process)

    def ops(self) -> list[dict[str, Any]]:
        return self.tools.load(self.directory) if os.path.isdir(self.directory) else []

    def check(self, dense: bool = False) -> Any:
        """The HistoryResult of everything recorded so far: `.assert_valid()` fails with its summary."""
        return self.tools.check(self.ops(), dense)


class HistoryTools:
    """The recorder and the checker as modules (history_recorder.py, history_checker.py, plain files of tests/):
    `Recorder`, `load`, `check`, `recorder_source` for child scripts, and the modules themselves (`recording`,
    `checking`: HistoryResult and the anomaly classes)."""

    def __init__(self) -> None:
        self.recording, self.checking = _plain_module("history_recorder"), _plain_module("history_checker")
        self.recorder_source = Path(self.recording.__file__).read_text()
        self.Recorder, self.load, self.check = self.recording.Recorder, self.recording.load, self.checking.check

    def at(self, directory: str) -> History:
        return History(self, directory)


@pytest.fixture(scope="session")
def histories() -> HistoryTools:
    """The history tools: Recorder(directory or None, process), load(directory), check(ops, dense=False) →
    HistoryResult, and at(directory) → a History."""
    return HistoryTools()


@pytest.fixture
def history(histories: HistoryTools, tmp_path) -> History:
    """The test's History in tmp_path/history: recorder(name), child_prelude, ops(), check(dense=False)."""
    return histories.at(str(tmp_path / "history"))


@pytest.fixture(scope="session")
def plain_module() -> Callable[[str], ModuleType]:
    """plain_module(name) → tests/<name>.py loaded by its path, once per run: how a tier's conftest exposes a kit
    kept in a plain module of tests/ (tests/integration/conftest.py's `replication`: tests/replication_kit.py)."""
    return _plain_module


@pytest.fixture(scope="session")
def flaky_cluster() -> type:
    """The FlakyCluster class (tests/flaky_cluster.py): FlakyCluster(a real cluster), whose append and fetch
    fail on demand with .fail(method, times, error, after=False, then=...), counting .calls."""
    return _plain_module("flaky_cluster").FlakyCluster
