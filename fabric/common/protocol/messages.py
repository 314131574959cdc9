"""The JSON headers of the fabric protocol's frames (docs/protocol.md), encoded and decoded with msgspec.

A request's header is `{"id": int, "type": str, "args": {...}}`; its answer's `{"id": int, "result": value}`
or `{"id": int, "error": {"type": str, "message": str}}` (the error's class in fabric.common.errors and its exact
message). The first request of a connection is `hello`, which names the protocol version and carries the token.
Values are plain JSON: the shared dataclasses as objects of their fields, tuples as arrays, an Arrow schema as the
base64 of its IPC schema message; answers may come back in any order.
"""
from __future__ import annotations

import base64
from typing import Any, TypeVar

import msgspec
import pyarrow as pa

from fabric.common.errors import InvalidRequestError
from fabric.common.redaction import shorten

PROTOCOL = "fabric"
VERSION = 1
HELLO = "hello"
# The request types of version 1, in the order docs/protocol.md describes them.
TYPES = (HELLO, "echo", "produce", "fetch", "commit_offsets", "committed", "topic", "describe_cluster",
         "partition_state", "write_markers", "replica_fetch")
NO_ARGS = msgspec.Raw(b"{}")
NULL = msgspec.Raw(b"null")
T = TypeVar("T")


class Request(msgspec.Struct, forbid_unknown_fields=True):
    """A request's header: its id (the client's, unique among its requests in flight), type and arguments."""

    id: int
    type: str
    args: msgspec.Raw = NO_ARGS


class Answer(msgspec.Struct, forbid_unknown_fields=True):
    """An answer's header: the request's id, then its result or its error."""

    id: int
    result: msgspec.Raw = NULL
    error: dict[str, Any] | None = None


def _encode_value(value: Any) -> Any:
    if isinstance(value, pa.Schema):
        return base64.b64encode(value.serialize().to_pybytes()).decode()
    raise TypeError(f"cannot send a {type(value).__name__} in the fabric protocol")


def _decode_value(kind: type, value: Any) -> Any:
    if kind is pa.Schema and isinstance(value, str):
        try:
            return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(value)))
        except (ValueError, OSError) as exc:
            raise ValueError(f"not the base64 of an Arrow IPC schema message ({shorten(str(exc))})") from None
    raise NotImplementedError(f"cannot decode a {kind.__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_encode_value)
_requests = msgspec.json.Decoder(Request)
_answers = msgspec.json.Decoder(Answer)
_args = msgspec.json.Decoder(dict[str, Any])
_decoders: dict[Any, msgspec.json.Decoder] = {}


def encode_request(request_id: int, kind: str, args: dict[str, Any]) -> bytes:
    """A request's header."""
    return _encoder.encode({"id": request_id, "type": kind, "args": args})


def encode_result(request_id: int, result: Any) -> bytes:
    """A successful answer's header."""
    return _encoder.encode({"id": request_id, "result": result})


# what decoding a client's JSON may raise: msgspec's errors, UTF-8 it checks as it decodes a string, and nesting
# deeper than its decoder follows (a RecursionError, which would otherwise end the connection unanswered)
_MALFORMED = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def encode_error(request_id: int, error: dict[str, Any]) -> bytes:
    """A refused request's answer: `error` is {"type", "message", ...}."""
    return _encoder.encode({"id": request_id, "error": error})


def decode_request(header: bytes) -> Request:
    """A request's header; InvalidRequestError naming what is wrong with it."""
    try:
        return _requests.decode(header)
    except _MALFORMED as exc:
        raise InvalidRequestError(f"a request header is not a fabric protocol request ({shorten(str(exc))}); "
                                  'it is a JSON object {"id": int, "type": str, "args": {...}} '
                                  "(docs/protocol.md)") from None


def request_id(header: bytes | None) -> int:
    """The id of the request whose header this is, or -1 if it names none."""
    try:
        return decode_request(header).id if header else -1
    except InvalidRequestError:
        return -1


def decode_args(request: Request) -> dict[str, Any]:
    """A request's arguments: a JSON object of named values; InvalidRequestError if they are not."""
    try:
        return _args.decode(request.args)
    except _MALFORMED as exc:
        raise InvalidRequestError(f"the arguments of {request.type!r} request {request.id} must be a JSON object "
                                  f"of named values ({shorten(str(exc))})") from None


def decode_answer(header: bytes) -> Answer:
    """An answer's header (a server's answer: msgspec's own errors are a broken server's, DecodeError)."""
    try:
        return _answers.decode(header)
    except RecursionError:
        raise msgspec.DecodeError("an answer header nests deeper than a JSON decoder follows") from None


def decode_result(raw: msgspec.Raw, kind: type[T] | Any) -> T:
    """A result decoded as `kind` (a dataclass, a list of tuples, ...)."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind, dec_hook=_decode_value)
    result: T = decoder.decode(raw)
    return result


def decode_value(raw: bytes | msgspec.Raw, kind: type[T] | Any) -> T:
    """A JSON value decoded as `kind`; InvalidRequestError naming the mismatch (request arguments)."""
    try:
        return decode_result(msgspec.Raw(raw) if isinstance(raw, bytes) else raw, kind)
    except (*_MALFORMED, ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
        raise InvalidRequestError(f"a request argument does not decode ({shorten(str(exc))})") from None
