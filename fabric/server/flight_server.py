"""What every fabric Flight server shares (the coordinator service and the data node): TLS, token
authentication and ACLs (security.py), errors sent as the Flight errors that keep their fabric.errors type
(wire.py), the checks of an append (its rows against the topic's storage schema, its producer id against the
caller: producer_owners.py), and its Prometheus metrics (metrics.py: produce and fetch requests, measured by
`measured`).
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Iterable, Iterator, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from fabric.common import record_sizes
from fabric.common.errors import FabricError, SchemaMismatchError
from fabric.common.types import Fetched, TopicInfo
from fabric.server import admission, partition_ops, security, wire
from fabric.server.arguments import check_call
from fabric.server.instance import SocketSettings, check_listen
from fabric.server.metrics import ServerMetrics
from fabric.server.producer_owners import ProducerOwners
from fabric.server.protocol_server import ProtocolServer
from fabric.server.request_metrics import count_bytes
from fabric.storage.lock import for_a_request

log = logging.getLogger(__name__)
RowsOf = Callable[[str], tuple[pa.Schema, Iterable[pa.RecordBatch]]]  # topic -> an append's schema and batches
T = TypeVar("T")


class FabricFlightServer(flight.FlightServerBase):
    """A Flight server on `listen` (TLS with a cert and key; token authentication with a tokens file; ACLs with
    an ACL file). Handlers decorated with `translated` send their exceptions through `translate`. Its ports apply
    `sockets` (a server sets its own before this starts): a DoPut stream over socket.request.max.bytes is refused as
    it is read; its fabric protocol port closes idle connections and refuses those over the connection limits."""

    sockets = SocketSettings()

    def __init__(self, listen: str, tokens_file: str | None, acl_file: str | None, tls_cert: str | None,
                 tls_key: str | None, metrics: ServerMetrics) -> None:
        self.tokens = tokens = security.load_tokens(tokens_file) if tokens_file else None
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self.protocol: ProtocolServer | None = None  # its fabric protocol port, once the server opens one
        self.authorizer = security.Authorizer(security.load_acls(acl_file) if acl_file else None)
        self.producer_owners: ProducerOwners | None = None  # set by the server: whose producer ids appends may use
        self.metrics = metrics  # served before this server answers, so a status names its port
        cert = security.read_pem(tls_cert, "TLS certificate")
        key = security.read_pem(tls_key, "TLS private key")
        if (cert is None) != (key is None):
            raise FabricError("TLS needs both --tls-cert and --tls-key (PEM files)")
        scheme = "grpc+tls" if cert else "grpc+tcp"
        check_listen(listen)
        try:
            super().__init__(f"{scheme}://{listen}", tls_certificates=[(cert, key)] if cert else None,
                             middleware={security.MIDDLEWARE_KEY: security.TokenAuthFactory(tokens)})
        except pa.ArrowException as exc:
            raise FabricError(f"cannot listen on {listen}: the server did not start ({exc}); check that "
                              "the address belongs to this machine and the port is free") from None

    def shutdown(self) -> None:
        """Stop serving Flight calls (those in flight finish) and the fabric protocol, then the metrics endpoint."""
        if self.protocol is not None:
            self.protocol.shutdown()
        super().shutdown()
        self.metrics.close()

    def authorize(self, context: flight.ServerCallContext, checks: list[tuple[str, str]]) -> str:
        """The caller's principal; AuthorizationError unless it may do every (operation, resource)."""
        principal = self.principal(context)
        self.authorizer.check(principal, checks)
        return principal

    def serve_append(self, context: flight.ServerCallContext, request: dict[str, Any], reader:
                     flight.MetadataRecordBatchReader, method: Callable, append: Callable[..., int],
                     topic_of: Callable[[str], TopicInfo]) -> int:
        """A DoPut append (see `append_checked`), its rows read from the stream up to socket.request.max.bytes."""
        def rows_of(topic: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
            chunks = wire.bounded_chunks(reader, self.sockets.socket_request_max_bytes, f"append to topic {topic!r}")
            return reader.schema, (chunk.data for chunk in chunks if chunk.data is not None)
        return self.append_checked(self.principal(context), request, rows_of, method, append, topic_of)

    def append_checked(self, principal: str, request: dict[str, Any], rows_of: RowsOf, method: Callable,
                       append: Callable[..., T], topic_of: Callable[[str], TopicInfo]) -> T:
        """An append by `principal`, over any transport: the request's arguments checked against `method`,
        `write` on the topic (and on the transactional id of a transactional append), its producer id the
        caller's (`producer_owners`), then the rows (`rows_of(topic)`: their schema and batches, read only now)
        checked against the topic's storage schema and max.message.bytes (`topic_of(topic)`), then
        append(rows=..., **request)."""
        check_call("append", method, request, skip=("rows",))
        topic = request["topic"]
        checks = [("write", f"topic:{topic}")]
        if request.get("transactional"):
            partition_ops.check_transactional_id(request.get("transactional_id"))
            checks.append(("write", f"transactional-id:{request['transactional_id']}"))
        self.authorizer.check(principal, checks)
        if self.producer_owners is not None:
            self.producer_owners.check(principal, request.get("producer_id", -1), lambda: self.authorizer.allowed(
                principal, "cluster_action", security.CLUSTER))
        schema, batches = rows_of(topic)
        return append(rows=stored_rows(topic_of(topic), schema, batches), **request)

    def serve_fetch(self, context: flight.ServerCallContext, ticket: flight.Ticket, method: Callable,
                    fetch: Callable[..., list[Fetched]], schema_of: Callable[[str], pa.Schema]
                    ) -> flight.GeneratorStream:
        """A DoGet (see `fetch_checked`); an empty answer carries the topic's storage schema, `schema_of(topic)`."""
        args = wire.request_args(ticket.ticket, "DoGet ticket")
        fetched = self.fetch_checked(self.principal(context), args, method, fetch)
        return wire.fetch_stream(None if fetched else schema_of(args["topic"]), fetched)

    def fetch_checked(self, principal: str, args: dict[str, Any], method: Callable,
                      fetch: Callable[..., list[Fetched]]) -> list[Fetched]:
        """A fetch by `principal`, over any transport: the arguments checked against `method`, `read` on the
        topic, then fetch(**args)."""
        check_call("fetch", method, args)
        self.authorizer.check(principal, [("read", f"topic:{args['topic']}")])
        fetched = fetch(**args)
        count_bytes(fetched_bytes(fetched))
        return fetched

    @staticmethod
    def principal(context: flight.ServerCallContext) -> str:
        """The principal a Flight call was authenticated as."""
        name: str = context.get_middleware(security.MIDDLEWARE_KEY).name
        return name

    def translate(self, exc: Exception) -> flight.FlightError:
        """The Flight error a handler's exception is sent as (an unexpected one names `server_name`)."""
        return wire.to_flight_error(exc, self.server_name)

    @property
    def server_name(self) -> str:
        """What this server is, as an unexpected failure names it."""
        return "coordinator"


def translated(handler: Callable) -> Callable:
    """Send any exception a handler raises as the Flight error `translate` makes of it (a refusal is logged at
    debug level, anything else with its trace: the client gets its type and message). The handler's waits for a
    partition's lock end within storage.lock.REQUEST_WAIT_S (a paused process holding one fails the request,
    naming the process, and frees its thread)."""
    @functools.wraps(handler)
    def run(self: FabricFlightServer, *args: Any, **kwargs: Any) -> Any:
        try:
            with for_a_request():
                return handler(self, *args, **kwargs)
        except Exception as exc:
            if isinstance(exc, FabricError):
                log.debug("%s refused: %s", handler.__name__, exc)
            else:
                log.exception("%s failed", handler.__name__)
            raise self.translate(exc) from exc
    return run


def measured(kind: str) -> Callable[[Callable], Callable]:
    """Record each call of a handler as a `kind` request (request_metrics.KINDS) in its server's metrics; under
    `translated`, so refusals are counted by their own type."""
    def wrap(handler: Callable) -> Callable:
        @functools.wraps(handler)
        def run(self: FabricFlightServer, *args: Any, **kwargs: Any) -> Any:
            with self.metrics.requests.measure(kind):
                return handler(self, *args, **kwargs)
        return run
    return wrap


def fetched_bytes(fetched: list[Fetched]) -> int:
    """The bytes of fetched records a fetch counts: their batches' buffer sizes (not `nbytes`, which walks the
    nested header column)."""
    return sum(f.batch.get_total_buffer_size() for f in fetched)


def _batch_of(topic: str, number: int) -> str:
    return f"batch {number} of an append to topic {topic!r}"


def stored_rows(info: TopicInfo, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> pa.RecordBatch:
    """An append's rows for topic `info` as one batch; SchemaMismatchError unless they have its storage schema,
    RecordTooLargeError as soon as its records weigh more than the topic's max.message.bytes (the append is one
    batch): nothing more of it is read."""
    topic = info.name
    expected = info.stored_schema
    if not schema.equals(expected):
        raise SchemaMismatchError(
            f"an append to topic {topic!r} must carry stored rows with schema "
            f"({wire.schema_text(expected)}), got ({wire.schema_text(schema)}); produce with a fabric "
            "producer (fabric.records.to_storage)")
    max_bytes = info.settings["max.message.bytes"]
    read: list[pa.RecordBatch] = []
    records = bound = weight = weighed = 0
    for batch in batches:
        admission.check_sizes(topic, batch, max_bytes)
        read.append(batch)
        records, bound = records + batch.num_rows, bound + batch.get_total_buffer_size()
        if bound > max_bytes:  # the buffers (a bound on the records' weight) pass the limit: weigh the records
            weight += sum(record_sizes.batch_bytes(admission.valid(b, _batch_of(topic, weighed + n)))
                          for n, b in enumerate(read[weighed:]))
            weighed = len(read)
            if weight > max_bytes:
                raise admission.batch_too_large(topic, records, weight, max_bytes)
    if len(read) == 1:
        rows = read[0]
    else:  # (combined from their buffers, which must hold first; check_rows validates a single batch)
        for number, batch in enumerate(read[weighed:], weighed):
            admission.valid(batch, _batch_of(topic, number))
        combined = pa.Table.from_batches(read, schema=schema).combine_chunks().to_batches()
        rows = combined[0] if combined else pa.RecordBatch.from_pylist([], schema=schema)
    count_bytes(bound)  # the batches' buffer sizes, as read (`nbytes` would walk the nested columns again)
    return rows
