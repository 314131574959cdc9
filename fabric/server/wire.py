"""The coordinator service's wire format, in one place: tagged JSON for action arguments and results,
Arrow streams with JSON app-metadata for the data plane, and errors that keep their fabric.errors type.

Values: None/bool/int/float/str and lists are plain JSON; tuples, dicts (any keys), Arrow schemas, enums and
the shared dataclasses are tagged objects {"$": tag, "v": ...}, so a decoded value equals the encoded one.
Requests (action bodies, DoPut descriptors, DoGet tickets) are refused up front past MAX_REQUEST_BYTES or
MAX_DEPTH levels of nesting, and errors about them never echo more than a short piece of the input.
"""
from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.flight as flight

import fabric.common.errors as errors
from fabric.common.protocol.frames import MAX_HEADER_BYTES
from fabric.common.redaction import clip, shorten
from fabric.common.types import (
    ClusterDescription,
    CommittedOffset,
    EpochEndOffset,
    Fetched,
    GroupDescription,
    GroupStatus,
    JoinRequest,
    JoinResult,
    LeaderAndIsr,
    MemberDescription,
    NodeAssignment,
    NodeHeartbeat,
    NodeInfo,
    OpenTransaction,
    PartitionAssignment,
    PartitionRegistration,
    PartitionState,
    ProducerIdentity,
    ProducerState,
    SyncResult,
    TopicInfo,
    TopicPartition,
    TopicRecovery,
    TransactionalOffsets,
    TransactionRecord,
    TransactionWriter,
)
from fabric.server.arguments import conforms
from fabric.storage.cleaner import CleanReport

AUTH_HEADER = "authorization"
MAX_REQUEST_BYTES = MAX_HEADER_BYTES  # a commit of 10,000 partitions takes about 0.5 MiB
SOCKET_REQUEST_MAX_BYTES = 100 << 20  # socket.request.max.bytes: Kafka's name and default, for a DoPut's stream
MAX_DEPTH = 32  # the deepest legitimate request (a join's owned partitions) nests 6 levels


@dataclasses.dataclass(frozen=True)
class InstanceStatus:
    """What the `status` action reports about one coordinator instance."""

    instance: str
    active: bool
    active_instance: str
    epoch: int
    store: str
    data_dir: str
    tls: bool
    metrics_port: int | None = None  # where it serves Prometheus metrics (--metrics-port), if it does
    protocol_address: str = ""  # where it serves the fabric protocol (docs/protocol.md), if it does
    group_partitions: tuple[int, ...] = ()  # the __consumer_offsets partitions it serves the groups of, where
    # instances share them out (fabric.server.offsets_ownership)
    pid: int = 0  # its process id (a launcher tells its own process from another listening where it meant to)


DATACLASSES = {cls.__name__: cls for cls in (TopicInfo, CommittedOffset, JoinRequest, JoinResult, SyncResult,
                                             MemberDescription, GroupDescription, PartitionState, InstanceStatus,
                                             TopicRecovery, NodeInfo, PartitionAssignment, LeaderAndIsr,
                                             PartitionRegistration, ClusterDescription, NodeAssignment, NodeHeartbeat,
                                             EpochEndOffset, ProducerIdentity, TransactionWriter,
                                             TransactionRecord, TransactionalOffsets, CleanReport,
                                             OpenTransaction, ProducerState)}
ENUMS = {cls.__name__: cls for cls in (GroupStatus,)}


def encode(value: Any) -> Any:
    """A JSON-ready form of `value` (see the module docstring for what is supported)."""
    if type(value).__name__ in ENUMS and ENUMS[type(value).__name__] is type(value):
        return {"$": type(value).__name__, "v": value.value}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"$": "tuple", "v": [encode(v) for v in value]}
    if isinstance(value, dict):
        return {"$": "dict", "v": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, pa.Schema):
        return {"$": "schema", "v": base64.b64encode(value.serialize().to_pybytes()).decode()}
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and DATACLASSES.get(name) is type(value):
        return {"$": name, "v": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    raise TypeError(f"cannot send a {type(value).__name__} to the coordinator service")


def decode(value: Any, depth: int = 0) -> Any:
    """The inverse of encode(); ValueError past MAX_DEPTH levels of nesting."""
    if depth > MAX_DEPTH:
        raise ValueError(f"it nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        return [decode(v, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    tag = value.get("$")
    body: Any = value.get("v")  # a body of the wrong shape raises here; request_args reports it
    if tag == "tuple":
        return tuple(decode(v, depth + 1) for v in body)
    if tag == "dict":
        return {_hashable(decode(k, depth + 1)): decode(v, depth + 1) for k, v in body}
    if tag == "schema":
        try:
            return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(body)))
        except OSError as exc:  # what pyarrow raises for bytes that are no IPC schema message
            raise ValueError(f"a schema value is not a serialized Arrow schema ({shorten(str(exc))})") from None
    if tag in DATACLASSES:
        return DATACLASSES[tag](**{k: decode(v, depth + 1) for k, v in body.items()})
    if tag in ENUMS:
        return ENUMS[tag](body)
    if tag is None:
        raise ValueError('a JSON object must be a tagged value {"$": tag, "v": value}; encode requests with '
                         "fabric.server.wire.dumps")
    raise ValueError(f"unknown wire tag {clip(tag, 40)}: client and coordinator versions differ")


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


def dumps(value: Any) -> bytes:
    """encode() then JSON bytes."""
    return json.dumps(encode(value), separators=(",", ":")).encode()


def loads(data: bytes | pa.Buffer | None) -> Any:
    """JSON bytes then decode(); empty input is None."""
    raw = data.to_pybytes() if isinstance(data, pa.Buffer) else data
    return decode(json.loads(raw)) if raw else None


# -- actions -------------------------------------------------------------------------------------
def action(name: str, /, **kwargs: Any) -> flight.Action:
    """A DoAction request: `name` with keyword arguments."""
    return flight.Action(name, dumps(kwargs))


def request_args(data: pa.Buffer | bytes | None, what: str) -> dict[str, Any]:
    """The keyword arguments of a request (`what`: a DoAction body, DoPut descriptor or DoGet ticket);
    InvalidRequestError if it is not a JSON object of named arguments in this wire format, or too large or too
    deeply nested to be one."""
    size = len(data) if data is not None else 0
    if size > MAX_REQUEST_BYTES:
        raise errors.InvalidRequestError(
            f"the {what} is {size} bytes, over the limit of {MAX_REQUEST_BYTES}; split the request (e.g. commit "
            "fewer partitions at once)")
    try:
        args = {} if not data else loads(data)
    except RecursionError:  # the JSON parser's own limit, below any stack trouble
        raise errors.InvalidRequestError(f"the {what} nests deeper than {MAX_DEPTH} levels; no coordinator "
                                         "request does") from None
    except (ValueError, TypeError, KeyError, AttributeError, pa.ArrowException) as exc:  # bad JSON or tags
        raise errors.InvalidRequestError(
            f"the {what} is not valid coordinator wire JSON ({type(exc).__name__}: {shorten(str(exc))}); send it "
            "with a fabric client of the same version as the coordinator") from None
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        raise errors.InvalidRequestError(f"the {what} must be a JSON object of named arguments, "
                                         f"got {type(args).__name__}")
    return args


def action_args(body: pa.Buffer | bytes | None) -> dict[str, Any]:
    """The keyword arguments of a DoAction request."""
    return request_args(body, "action body")


# -- data plane ----------------------------------------------------------------------------------
def put_descriptor(op: str, **kwargs: Any) -> flight.FlightDescriptor:
    """The descriptor of a DoPut: `op` is "append" or "publish", with its arguments."""
    return flight.FlightDescriptor.for_command(dumps({"op": op, **kwargs}))


def fetch_ticket(topic: str, partition: int, offset: int, max_bytes: int, end_offset: int | None,
                 **extra: Any) -> flight.Ticket:
    """The ticket of a DoGet: Cluster.fetch's arguments (and, to a data node, the leader epoch)."""
    return flight.Ticket(dumps({"topic": topic, "partition": partition, "offset": offset,
                                "max_bytes": max_bytes, "end_offset": end_offset, **extra}))


def fetch_stream(schema: pa.Schema, fetched: list[Fetched]) -> flight.GeneratorStream:
    """A DoGet answer: each stored batch with {"offset", "timestamp_type"} as its app metadata."""
    if fetched:
        schema = fetched[0].batch.schema
    return flight.GeneratorStream(schema, ((f.batch, dumps({"offset": f.offset, "timestamp_type": f.timestamp_type}))
                                           for f in fetched))


def read_fetched(reader: flight.FlightStreamReader) -> list[Fetched]:
    """The Fetched runs of a DoGet answer."""
    out = []
    for chunk in _chunks(reader):
        meta = loads(chunk.app_metadata)
        out.append(Fetched(meta["offset"], chunk.data, meta["timestamp_type"]))
    return out


def _chunks(reader: flight.MetadataRecordBatchReader) -> Iterator[flight.FlightStreamChunk]:
    while True:
        try:
            yield reader.read_chunk()
        except StopIteration:
            return


def bounded_chunks(reader: flight.MetadataRecordBatchReader, limit: int, what: str
                   ) -> Iterator[flight.FlightStreamChunk]:
    """The chunks of a DoPut stream (`what`: the request, for the error), refused with RecordTooLargeError as soon
    as their bytes pass `limit`, the server's socket.request.max.bytes: the rest of the stream is never read, and
    nothing of it is written. (Flight reads one message whole, so one batch over the limit is read before it is
    refused; a request of many batches stops at the one that passes it.)"""
    total = 0
    for chunk in _chunks(reader):
        total += (chunk.data.nbytes if chunk.data is not None else 0) + (
            chunk.app_metadata.size if chunk.app_metadata is not None else 0)
        if total > limit:
            raise errors.RecordTooLargeError(
                f"the {what} is over socket.request.max.bytes={limit} of this server ({total} bytes read so far); "
                "nothing of it was written: send smaller requests (a fabric producer sends batches of at most the "
                "topic's max.message.bytes), or raise socket.request.max.bytes in the server's properties")
        yield chunk


# Publish: partitions may differ in schema (typed and untyped topics), so each stored batch (publish) or
# buffer of sealed frames (publish_frames) travels as the binary payload of one row of this envelope.
ENVELOPE = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("payload", pa.binary())])


def ipc_bytes(batch: pa.RecordBatch) -> bytes:
    """A stored batch as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def ipc_batches(data: bytes) -> list[pa.RecordBatch]:
    """The inverse of ipc_bytes."""
    return list(pa.ipc.open_stream(data))


def frame_bytes(buffer: pa.Buffer) -> bytes:
    return buffer.to_pybytes()


def frame_buffers(data: bytes) -> list[pa.Buffer]:
    return [pa.py_buffer(data)]


def envelope(parts: dict[tuple[str, int], Sequence[Any]], payload: Callable[[Any], bytes]
             ) -> Iterator[pa.RecordBatch]:
    """One envelope row per item (stored batch or frame buffer) of a publish; `payload` makes its bytes."""
    for (topic, partition), items in parts.items():
        for item in items:
            yield pa.record_batch([[topic], [partition], [payload(item)]], schema=ENVELOPE)


def publish_keys(keys: Any) -> list[TopicPartition]:
    """The (topic, partition) list of a publish request; InvalidRequestError unless it is one."""
    pairs = [tuple(k) for k in keys] if isinstance(keys, list) and all(isinstance(k, list) for k in keys) else None
    if pairs is None or not conforms(pairs, list[TopicPartition]):
        raise errors.InvalidRequestError(f"a publish needs keys: a list of [topic, partition] pairs, got {keys!r:.80}")
    return pairs


def schema_text(schema: pa.Schema) -> str:
    """A schema on one line (shortened), for error messages."""
    return shorten(schema.to_string(show_schema_metadata=False).replace("\n", ", "), 300)


def unwrap(keys: Iterable[tuple[str, int]], reader: flight.MetadataRecordBatchReader,
           items: Callable[[bytes], list[Any]], limit: int) -> dict[tuple[str, int], list[Any]]:
    """The publish parts: every partition in `keys` (even with nothing in it), filled from the envelope stream
    with `items(payload)`; a stream over `limit` bytes is refused (bounded_chunks)."""
    if not reader.schema.equals(ENVELOPE):
        raise errors.InvalidRequestError(f"a publish stream must have the schema ({schema_text(ENVELOPE)}), "
                                         f"got ({schema_text(reader.schema)})")
    parts: dict[tuple[str, int], list[Any]] = {(t, p): [] for t, p in keys}
    for chunk in bounded_chunks(reader, limit, "publish request"):
        for row in chunk.data.to_pylist():
            key = (row["topic"], row["partition"])
            if key not in parts:
                raise errors.InvalidRequestError(f"publish stream names {clip(key)}, which the request did not list")
            try:
                parts[key].extend(items(row["payload"]))
            except (pa.ArrowException, ValueError, TypeError) as exc:
                raise errors.InvalidRequestError(f"a publish payload for {clip(key)} does not decode "
                                                 f"({type(exc).__name__}); send it with a fabric client") from None
    return parts


# The DoPut ops that publish: (Cluster method, payload encoder, payload decoder).
PUBLISH_OPS: dict[str, tuple[str, Callable[[Any], bytes], Callable[[bytes], list[Any]]]] = {
    "publish": ("publish", ipc_bytes, ipc_batches),
    "publish_frames": ("publish_frames", frame_bytes, frame_buffers),
    "publish_transaction": ("publish_transaction", ipc_bytes, ipc_batches),
}


# -- errors --------------------------------------------------------------------------------------
NOT_ACTIVE = "NotActiveCoordinator"
NO_ANSWER: tuple[type[flight.FlightError], ...] = (
    flight.FlightUnavailableError, flight.FlightTimedOutError, flight.FlightCancelledError)
"""The Flight errors of a call its server did not complete: the server is down, hung, or stopped serving with the
call under way (gRPC's CANCELLED). The caller tries elsewhere or later, as after a refused connection."""


def error_fields(exc: BaseException) -> dict[str, str]:
    """An exception as {"type", "message"}: its exact message and type name (its nearest base class in
    fabric.errors, which the client has too); `exception_of` makes it again."""
    name = next((c.__name__ for c in type(exc).__mro__ if getattr(errors, c.__name__, None) is c),
                type(exc).__name__)
    return {"type": name, "message": str(exc)}


def error_info(exc: BaseException) -> bytes:
    """The extra_info of a Flight error (error_fields as JSON)."""
    return json.dumps(error_fields(exc)).encode()


def exception_of(info: dict[str, Any]) -> errors.FabricError | None:
    """The fabric.errors exception `error_fields` described; None for any other type."""
    cls = getattr(errors, str(info.get("type", "")), None)
    if isinstance(cls, type) and issubclass(cls, errors.FabricError):
        return cls(str(info.get("message", "")))
    return None


def refusal(info: dict[str, Any]) -> Exception:
    """The exception a server's {"type", "message"} stands for, over any transport: its fabric.errors class,
    NotImplementedError, else a FabricError with its message."""
    known = exception_of(info)
    if known is not None:
        return known
    if info.get("type") == "NotImplementedError":
        return NotImplementedError(info.get("message", ""))
    return errors.FabricError(str(info.get("message", "")))


def not_active(instance: str, active: str, message: str = "") -> flight.FlightUnavailableError:
    """The answer of a standby to a call only the active instance serves (or of an instance to a call another
    one serves: `active` names it, `message` says why)."""
    message = message or f"{instance} is not the active coordinator, active is {active or 'not yet elected'}"
    return flight.FlightUnavailableError(message, extra_info=json.dumps(
        {"type": NOT_ACTIVE, "message": message, "active": active}).encode())


def to_flight_error(exc: BaseException, server: str = "coordinator") -> flight.FlightError:
    """A server-side exception as the Flight error that carries it to the client; an unexpected one says which
    `server` failed."""
    if isinstance(exc, flight.FlightError):
        return exc
    if isinstance(exc, errors.AuthenticationError):
        return flight.FlightUnauthenticatedError(str(exc), extra_info=error_info(exc))
    if isinstance(exc, errors.AuthorizationError):
        return flight.FlightUnauthorizedError(str(exc), extra_info=error_info(exc))
    if isinstance(exc, errors.CoordinatorUnavailableError):  # e.g. lost ZooKeeper: the client tries another
        return flight.FlightUnavailableError(str(exc), extra_info=error_info(exc))
    if isinstance(exc, (errors.FabricError, NotImplementedError)):
        return flight.FlightServerError(str(exc), extra_info=error_info(exc))
    message = f"{server} failed: {type(exc).__name__}: {shorten(str(exc), 300)}"  # never a whole input
    return flight.FlightInternalError(message, extra_info=json.dumps({"type": type(exc).__name__,
                                                                      "message": message}).encode())


def error_details(exc: flight.FlightError) -> dict[str, Any]:
    """The {"type", "message", ...} a server attached to a Flight error ({} if none)."""
    try:
        info = json.loads(exc.extra_info or b"{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def from_flight_error(exc: flight.FlightError) -> Exception:
    """The exception to raise client-side: the same fabric.errors class and message the server raised."""
    info = error_details(exc)
    if exception_of(info) is not None or info.get("type") == "NotImplementedError":
        return refusal(info)
    if isinstance(exc, flight.FlightUnauthenticatedError):
        return errors.AuthenticationError(f"the coordinator rejected the credentials: {exc}; "
                                          "set FABRIC_TOKEN or add ?token=... to the fabric:// URL")
    if isinstance(exc, flight.FlightUnauthorizedError):
        return errors.AuthorizationError(str(exc))
    if isinstance(exc, NO_ANSWER):
        return errors.CoordinatorUnavailableError(info.get("message") or str(exc))
    return errors.FabricError(info.get("message") or str(exc))
