"""Shared helpers for the storage tests: build stored batches, open logs, read everything back."""
from __future__ import annotations

import os
import sys
import time

import pyarrow as pa

from fabric.config import TopicConfig
from fabric.records import TIMESTAMP, storage_schema
from fabric.storage import frame
from fabric.storage.log import Log
from fabric.storage.segment import DATA_SUFFIX

SCHEMA = storage_schema()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def now_us() -> int:
    return time.time_ns() // 1000


def make_batch(values: list[bytes], timestamps: list[int] | None = None) -> pa.RecordBatch:
    """A stored-rows batch of plain-topic records with the given values and µs timestamps."""
    n = len(values)
    if timestamps is None:
        timestamps = [now_us()] * n
    return pa.RecordBatch.from_arrays(
        [pa.array(timestamps, TIMESTAMP), pa.array([None] * n, pa.binary()),
         pa.nulls(n, SCHEMA.field("headers").type), pa.array(values, pa.binary())],
        schema=SCHEMA)


def open_log(directory: str, **config) -> Log:
    """A new Log object over `directory` (config given with Kafka names, '_' for '.')."""
    overrides = {k.replace("_", "."): v for k, v in config.items()}
    return Log(directory, SCHEMA, TopicConfig(overrides))


def read_all(log: Log, offset: int | None = None, max_bytes: int = 1 << 30) -> list[tuple[int, bytes, int]]:
    """(offset, value, timestamp µs) of every committed record from `offset` (default: log start)."""
    if offset is None:
        offset = log.start_offset
    out: list[tuple[int, bytes, int]] = []
    end = log.end_offset
    while offset < end:
        got = False
        for base, batch, _ in log.read(offset, max_bytes):
            values = batch.column(3).to_pylist()
            stamps = batch.column(0).cast(pa.int64()).to_pylist()
            out.extend((base + i, v, t) for i, (v, t) in enumerate(zip(values, stamps)))
            offset = base + batch.num_rows
            got = True
        if not got:
            raise AssertionError(f"read({offset}) returned nothing below the watermark {end}")
    return out


def data_files(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(DATA_SUFFIX))


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


def committed_frames(directory: str, hw: int) -> list[tuple[str, int, frame.FrameHeader, bool]]:
    """Every data frame holding offsets below `hw`, across all segments, in file order."""
    out = []
    for path in data_files(directory):
        for pos, header, ok in scan_frames(path):
            if header.is_schema or header.base_offset >= hw:
                continue
            out.append((path, pos, header, ok))
    return out




def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


PYTHON = sys.executable


def storage_cluster(root: str, partitions: int = 1, **config):
    """A real EmbeddedCluster in `root` with one plain topic 'events' (config: Kafka keys, '_' for '.')."""
    from fabric.embedded import EmbeddedCluster

    cluster = EmbeddedCluster(root)
    if "events" not in cluster.coordinator.list_topics():
        cluster.create_topic("events", partitions, {k.replace("_", "."): str(v) for k, v in config.items()}, None)
    return cluster
