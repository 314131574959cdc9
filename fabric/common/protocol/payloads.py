"""Payloads of the fabric protocol's produce and fetch frames: one Arrow IPC stream each (a schema message, then
the record batches), which any Arrow library reads (Java's ArrowStreamReader among them)."""
from __future__ import annotations

import struct
from typing import Sequence

import msgspec
import pyarrow as pa

from fabric.common.errors import InvalidRequestError
from fabric.common.protocol import messages
from fabric.common.protocol.frames import Payload
from fabric.common.redaction import shorten
from fabric.common.types import Fetched

_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an IPC stream's end: a continuation marker, length 0
_SCHEMAS: dict[bytes, pa.Schema] = {}  # schema messages read before, byte for byte, and their schemas
_MAX_SCHEMAS, _MAX_SCHEMA_BYTES = 256, 64 << 10  # at most 16 MiB of them
_PREFIX = struct.Struct("<Ii")  # an IPC message's continuation marker and metadata length
_MESSAGES: dict[int, tuple[pa.Schema, pa.Buffer]] = {}  # by id(schema): the schema (held, so its id stays its own)


def ipc_stream(schema: pa.Schema, batches: Sequence[pa.RecordBatch]) -> tuple[bytes | pa.Buffer, ...]:
    """`batches` (of `schema`) as one Arrow IPC stream, in parts: the schema's message (serialized once per
    schema), each batch's message, the end of the stream; the bytes a stream writer writes, at a quarter of its
    cost for a batch of one row (no writer set up per request)."""
    return message_stream(schema, [batch.serialize() for batch in batches])


def message_stream(schema: pa.Schema, messages_: Sequence[pa.Buffer]) -> tuple[bytes | pa.Buffer, ...]:
    """Record-batch messages already made (each a batch's `serialize()`, of `schema`) as one Arrow IPC stream, in
    parts, as ipc_stream."""
    return (_schema_message(schema), *messages_, _END_OF_STREAM)


def fetched_stream(schema: pa.Schema, fetched: Sequence[Fetched]) -> tuple[bytes | pa.Buffer, ...]:
    """`fetched` (of `schema`) as one Arrow IPC stream, in parts: the schema message, each run's record batch
    message (its stored one where it has it, so the frames' bytes go out as they lie in the segment, not encoded
    again), the end of the stream."""
    return (_schema_message(schema), *(f.message if f.message is not None else f.batch.serialize() for f in fetched),
            _END_OF_STREAM)


def _schema_message(schema: pa.Schema) -> pa.Buffer:
    """`schema`'s message, serialized once per schema object (a topic's, the offsets topic's, a batch's: the
    same object request after request). Kept by identity, not by the schema's hash: hashing a schema makes an
    object per field and the text of each type (7 to 20 µs for the offsets topic's), more than serializing it."""
    known = _MESSAGES.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    if len(_MESSAGES) >= _MAX_SCHEMAS:
        _MESSAGES.clear()
    message = schema.serialize()
    _MESSAGES[id(schema)] = (schema, message)
    return message


def read_stream(payload: bytes | pa.Buffer, what: str) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """The schema and batches of an Arrow IPC stream (`what`: the request, for the error); InvalidRequestError
    if the payload is not one."""
    try:
        return _read_known(payload) or _read_any(payload)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise InvalidRequestError(f"the payload of {what} is not an Arrow IPC stream ({shorten(str(exc))}); "
                                  "send it with a fabric client (docs/protocol.md)") from None


def _read_any(payload: bytes | pa.Buffer) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    reader = pa.ipc.open_stream(payload)
    return reader.schema, list(reader)


def _read_known(payload: bytes | pa.Buffer) -> tuple[pa.Schema, list[pa.RecordBatch]] | None:
    """The stream, its schema message taken from the messages read before where it is byte for byte one of them
    (a topic's producers and leaders send the same one again and again): three fifths of what opening a stream reader
    costs for a batch of one row, and the same schema object each time, which the append's schema check then
    compares at once. None, nothing read, for a stream whose schema message is new or that holds anything but
    record batches (a stream reader reads those)."""
    buffer = payload if isinstance(payload, pa.Buffer) else pa.py_buffer(payload)
    if buffer.size < _PREFIX.size:
        return None
    marker, length = _PREFIX.unpack_from(buffer)
    end = _PREFIX.size + length
    if marker != 0xFFFFFFFF or not 0 < length <= _MAX_SCHEMA_BYTES or end > buffer.size:
        return None
    key = buffer[:end].to_pybytes()
    schema = _SCHEMAS.get(key)
    if schema is None:
        if len(_SCHEMAS) >= _MAX_SCHEMAS:
            _SCHEMAS.clear()
        schema = _SCHEMAS[key] = pa.ipc.read_schema(buffer[:end])
    reader = pa.BufferReader(buffer)
    reader.seek(end)
    batches: list[pa.RecordBatch] = []
    while True:
        try:
            message = pa.ipc.read_message(reader)
        except EOFError:  # the end-of-stream marker, or the end of the payload (as a stream reader takes it)
            return schema, batches
        if message.type != "record batch":
            return None
        batches.append(pa.ipc.read_record_batch(message, schema))


def fetched_of(result: msgspec.Raw, payload: Payload) -> list[Fetched]:
    """The Fetched runs of a fetch's answer (its result and payload): each batch of the payload with its offset and
    timestamp type."""
    runs: list[dict[str, int]] = messages.decode_result(result, list[dict[str, int]])
    _, batches = read_stream(payload, "a fetch answer")
    return [Fetched(run["offset"], batch, run["timestamp_type"]) for run, batch in zip(runs, batches, strict=True)]
