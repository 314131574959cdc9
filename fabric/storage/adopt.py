"""Adopting a staged segment file: a publish makes a large file the Spark sink staged the partition's new
active segment by renaming it, instead of copying its frames.

Steps (lock held, under a pending-publish marker): re-seal the frames in place at their new base offsets (a
64-byte header write each: the version 2 CRC is adjusted for the new base without reading the payload), write
the indexes beside the file, drop an empty active segment, rename the file into the partition, then its
indexes. A crash at any step leaves a state recovery handles like a copied publish: a renamed segment whose
indexes did not follow gets them rebuilt; an uncommitted one is deleted as past the watermark.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pyarrow as pa

from fabric.common.errors import CorruptRecordError
from fabric.storage import frame
from fabric.storage.frame import FrameHeader
from fabric.storage.index import OffsetIndex, TimeIndex
from fabric.storage.index_builder import IndexBuilder
from fabric.storage.mapcache import MAPS
from fabric.storage.segment import INDEX_SUFFIX, TIME_SUFFIX, Segment

if TYPE_CHECKING:
    from fabric.storage.log import Log


def adopt_segment(plog: Log, path: str, frames: list[tuple[FrameHeader, pa.Buffer]], base_offset: int) -> bool:
    """Make the staged file `path` the active segment of `plog` at `base_offset`; `frames` are its verified
    frames (a schema frame, then data frames based from 0). False (nothing done) if it cannot be adopted: the
    active segment does not end exactly at `base_offset`, the file is too large for a segment, or its schema
    differs."""
    active = plog.sync_tail()
    schema_header, schema_payload = frames[0]
    tail = active.end(plog.indexes.start(active, 2**62))
    if (not schema_header.is_schema or base_offset != tail.expected or tail.position != active.size
            or os.path.getsize(path) >= min(plog.config["segment.bytes"], 1 << 32)
            or not frame.decode_schema(schema_payload).equals(plog.schema)):
        return False
    builder = IndexBuilder(0, plog.config["index.interval.bytes"])
    pos = 0
    fd = os.open(path, os.O_RDWR)
    try:
        for header, _ in frames:
            os.pwrite(fd, header.rebased(base_offset + header.base_offset).pack(), pos)
            if not header.is_schema:
                builder.add(pos, header)
            pos += header.size
        if pos != os.fstat(fd).st_size:
            raise CorruptRecordError(f"staged segment {path} has bytes after its last frame; stage it again")
    finally:
        os.close(fd)
    builder.write(OffsetIndex(path + INDEX_SUFFIX), TimeIndex(path + TIME_SUFFIX))
    if active.size == active.data_start:
        active.delete()
    seg = Segment(plog.directory, base_offset, plog.schema)
    for src, dst in ((path, seg.path), (path + INDEX_SUFFIX, seg.index.path), (path + TIME_SUFFIX, seg.timeindex.path)):
        MAPS.forget(dst)
        os.rename(src, dst)
    MAPS.forget(path)
    seg._indexes_checked = True
    plog.register(seg)
    plog.remember_tail(seg, plog.tail_end())
    plog.flushes.wrote(sum(h.record_count for h, _ in frames))
    return True
