"""The fabric protocol's requests that every fabric server serves beside its Flight calls (the coordinator service
and the data node): `echo`, `produce` and `fetch`, checked, authorized and measured exactly as the Flight calls
they stand for (FabricFlightServer.append_checked / fetch_checked), and `start`, which opens a server's protocol
port (docs/protocol.md).
"""
from __future__ import annotations

import concurrent.futures
import functools
from typing import Any, Callable

import pyarrow as pa

from fabric.common import trace
from fabric.common.protocol import payloads
from fabric.common.types import Fetched, TopicInfo
from fabric.server import consumer_fetches, wire
from fabric.server.flight_server import FabricFlightServer
from fabric.server.held import Held
from fabric.server.protocol_server import Handler, Payload, ProtocolServer, server_ssl
from fabric.storage.log import Log
from fabric.storage.reader import FOREIGN_APPEND_POLL_S

Append = Callable[..., "int | Held"]  # an append's first offset, or the answer held for its replicas
Fetch = Callable[..., list[Fetched]]


def echo(principal: str, args: dict[str, Any], payload: Payload) -> tuple[Any, Payload]:
    """`echo`: the arguments and payload back (a liveness check, and the protocol's cost alone)."""
    return args, payload


def produce(server: FabricFlightServer, method: Callable, append: Append, topic_of: Callable[[str], TopicInfo],
            waits: Callable[[dict[str, Any]], bool] = lambda args: True) -> Handler:
    """`produce`: the arguments of the Flight append, the rows as the payload's Arrow IPC stream; the result is
    the offset of the first row. A connection's produces to one partition are appended in the order they came
    (a held answer lets the next one append while it waits for the replicas); one that `waits` says cannot wait
    is appended on the event loop."""
    def serve(principal: str, args: dict[str, Any], payload: Payload) -> tuple[Any, Payload] | Held:
        if trace.ON:
            trace.event("produce_received", args.get("topic"), args.get("partition"))
        with server.metrics.requests.measure("produce"):
            offset = server.append_checked(principal, args, lambda topic: payloads.read_stream(
                payload, f"a produce to topic {topic!r}"), method, append, topic_of)
        if isinstance(offset, Held):  # answered once the replicas have it, holding no thread meanwhile
            if trace.ON:
                offset.future.add_done_callback(functools.partial(_answered, args["topic"], args["partition"]))
            return offset
        if trace.ON:
            trace.event("produce_answered", args["topic"], args["partition"], offset)
        return offset, b""
    return Handler(serve, waits, order=lambda args: ("produce", args.get("topic"), args.get("partition")),
                   moves=True)


def _answered(topic: str, partition: int, done: concurrent.futures.Future) -> None:
    """Trace a held produce's answer (on the thread that settled it)."""
    if done.exception() is None:
        trace.event("produce_answered", topic, partition, done.result())


def fetch(server: FabricFlightServer, method: Callable, read: Fetch, schema_of: Callable[[str], pa.Schema],
          log_of: Callable[[str, int], Log], waits: Callable[[dict[str, Any]], bool]) -> Handler:
    """`fetch`: the arguments of the Flight fetch; the result lists each batch's {"offset", "timestamp_type",
    "records"} (its row count: a reader knows where the next fetch starts before it decodes the payload), the
    payload holds the batches as one Arrow IPC stream (of the topic's storage schema when there are none), each
    whole stored frame's batch as the segment holds it (payloads.fetched_stream). On the event loop (unless
    `waits` says it may wait on more than this process's files: a topic's metadata not at hand), one that finds
    nothing and may wait (max_wait_ms) is held there until its log's end moves on (consumer_fetches: woken by
    the log's appends in this process, Log.watch_appends, and by other processes' that an AppendPoller looks for
    every reader.FOREIGN_APPEND_POLL_S); on a worker thread it waits there, as a Flight DoGet does."""
    foreign = consumer_fetches.AppendPoller(FOREIGN_APPEND_POLL_S)

    def serve(principal: str, args: dict[str, Any], payload: Payload
              ) -> tuple[Any, Payload] | concurrent.futures.Future[tuple[Any, Payload]]:
        def watched() -> consumer_fetches.Watched:
            plog, offset = log_of(args["topic"], args["partition"]), args["offset"]

            def watch(woken: consumer_fetches.Waiter) -> bool:
                if not plog.watch_appends(woken, offset):
                    return False
                foreign.add(plog)
                return True
            return consumer_fetches.Watched(plog.name, watch, plog.unwatch_appends)
        return consumer_fetches.serve(server, principal, args, method, read,
                                      lambda fetched: fetch_answer(fetched, lambda: schema_of(args["topic"])), watched)
    return Handler(serve, waits)


def fetch_answer(fetched: list[Fetched], schema: Callable[[], pa.Schema]) -> tuple[Any, Payload]:
    """A fetch's answer (see `fetch`); `schema()` is the topic's storage schema, asked for when nothing was
    fetched."""
    return ([{"offset": f.offset, "timestamp_type": f.timestamp_type, "records": f.batch.num_rows} for f in fetched],
            payloads.fetched_stream(fetched[0].batch.schema if fetched else schema(), fetched))


def start(server: FabricFlightServer, host: str, handlers: dict[str, Handler]) -> ProtocolServer:
    """Serve `handlers` (and `echo`) on a free port of `host`, with `server`'s tokens, TLS certificate and socket
    settings; refusals are the errors its Flight calls answer (`server.translate`)."""
    sockets = server.sockets
    return ProtocolServer(host, 0, {"echo": Handler(echo, lambda args: False), **handlers}, server.tokens,
                          lambda exc: wire.error_details(server.translate(exc)), sockets.socket_request_max_bytes,
                          server_ssl(server.tls_cert, server.tls_key), idle_ms=sockets.connections_max_idle_ms,
                          quotas=sockets.connection_quotas()).start()
