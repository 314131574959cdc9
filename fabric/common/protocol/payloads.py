"""Payloads of the fabric protocol's produce and fetch frames: one Arrow IPC stream each (a schema message, then
the record batches), which any Arrow library reads (Java's ArrowStreamReader among them)."""
from __future__ import annotations

from typing import Sequence, TypeAlias

import msgspec
import pyarrow as pa

from fabric.common.errors import InvalidRequestError
from fabric.common.protocol import messages
from fabric.common.redaction import shorten
from fabric.common.types import Fetched

Payload: TypeAlias = bytes | pa.Buffer  # a frame's payload as it is sent


def ipc_stream(schema: pa.Schema, batches: Sequence[pa.RecordBatch]) -> pa.Buffer:
    """`batches` (of `schema`) as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


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
