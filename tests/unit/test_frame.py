"""The frame codec (fabric.storage.frame): the 64-byte header packed and unpacked, sealing with a CRC32C and
verifying it, record batches and schemas encoded as Arrow IPC payloads, and splitting a buffer of frames."""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.storage import batch_encoding, frame

HEADER = frame.FrameHeader(length=0, base_offset=1_234_567_890_123, record_count=42,
                           first_timestamp=1_700_000_000_000_000, max_timestamp=1_700_000_000_999_999,
                           attributes=frame.ATTR_LOG_APPEND_TIME, leader_epoch=7, producer_id=99,
                           producer_epoch=3, base_sequence=1000)


def sealed_frame(storage, values: list[bytes], base_offset: int = 0, codec: str = "none") -> bytes:
    """The bytes of one data frame holding `values` (stored rows), sealed at `base_offset`."""
    batch = storage.make_batch(values, [1_000 + i for i in range(len(values))])
    payload = frame.encode_batch(batch, codec)
    header = frame.seal(frame.FrameHeader(0, base_offset, batch.num_rows, 1_000, 1_000 + len(values) - 1), payload)
    return header.pack() + payload.to_pybytes()


def flipped(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1:]


# -- the header ----------------------------------------------------------------------------------------------
def test_header_packs_to_64_bytes_and_unpacks_to_the_same_fields():
    packed = HEADER.pack()
    assert len(packed) == frame.HEADER_SIZE == 64
    assert packed[:4] == frame.MAGIC
    assert frame.unpack_header(packed) == HEADER
    assert frame.unpack_header(b"junk" + packed + b"tail", 4) == HEADER  # at any position in a buffer


def test_header_layout_is_the_documented_one():
    packed = frame.seal(HEADER, b"0123456789").pack()
    assert int.from_bytes(packed[4:8], "little") == 10  # payload length
    assert int.from_bytes(packed[8:16], "little") == HEADER.base_offset
    assert int.from_bytes(packed[16:20], "little") == HEADER.leader_epoch
    assert packed[24] == frame.VERSION and packed[25] == HEADER.attributes
    assert int.from_bytes(packed[28:32], "little") == HEADER.record_count
    assert int.from_bytes(packed[40:48], "little") == HEADER.max_timestamp


def test_header_properties():
    header = frame.seal(HEADER, b"x" * 100)
    assert header.size == frame.HEADER_SIZE + 100
    assert header.next_offset == HEADER.base_offset + 42
    assert not header.is_schema
    assert frame.FrameHeader(0, 0, 0, -1, -1, frame.ATTR_SCHEMA).is_schema


@pytest.mark.parametrize("data, why", [
    (b"", "empty"),
    (frame.MAGIC + bytes(10), "shorter than a header"),
    (HEADER.pack()[:frame.HEADER_SIZE - 1], "one byte short"),
])
def test_a_short_header_raises_frame_error(data, why):
    with pytest.raises(frame.FrameError, match="short header"):
        frame.unpack_header(data)


def test_a_short_header_at_the_end_of_a_buffer_raises_frame_error():
    data = HEADER.pack() * 2
    assert frame.unpack_header(data, frame.HEADER_SIZE) == HEADER
    with pytest.raises(frame.FrameError, match="short header"):
        frame.unpack_header(data, frame.HEADER_SIZE + 1)


@pytest.mark.parametrize("garble", [
    lambda b: b"XBAT" + b[4:],  # wrong magic
    lambda b: bytes(len(b)),  # zeros
    lambda b: b[:24] + bytes([frame.VERSION + 1]) + b[25:],  # unknown format version
    lambda b: b[:28] + (-1).to_bytes(4, "little", signed=True) + b[32:],  # negative record count
], ids=["magic", "zeros", "version", "count"])
def test_a_garbled_header_raises_frame_error(garble):
    data = garble(HEADER.pack())
    assert len(data) == frame.HEADER_SIZE
    with pytest.raises(frame.FrameError, match="bad magic or version"):
        frame.unpack_header(data)


# -- sealing and the CRC ---------------------------------------------------------------------------------------
def test_seal_fills_length_and_crc_and_verify_accepts_the_frame():
    payload = b"some payload bytes"
    sealed = frame.seal(HEADER, payload)
    assert sealed.length == len(payload) and sealed.crc != 0
    assert sealed == frame.seal(sealed, payload)  # sealing again gives the same CRC
    data = sealed.pack() + payload
    assert frame.verify(data, 0, frame.unpack_header(data))
    assert frame.verify(b"prefix" + data, 6, sealed)


@pytest.mark.parametrize("position", [frame.HEADER_SIZE, frame.HEADER_SIZE + 9, 24, 28, 32, 40, 48, 56, 58])
def test_a_crc_mismatch_is_detected(position):
    """A flipped byte anywhere in the payload or in the CRC-covered header fields (byte 24 on) fails the check."""
    payload = b"0123456789abcdef"
    sealed = frame.seal(HEADER, payload)
    damaged = flipped(sealed.pack() + payload, position)
    assert not frame.verify(damaged, 0, sealed)
    if position >= frame.HEADER_SIZE:  # the header itself still parses: only the CRC tells
        assert not frame.verify(damaged, 0, frame.unpack_header(damaged))


def test_a_wrong_crc_in_the_header_is_detected():
    payload = b"payload"
    sealed = frame.seal(HEADER, payload)
    data = flipped(sealed.pack(), 20) + payload  # the stored CRC itself
    assert not frame.verify(data, 0, frame.unpack_header(data))


def test_a_frame_running_past_the_data_fails_verification():
    payload = b"x" * 50
    sealed = frame.seal(HEADER, payload)
    data = sealed.pack() + payload
    assert not frame.verify(data[:-1], 0, sealed)
    assert not frame.verify(data, 1, sealed)


def test_rebased_keeps_the_crc_valid():
    payload = b"staged frame"
    sealed = frame.seal(HEADER, payload)
    moved = sealed.rebased(5)
    assert (moved.base_offset, moved.length) == (5, sealed.length)
    assert moved.next_offset == 5 + HEADER.record_count
    data = moved.pack() + payload
    assert frame.unpack_header(data).base_offset == 5
    assert frame.verify(data, 0, frame.unpack_header(data))
    assert moved == frame.seal(replace(HEADER, base_offset=5), payload)  # as if sealed there: no payload read
    assert moved.rebased(HEADER.base_offset) == sealed


@pytest.mark.parametrize("position", [4, 8, 15, 16, 19])
def test_version_2_crc_covers_length_base_offset_and_leader_epoch(position):
    """Defect 3: a flipped base offset served records at wrong offsets, unnoticed (the v1 CRC left it out)."""
    payload = b"0123456789abcdef"
    data = frame.seal(HEADER, payload).pack() + payload
    assert frame.unpack_header(data).version == frame.VERSION == 2
    damaged = flipped(data, position)
    try:
        header = frame.unpack_header(damaged)
    except frame.FrameError:
        return
    assert not frame.verify(damaged, 0, header)


def version_1_frame(payload: bytes, base_offset: int) -> bytes:
    """A frame as version 1 wrote it: the CRC of bytes 24 on only."""
    header = replace(HEADER, base_offset=base_offset, length=len(payload), version=1, crc=0)
    return replace(header, crc=frame.checksum(header.pack(), payload, version=1)).pack() + payload


def test_version_1_frames_stay_readable():
    payload = b"old segment's frame"
    data = version_1_frame(payload, 77)
    header = frame.unpack_header(data)
    assert (header.version, header.base_offset) == (1, 77) and frame.verify(data, 0, header)
    assert not frame.verify(flipped(data, frame.HEADER_SIZE + 3), 0, header)
    # base offset and leader epoch are outside a version 1 CRC (readers check contiguity instead) ...
    assert frame.verify(flipped(data, 8), 0, frame.unpack_header(flipped(data, 8)))
    # ... and re-basing one keeps its CRC and its version
    moved = header.rebased(5)
    assert moved.version == 1 and frame.verify(moved.pack() + payload, 0, moved)
    # changing its version byte to 2 fails the check: the version decides which bytes the CRC covers
    as_v2 = data[:24] + bytes([2]) + data[25:]
    assert not frame.verify(as_v2, 0, frame.unpack_header(as_v2))


# -- payloads ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_batch_round_trips_through_a_payload(storage, codec):
    batch = storage.make_batch([b"value-%d" % i for i in range(100)], list(range(100)))
    payload = frame.encode_batch(batch, codec)
    decoded = frame.decode_batch(payload, storage.SCHEMA)
    assert decoded.equals(batch)
    assert decoded.column(3).to_pylist() == [b"value-%d" % i for i in range(100)]


def test_compressed_payloads_are_smaller_for_repetitive_values(storage):
    batch = storage.make_batch([b"x" * 1000] * 100, [0] * 100)
    plain = frame.encode_batch(batch, "none")
    for codec in ("lz4", "zstd"):
        assert frame.encode_batch(batch, codec).size < plain.size / 10, codec


def test_schema_frame_carries_the_schema():
    schema = pa.schema([("user", pa.string()), ("amount", pa.int64()), ("tags", pa.list_(pa.string()))])
    header, payload = frame.schema_frame(schema, base_offset=300)
    assert header.is_schema and header.record_count == 0 and header.base_offset == 300
    assert header.length == payload.size
    assert frame.decode_schema(payload).equals(schema)
    assert frame.decode_schema(frame.encode_schema(schema)).equals(schema)
    data = header.pack() + payload.to_pybytes()
    assert frame.unpack_header(data) == header and frame.verify(data, 0, header)


# -- splitting a buffer of frames ------------------------------------------------------------------------------
def test_split_frames_returns_each_frame(storage):
    schema_header, schema_payload = frame.schema_frame(storage.SCHEMA)
    data_frames = [sealed_frame(storage, [b"a", b"b"], 0), sealed_frame(storage, [b"c"], 2, "lz4"),
                   sealed_frame(storage, [b"d", b"e", b"f"], 3, "zstd")]
    buffer = pa.py_buffer(schema_header.pack() + schema_payload.to_pybytes() + b"".join(data_frames))
    split = frame.split_frames(buffer)
    assert len(split) == 4
    assert split[0][0] == schema_header and frame.decode_schema(split[0][1]).equals(storage.SCHEMA)
    assert [(h.base_offset, h.record_count) for h, _ in split[1:]] == [(0, 2), (2, 1), (3, 3)]
    for (header, payload), raw in zip(split[1:], data_frames, strict=True):
        assert header == frame.unpack_header(raw)
        assert payload.to_pybytes() == raw[frame.HEADER_SIZE:]
    values = [v for _, payload in split[1:] for v in frame.decode_batch(payload, storage.SCHEMA).column(3).to_pylist()]
    assert values == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert frame.split_frames(pa.py_buffer(b"")) == []


def test_split_frames_rejects_a_torn_or_corrupt_frame(storage):
    first, second = sealed_frame(storage, [b"a"], 0), sealed_frame(storage, [b"b"], 1)
    with pytest.raises(frame.FrameError, match=f"frame at byte {len(first)} is torn"):
        frame.split_frames(pa.py_buffer(first + second[:-1]))
    with pytest.raises(frame.FrameError, match="frame at byte 0 .* fails its CRC"):
        frame.split_frames(pa.py_buffer(flipped(first, frame.HEADER_SIZE + 5) + second))
    with pytest.raises(frame.FrameError, match="short header"):
        frame.split_frames(pa.py_buffer(first + second[:frame.HEADER_SIZE - 1]))
    with pytest.raises(frame.FrameError, match="bad magic"):
        frame.split_frames(pa.py_buffer(first + b"garbage!" * 8))


@given(stamps=st.lists(st.integers(-2**62, 2**62), min_size=1, max_size=20), cut=st.integers(0, 5),
       nulls=st.booleans())
@settings(max_examples=80, deadline=None)
def test_an_encoded_batch_header_carries_its_first_and_largest_timestamp(storage, stamps, cut, nulls):
    """batch_encoding.encode reads them from the column's values: a slice (an offset into the buffer) and a
    column with nulls (where pyarrow's max skips them) give what the rows hold."""
    rows = storage.make_batch([b"v"] * (len(stamps) + cut), [0] * cut + stamps).slice(cut)
    if nulls and len(stamps) > 1:
        column = pa.array(stamps[:1] + [None] + stamps[2:], rows.schema.field(0).type)
        rows = rows.set_column(0, rows.schema.field(0), column)
    header, _ = batch_encoding.encode(rows)
    held = [t for t in rows.column(0).cast(pa.int64()).to_pylist() if t is not None]
    assert (header.first_timestamp, header.max_timestamp) == (held[0], max(held))
