"""Payloads of the fabric protocol's produce and fetch frames: one Arrow IPC stream each (a schema message, then
the record batches), which any Arrow library reads (Java's ArrowStreamReader among them)."""
from __future__ import annotations

import functools
from typing import Sequence

import msgspec
import pyarrow as pa

from fabric.common.errors import InvalidRequestError
from fabric.common.protocol import messages
from fabric.common.protocol.frames import Payload
from fabric.common.redaction import shorten
from fabric.common.types import Fetched

_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # an IPC stream's end: a continuation marker, length 0


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


@functools.lru_cache(maxsize=256)
def _schema_message(schema: pa.Schema) -> pa.Buffer:
    return schema.serialize()


def read_stream(payload: bytes | pa.Buffer, what: str) -> tuple[pa.Schema, list[pa.RecordBatch]]:
    """The schema and batches of an Arrow IPC stream (`what`: the request, for the error); InvalidRequestError
    if the payload is not one."""
    try:
        reader = pa.ipc.open_stream(payload)
        return reader.schema, list(reader)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise InvalidRequestError(f"the payload of {what} is not an Arrow IPC stream ({shorten(str(exc))}); "
                                  "send it with a fabric client (docs/protocol.md)") from None


def fetched_of(result: msgspec.Raw, payload: Payload) -> list[Fetched]:
    """The Fetched runs of a fetch's answer (its result and payload): each batch of the payload with its offset and
    timestamp type."""
    runs: list[dict[str, int]] = messages.decode_result(result, list[dict[str, int]])
    _, batches = read_stream(payload, "a fetch answer")
    return [Fetched(run["offset"], batch, run["timestamp_type"]) for run, batch in zip(runs, batches, strict=True)]
