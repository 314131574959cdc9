"""The on-disk batch frame: a 64-byte header, then one Arrow IPC message.

Layout (little-endian), documented byte by byte in the README:
    0  magic b"FBAT"        4   payload length u32      8  base offset i64
   16  leader epoch i32     20  CRC32C u32
   24  format version u8    25  attributes u8           26 reserved u16
   28  record count i32     32  first timestamp i64 (µs) 40 max timestamp i64 (µs)
   48  producer id i64      56  producer epoch i16      58 base sequence i32   62 reserved u16
Version 2 (what writers write) checksums bytes [24, 64 + payload length) and then bytes [4, 20): every field
but the magic and the CRC itself. The fields that change when a staged frame is re-based come last, so the
CRC is adjusted for a new base offset without reading the payload (CRC32C is linear). Version 1 (older
segments, still read) checksums bytes [24, 64 + payload length) only.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Any

import crc32c
import pyarrow as pa

from fabric.common.codecs import CODECS

MAGIC = b"FBAT"
VERSION = 2
READABLE_VERSIONS = (1, 2)
HEADER = struct.Struct("<4sIqiIBBHiqqqhih")
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 64
CRC_START = 24
REBASED_FIELDS = slice(4, 20)  # length, base offset, leader epoch: covered by the v2 CRC, last
_ZERO_FIELDS_CRC = crc32c.crc32c(bytes(REBASED_FIELDS.stop - REBASED_FIELDS.start))

ATTR_CODEC = 0x03  # the codec its batch's buffers are compressed with (fabric.common.codecs: 0 for none)
ATTR_LOG_APPEND_TIME = 0x04
ATTR_ABORT = 0x08  # on a control frame: the transaction it ends aborted (else it committed)
ATTR_TRANSACTIONAL = 0x10  # part of a producer's transaction: invisible to read_committed readers until it ends
ATTR_CONTROL = 0x20  # a transaction marker (one record, never delivered to readers)
ATTR_GAP = 0x40  # offsets the log cleaner removed: a header with no payload, never delivered (see gap_frame)
ATTR_SCHEMA = 0x80


@dataclass(frozen=True)
class FrameHeader:
    """The decoded header of one frame."""

    length: int
    base_offset: int
    record_count: int
    first_timestamp: int
    max_timestamp: int
    attributes: int = 0
    crc: int = 0
    leader_epoch: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    version: int = VERSION

    @property
    def size(self) -> int:
        """Bytes the whole frame takes on disk."""
        return HEADER_SIZE + self.length

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    @property
    def is_schema(self) -> bool:
        return bool(self.attributes & ATTR_SCHEMA)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_gap(self) -> bool:
        return bool(self.attributes & ATTR_GAP)

    @property
    def delivered(self) -> bool:
        """True if this frame's records go to readers: not a schema frame, a transaction marker or a gap."""
        return not self.attributes & (ATTR_SCHEMA | ATTR_CONTROL | ATTR_GAP)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    def pack(self) -> bytes:
        return HEADER.pack(MAGIC, self.length, self.base_offset, self.leader_epoch, self.crc, self.version,
                           self.attributes, 0, self.record_count, self.first_timestamp, self.max_timestamp,
                           self.producer_id, self.producer_epoch, self.base_sequence, 0)

    def rebased(self, base_offset: int) -> FrameHeader:
        """The same sealed frame at another base offset, its CRC still valid: a version 1 CRC leaves the base
        offset out; a version 2 CRC is adjusted by the change alone, without the payload."""
        moved = replace(self, base_offset=base_offset)
        if self.version == 1:
            return moved
        old, new = self.pack()[REBASED_FIELDS], moved.pack()[REBASED_FIELDS]
        delta = bytes(a ^ b for a, b in zip(old, new, strict=True))
        return replace(moved, crc=self.crc ^ crc32c.crc32c(delta) ^ _ZERO_FIELDS_CRC)


_FIELD_NAMES = frozenset(FrameHeader.__dataclass_fields__)


class FrameError(ValueError):
    """Bytes that are not a whole, valid frame."""


def unpack_header(data: bytes | memoryview | pa.Buffer, pos: int = 0) -> FrameHeader:
    """Decode the header at `pos`; raise FrameError if it is not one."""
    if len(data) - pos < HEADER_SIZE:
        raise FrameError("short header")
    fields = HEADER.unpack_from(data, pos)
    if fields[0] != MAGIC or fields[5] not in READABLE_VERSIONS or fields[8] < 0:
        raise FrameError("bad magic or version")
    return header_of(fields)


def header_of(fields: tuple[Any, ...]) -> FrameHeader:
    """The header whose HEADER.unpack fields are `fields`, their magic, version and count already checked."""
    (_magic, length, base, epoch, crc, version, attrs, _r, count, first_ts, max_ts, pid, pepoch, seq, _r2) = fields
    # (every walk of a segment makes one per frame: the frozen dataclass's __init__, field by field through
    # object.__setattr__, cost 2.2 µs of unpack_header's 2.8; its fields set at once, as _copy does, 0.6)
    header = object.__new__(FrameHeader)
    header.__dict__.update(length=length, base_offset=base, record_count=count, first_timestamp=first_ts,
                           max_timestamp=max_ts, attributes=attrs, crc=crc, leader_epoch=epoch, producer_id=pid,
                           producer_epoch=pepoch, base_sequence=seq, version=version)
    return header


def checksum(header_bytes: bytes | memoryview, payload: bytes | memoryview | pa.Buffer, version: int = VERSION) -> int:
    """The CRC32C a frame of `version` stores: of the header from byte 24 on and the payload, then (version 2)
    of header bytes 4 to 19."""
    crc = crc32c.crc32c(payload, crc32c.crc32c(header_bytes[CRC_START:HEADER_SIZE]))
    return crc if version == 1 else crc32c.crc32c(header_bytes[REBASED_FIELDS], crc)


def seal(header: FrameHeader, payload: pa.Buffer | bytes, base_offset: int | None = None, **fields: int
         ) -> FrameHeader:
    """The header for `payload` (at `base_offset`, default the header's; with the other `fields` given, e.g. a
    producer's) with its length and CRC filled in, as the current version; the frame is its pack() then payload."""
    base = header.base_offset if base_offset is None else base_offset
    sealed = _copy(header, length=len(payload), base_offset=base, crc=0, version=VERSION, **fields)
    sealed.__dict__["crc"] = checksum(sealed.pack(), payload)  # (made here, seen by no one yet)
    return sealed


def _copy(header: FrameHeader, **changes: int) -> FrameHeader:
    """dataclasses.replace(header, **changes) at a quarter of its cost (it is on every append's path): the header's
    fields copied, then `changes` (FrameHeader's __init__ checks nothing, so nothing is skipped)."""
    if not changes.keys() <= _FIELD_NAMES:
        raise TypeError(f"FrameHeader has no field {sorted(changes.keys() - _FIELD_NAMES)}")
    copied = object.__new__(FrameHeader)
    values = copied.__dict__
    values.update(header.__dict__)
    values.update(changes)
    return copied


def verify(data: bytes | memoryview | pa.Buffer, pos: int, header: FrameHeader) -> bool:
    """True if the frame at `pos` is whole and its CRC matches."""
    end = pos + header.size
    if end > len(data):
        return False
    view = memoryview(data)
    return checksum(view[pos:pos + HEADER_SIZE], view[pos + HEADER_SIZE:end], header.version) == header.crc


def encode_batch(batch: pa.RecordBatch, codec: str = "none") -> pa.Buffer:
    """One Arrow IPC record-batch message (no schema), buffers compressed with `codec`."""
    ipc_codec = CODECS[codec].ipc
    if ipc_codec is None:
        return batch.serialize()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema,
                           options=pa.ipc.IpcWriteOptions(compression=ipc_codec)) as writer:
        writer.write_batch(batch)
    reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
    reader.read_next_message()  # the schema message
    return reader.read_next_message().serialize()


def decode_batch(payload: pa.Buffer, schema: pa.Schema) -> pa.RecordBatch:
    """Zero-copy decode of one record-batch message against the segment's schema."""
    return pa.ipc.read_record_batch(payload, schema)


def encode_schema(schema: pa.Schema) -> pa.Buffer:
    return schema.serialize()


def schema_frame(schema: pa.Schema, base_offset: int = 0) -> tuple[FrameHeader, pa.Buffer]:
    """The sealed frame every segment starts with: `schema`, which its batches are encoded against."""
    payload = encode_schema(schema)
    return seal(FrameHeader(0, base_offset, 0, -1, -1, ATTR_SCHEMA), payload), payload


def gap_frame(base_offset: int, count: int, leader_epoch: int) -> FrameHeader:
    """The sealed frame that stands for `count` offsets from `base_offset` which compaction removed (written by
    the log cleaner in epoch `leader_epoch`'s frames): no payload, so a compacted segment stays contiguous,
    keeps every offset's value and is copied to followers like any other; readers skip it as they skip a marker."""
    return seal(FrameHeader(0, base_offset, count, -1, -1, ATTR_GAP, leader_epoch=leader_epoch), b"")


def decode_schema(payload: pa.Buffer) -> pa.Schema:
    return pa.ipc.read_schema(payload)


def split_frames(data: pa.Buffer) -> list[tuple[FrameHeader, pa.Buffer]]:
    """The (header, payload) of each frame in a buffer of whole frames laid end to end, CRC-checked."""
    out, pos = [], 0
    while pos < data.size:
        header = unpack_header(data, pos)
        if not verify(data, pos, header):
            raise FrameError(f"frame at byte {pos} is torn or fails its CRC check")
        out.append((header, data.slice(pos + HEADER_SIZE, header.length)))
        pos += header.size
    return out
