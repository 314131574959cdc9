"""The fabric protocol's server (docs/protocol.md): an asyncio server on its own thread, beside a Flight server.

Each connection starts with `hello` (the protocol version, and the token of the principal its requests act for: the
Flight server's tokens file), then carries any number of requests at once. A request the handler says does not wait
(`Handler.waits`) is served on the event loop as it arrives; one that may wait (an acks=all append, a long-polling
fetch, a commit) runs on a worker thread, so it holds up no other request; but requests of one order
(`Handler.order`: a partition's produces, a group's commits) are served one at a time, as they came. Answers go back
as they are ready, each naming its request's id. A frame over socket.request.max.bytes (before the hello is
answered, over HELLO_MAX_BYTES: an unauthenticated client makes the server hold no more), or bytes that are not
frames, are answered with the error and the connection is closed (where the next frame starts is unknown); nothing
of such a request reaches a handler. A client that asks faster than it reads the answers, or never reads them, is
read no further while more than WRITE_BUFFER_HIGH bytes of its answers wait to be sent: its own requests wait in its
socket, and the server holds no growing pile of answers for it. Nor is a connection read further while the payloads
of its requests being served (produces held by acks=all for their replicas, say) add up to socket.request.max.bytes:
a client makes a server hold about that much of its requests at most, as a Kafka broker holds one request per
connection. A connection with no request in flight that has sent and been sent nothing for connections.max.idle.ms
(Kafka's broker key and default: 10 minutes) is closed, so connections that never said hello, or were forgotten, do
not pin the server's descriptors; one over the connection quotas (max.connections, max.connections.per.ip:
fabric.server.connection_quotas) is refused as it is accepted. TLS with the Flight server's certificate and key.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import ssl
import threading
import typing
from dataclasses import dataclass
from typing import Any, Callable, Hashable

import pyarrow as pa

from fabric.common import trace
from fabric.common.errors import (
    AuthenticationError,
    FabricError,
    InvalidRequestError,
    RecordTooLargeError,
    TooManyConnectionsError,
    UnsupportedVersionError,
)
from fabric.common.protocol import frames, messages
from fabric.common.protocol.payloads import Payload
from fabric.common.redaction import clip
from fabric.server import loop_handoff, security
from fabric.server.connection_quotas import ConnectionQuotas
from fabric.server.held import Held
from fabric.storage.lock import PartitionBusy, for_a_request, without_waiting

try:
    import uvloop
except ImportError:  # pragma: no cover (uvloop has no Windows build)
    uvloop = None  # type: ignore[assignment]

log = logging.getLogger(__name__)
# (principal, args, payload) -> (result, answer payload); or, from a handler served on the loop, a future of it
# that the loop settles later; or a Held result (answered when its future is done, with no payload)
Serve = Callable[[str, dict[str, Any], bytes], "tuple[Any, Payload] | concurrent.futures.Future | Held"]
# the longest frame a connection may send before its hello is answered: a client that is not authenticated yet
# makes the server hold no more than this (as Kafka's sasl.server.max.receive.size, and its default)
HELLO_MAX_BYTES = 512 << 10
# unsent answer bytes past which a connection is read no further until they drop to a quarter of it (asyncio's
# write buffer limits: the transport calls pause_writing and resume_writing)
WRITE_BUFFER_HIGH = 4 << 20
MAX_IN_FLIGHT = 256  # a connection's requests being served at once; past it, it is read no further until some end
WORKERS = 64
CONNECTIONS_MAX_IDLE_MS = 600_000  # connections.max.idle.ms: Kafka's broker key and default
SWEEP_S = (0.05, 30.0)  # idle connections are looked for 4 times per idle period, within these bounds
REFUSED_CLOSE_S = 1.0  # a connection over a quota is closed this long after its refusal, if its client did not


@dataclass(frozen=True)
class Handler:
    """How one request type is served: `serve(principal, args, payload)` returns (result, answer payload) (or,
    served on the loop, a future of them, which the loop settles: the request is answered then);
    `waits(args)` says whether it may wait (run on a worker thread); `order(args)`, if not None, is a key: a
    connection's requests with the same key are served one at a time, in the order they came (a partition's
    produces, a group's commits), so their effects and answers keep that order; a request answered with a Held
    result lets the next one start, and is answered when its future is (a produce waiting for its replicas);
    `moves`: served on the loop, the request takes no partition lock that is not free at once (PartitionBusy,
    storage.lock.without_waiting) and is served again on a worker thread, which may wait for it (its handler did
    nothing before the lock: a produce, a commit); else the loop waits for a lock held by another of the server's
    threads."""

    serve: Serve
    waits: Callable[[dict[str, Any]], bool] = lambda args: True
    order: Callable[[dict[str, Any]], Hashable | None] = lambda args: None
    moves: bool = False


def _over_hello_limit(total: int, limit: int) -> str:
    """Why a frame of `total` bytes is refused before the connection's hello was answered."""
    return (f"the first frame of a connection, its hello, may be at most {limit} bytes (its client is not "
            f"authenticated yet); got one of {total} bytes: send the hello first (docs/protocol.md)")


def _order_key(handler: Handler, args: dict[str, Any]) -> Hashable | None:
    """The request's order key; None (served alone, unordered) where its arguments make none (a list for a
    partition): its handler then refuses it, naming the argument, and the connection goes on."""
    key = handler.order(args)
    try:
        hash(key)
    except TypeError:
        return None
    return key


@dataclass(frozen=True)
class _Job:
    """A request to serve: its handler, arguments and payload, whether it waits, and its order key (requests of a
    connection with the same key are served one after another, in the order they came)."""

    request: messages.Request
    handler: Handler
    args: dict[str, Any]
    payload: bytes | pa.Buffer  # as the frame brought it
    waits: bool
    key: Hashable | None


def _bounded(serve: Serve, principal: str, args: dict[str, Any], payload: bytes | pa.Buffer
             ) -> tuple[Any, Payload] | concurrent.futures.Future | Held:
    """serve(...) on a worker thread, its waits for a partition's lock ending within storage.lock.REQUEST_WAIT_S."""
    with for_a_request():
        return serve(principal, args, payload)


def server_ssl(tls_cert: str | None, tls_key: str | None) -> ssl.SSLContext | None:
    """The TLS context of the Flight server's certificate and key, or None without them."""
    if tls_cert is None or tls_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls_cert, tls_key)
    return context


class ProtocolServer:
    """Serves `handlers` (request type -> Handler) on `host`, port `port` (0: any free one; `port` tells which),
    to principals of `tokens` (None: everyone is ANONYMOUS). `refusal(exc)` is the {"type", "message", ...} an
    exception is answered with; `limit` is socket.request.max.bytes; a connection idle for `idle_ms`
    (connections.max.idle.ms) is closed, and one over the `quotas` (max.connections, max.connections.per.ip) is
    refused as it is accepted (before its TLS handshake, with `tls`). The loop is uvloop's where it is installed
    (it halves the loop's own cost) and the port is plaintext, else asyncio's (or `loop`)."""

    def __init__(self, host: str, port: int, handlers: dict[str, Handler], tokens: dict[str, str] | None,
                 refusal: Callable[[Exception], dict[str, Any]], limit: int,
                 tls: ssl.SSLContext | None = None, loop: asyncio.AbstractEventLoop | None = None,
                 idle_ms: int = CONNECTIONS_MAX_IDLE_MS, quotas: ConnectionQuotas | None = None) -> None:
        self.host, self.handlers, self.tokens, self.refusal, self.limit = host, handlers, tokens, refusal, limit
        self.tls, self.idle_s, self.quotas = tls, idle_ms / 1000, quotas or ConnectionQuotas()
        self.port = port
        self.workers = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="fabric-protocol")
        # (uvloop reads an accepted connection even when its protocol paused it in connection_made, so a TLS
        # listener, whose connections are counted before TLS takes their bytes over, runs on asyncio's loop)
        fast = uvloop is not None and tls is None
        self._loop = loop or (uvloop.new_event_loop() if fast else asyncio.new_event_loop())
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[_Connection] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fabric-protocol-loop", daemon=True)

    def start(self) -> ProtocolServer:
        """Listen (raising what binding raised) and serve on the loop's thread."""
        self._server = self._loop.run_until_complete(self._loop.create_server(  # (TLS begins once counted: below)
            lambda: _Connection(self), self.host, self.port, reuse_address=True))
        self.port = self._server.sockets[0].getsockname()[1]
        self._loop.call_soon(self._close_idle)
        self._thread.start()
        return self

    def _close_idle(self) -> None:
        """Close every connection with no request in flight that sent and was sent nothing for `idle_s`; look
        again in a quarter of that (within SWEEP_S: an idle time of 1 ms does not make the loop spin)."""
        now = self._loop.time()
        for connection in [c for c in self._connections if not c.in_flight and now - c.active >= self.idle_s]:
            log.debug("closing a fabric protocol connection (%s) idle for %.1f s (connections.max.idle.ms)",
                      connection.principal or "no hello yet", now - connection.active)
            connection.close()
        self._loop.call_later(min(max(self.idle_s / 4, SWEEP_S[0]), SWEEP_S[1]), self._close_idle)

    def shutdown(self) -> None:
        """Stop listening and close every connection (requests on worker threads finish; their answers are
        dropped)."""
        if not self._thread.is_alive():
            return

        def stop() -> None:
            if self._server is not None:
                self._server.close()
            for connection in list(self._connections):
                connection.close()
            self._loop.stop()
        self._loop.call_soon_threadsafe(stop)
        self._thread.join()
        self.workers.shutdown(wait=False)
        self._loop.close()

    def authenticate(self, token: Any) -> str:
        """The principal of a hello's token; AuthenticationError as the Flight server refuses a call."""
        if self.tokens is None:
            return security.ANONYMOUS
        if not isinstance(token, str) or not token:
            raise AuthenticationError("the server rejected the credentials: no token; set FABRIC_TOKEN or add "
                                      "?token=... to the fabric:// URL")
        principal = security.principal_of(self.tokens, token)
        if principal is None:
            raise AuthenticationError(f"the server rejected the credentials: {security.UNKNOWN_TOKEN}; set "
                                      "FABRIC_TOKEN or add ?token=... to the fabric:// URL")
        return principal

    def hello(self, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(principal, answer) of a hello; UnsupportedVersionError for another protocol or version."""
        protocol, version = args.get("protocol"), args.get("version")
        if protocol != messages.PROTOCOL or version != messages.VERSION:
            raise UnsupportedVersionError(
                f"this server speaks version {messages.VERSION} of the {messages.PROTOCOL} protocol; the client "
                f"speaks version {clip(version, 20)} of {clip(protocol, 40)}: use a client of protocol version "
                f"{messages.VERSION} (the server's Flight port serves clients of every version)")
        principal = self.authenticate(args.get("token"))
        return principal, {"protocol": messages.PROTOCOL, "version": messages.VERSION, "principal": principal,
                           "types": sorted(self.handlers)}


class _Connection(asyncio.BufferedProtocol):
    """One client's connection: frames in (read where its FrameReader says: a large payload in place), answers out,
    each request served as its handler says."""

    def __init__(self, server: ProtocolServer) -> None:
        self.server = server
        self.reader = frames.FrameReader(min(server.limit, HELLO_MAX_BYTES), too_long=_over_hello_limit)
        self.principal: str | None = None
        self.transport: asyncio.Transport | None = None
        self.in_flight = 0
        self.in_flight_bytes = 0  # of the payloads of the requests being served
        self.paused = False  # read no further: MAX_IN_FLIGHT requests, or their limit's bytes, are being served
        self.backlogged = False  # read no further: WRITE_BUFFER_HIGH bytes of answers wait to be sent
        self.closing = False  # the client half-closed: close once the requests in flight are answered
        self.queues: dict[Hashable, collections.deque[_Job]] = {}  # per order key: requests waiting their turn
        self.active = server._loop.time()  # when it last received or sent bytes (connections.max.idle.ms)
        self.address: str | None = None  # the client's address, once its connection is counted in the quotas
        self.refused = False  # over a connection quota: answered its refusal, nothing it sends is read
        self.handshaking = False  # TLS is being set up: requests received meanwhile wait for its transport
        self.tls_setup: asyncio.Task[None] | None = None  # (held: the loop keeps only a weak reference to a task)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Count the connection in the quotas as it is accepted, a TLS one before its handshake (so connections
        that never finish one count too, and are closed once idle for connections.max.idle.ms), and refuse it if
        it is over them."""
        self.transport = typing.cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        self.transport.set_write_buffer_limits(WRITE_BUFFER_HIGH)
        self.server._connections.add(self)
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if peer else "unknown"
        reason = self.server.quotas.admit(address)
        refusal = None if reason is None else TooManyConnectionsError(reason)
        if refusal is None:
            self.address = address
        if self.server.tls is not None:
            self.transport.pause_reading()  # (nothing is read in plaintext: TLS takes over the bytes)
            self.handshaking = True
            self.tls_setup = self.server._loop.create_task(self._handshake(self.server.tls, refusal))
        elif refusal is not None:
            self._refuse_connection(refusal)

    async def _handshake(self, tls: ssl.SSLContext, refusal: TooManyConnectionsError | None) -> None:
        """Take the connection over TLS, then refuse it if it is over a quota (over TLS, so its client reads why)."""
        plain = self.transport
        assert plain is not None
        try:
            secured = await self.server._loop.start_tls(plain, self, tls, server_side=True)
            if secured is None:  # (closed meanwhile, by the idle sweep say)
                raise ConnectionAbortedError("closed during the handshake")
        except Exception as exc:  # noqa: BLE001 (a client's failed handshake closes its connection, nothing else)
            log.debug("a fabric protocol connection failed its TLS handshake: %s", exc)
            plain.close()
            self.connection_lost(None)  # (a handshake that did not finish calls no connection_lost of ours)
            return
        self.transport, self.handshaking = secured, False
        secured.set_write_buffer_limits(WRITE_BUFFER_HIGH)
        self.active = self.server._loop.time()
        if refusal is not None:
            self._refuse_connection(refusal)
        else:
            self._read_frames()

    def _refuse_connection(self, exc: TooManyConnectionsError) -> None:
        """Answer the refusal of the whole connection, then close it once the client did (it closes on reading
        it), or after REFUSED_CLOSE_S: closed at once, a hello already received but unread would have the kernel
        reset the connection, and the client might never read why."""
        self.refused = True
        self._write(messages.encode_error(-1, self.server.refusal(exc)), b"")
        assert self.transport is not None
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.server._loop.call_later(REFUSED_CLOSE_S, self.close)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection (called once it closed; again after a failed handshake, doing nothing)."""
        self.server._connections.discard(self)
        if self.address is not None:
            self.server.quotas.release(self.address)
            self.address = None
        self.transport = None
        self.queues.clear()  # requests waiting for one of their order are never served: nothing of them is written
        if self.reader.pending:
            log.info("a client closed its connection in the middle of a request (%d bytes of it received): it was "
                     "not served", self.reader.pending)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        """The client sent all it will: answer what is in flight, then close."""
        if self.in_flight and not self.refused:
            self.closing = True
            return True
        return False

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.refused:
            return
        self.active = self.server._loop.time()
        self.reader.read_into(nbytes)
        if not self.handshaking:  # (TLS may hand over the first request before its handshake's await returns)
            self._read_frames()

    def pause_writing(self) -> None:
        """Over WRITE_BUFFER_HIGH bytes of answers wait to be sent: take no more requests, received or not."""
        self.backlogged = True
        self._read_or_not()

    def resume_writing(self) -> None:
        """The answers waiting fell to a quarter of WRITE_BUFFER_HIGH: serve the requests received, and read on."""
        self.backlogged = False
        if not self.handshaking:
            self._read_frames()
        self._read_or_not()

    def _read_or_not(self) -> None:
        """Read from the socket unless too many requests are being served or too many answer bytes wait to be
        sent (and not while TLS takes over the bytes, nor once closed)."""
        if self.transport is None or self.handshaking or self.transport.is_closing():
            return
        if self.paused or self.backlogged:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def _read_frames(self) -> None:
        """Serve the whole requests received so far (none while answers wait to be sent: resume_writing goes on)."""
        while self.transport is not None and not self.transport.is_closing() and not self.backlogged:
            try:
                frame = self.reader.next()
            except frames.FrameError as exc:
                self._refuse_and_close(messages.request_id(exc.header), RecordTooLargeError(str(exc))
                                       if exc.header is not None else InvalidRequestError(str(exc)))
                return
            if frame is None:
                return
            self._request(frame)

    def _request(self, frame: frames.Frame) -> None:
        try:
            request = messages.decode_request(frame.header)
        except InvalidRequestError as exc:
            self._refuse_and_close(-1, exc)
            return
        if self.principal is None:
            self._hello(request)
            return
        handler = self.server.handlers.get(request.type)
        try:
            if handler is None:
                raise InvalidRequestError(
                    f"unknown request type {clip(request.type, 60)}; this server takes "
                    f"{', '.join(sorted(self.server.handlers))} (fabric protocol version {messages.VERSION})")
            args = messages.decode_args(request)
            if trace.ON:  # read on the event loop (a request that may wait is then served on a worker thread)
                trace.event(f"{request.type}_read", args.get("topic", ""), args.get("partition"))
            job = _Job(request, handler, args, frame.payload, handler.waits(args), _order_key(handler, args))
        except Exception as exc:  # noqa: BLE001 (answered as the error it is)
            self._answer_error(request, exc)
            return
        self.in_flight += 1
        self.in_flight_bytes += len(job.payload)
        if (self.in_flight >= MAX_IN_FLIGHT or self.in_flight_bytes >= self.server.limit) and not self.paused:
            self.paused = True
            self._read_or_not()
        if job.key is not None:
            queue = self.queues.get(job.key)
            if queue is not None:  # one of its order is being served: this one follows it
                queue.append(job)
                return
            self.queues[job.key] = collections.deque()
        self._start(job)

    def _start(self, job: _Job) -> None:
        if job.waits:
            self._on_worker(job)
        else:
            self._serve(job)

    def _on_worker(self, job: _Job) -> None:
        """Serve `job` on a worker thread, its waits for a partition's lock bounded (storage.lock.for_a_request)."""
        assert self.principal is not None
        future = self.server.workers.submit(_bounded, job.handler.serve, self.principal, job.args, job.payload)
        future.add_done_callback(lambda done: self._back_on_loop(job, done))

    def _back_on_loop(self, job: _Job, done: concurrent.futures.Future) -> None:
        """On the worker: have the loop answer `done` (straight, no asyncio future chained to the executor's);
        dropped once the server shut its loop."""
        loop = self.server._loop
        try:
            loop.call_soon_threadsafe(self._served, job, done)
        except RuntimeError:  # the loop is closed: the server shut down, the connection with it
            log.debug("a %s request finished after the server shut down; its answer is dropped", job.request.type)

    def _finish(self, job: _Job) -> None:
        """After `job` was answered: read on if the connection was paused, start the next request of its order."""
        self._answered(job)
        self._next_of_order(job)

    def _answered(self, job: _Job) -> None:
        """`job` was answered: read on if the connection was paused for the requests in flight."""
        self.in_flight -= 1
        self.in_flight_bytes -= len(job.payload)
        if self.closing and not self.in_flight:
            self.close()
        if self.paused and self.in_flight < MAX_IN_FLIGHT // 2 and self.in_flight_bytes < self.server.limit // 2:
            self.paused = False
            self._read_or_not()

    def _next_of_order(self, job: _Job) -> None:
        """Start the request that waits behind `job` in its order, if any."""
        if job.key is None or job.key not in self.queues:
            return
        queue = self.queues[job.key]
        if queue:
            self._start(queue.popleft())
        else:
            del self.queues[job.key]

    def _hello(self, request: messages.Request) -> None:
        try:
            if request.type != messages.HELLO:
                raise InvalidRequestError(f"the first request of a connection must be {messages.HELLO!r} (the "
                                          f"protocol version and the token), got {clip(request.type, 60)}")
            self.principal, answer = self.server.hello(messages.decode_args(request))
        except FabricError as exc:
            self._refuse_and_close(request.id, exc)
            return
        self.reader.limit, self.reader.too_long = self.server.limit, frames.over_request_limit
        self._write(messages.encode_result(request.id, answer), b"")

    def _serve(self, job: _Job) -> None:
        """Serve `job` on the loop: answered at once, or when the future its handler returned is done. A handler
        that `moves` finds a partition's lock held (by another thread or process): served on a worker instead."""
        assert self.principal is not None
        try:
            with without_waiting() if job.handler.moves else contextlib.nullcontext():
                answer = job.handler.serve(self.principal, job.args, job.payload)
        except PartitionBusy:
            self._on_worker(job)
            return
        except Exception as exc:  # noqa: BLE001 (answered as the error it is)
            self._answer_error(job.request, exc)
            self._finish(job)
            return
        if isinstance(answer, concurrent.futures.Future):  # settled on this loop later (coordinator.commit_batch)
            answer.add_done_callback(lambda done: self._served(job, done))
            return
        if isinstance(answer, Held):
            self._hold(job, answer)
            return
        self._answer(job.request, *answer)
        self._finish(job)

    def _served(self, job: _Job, done: concurrent.futures.Future) -> None:
        exc = done.exception()
        if exc is not None:
            self._answer_error(job.request, exc)
        elif isinstance(done.result(), Held):
            self._hold(job, done.result())
            return
        else:
            self._answer(job.request, *done.result())
        self._finish(job)

    def _hold(self, job: _Job, held: Held) -> None:
        """Answer `job` once `held` is (its expire() after held.timeout_s); the next request of its order starts
        now, so a partition's next produce appends while this one waits for its replicas."""
        loop = self.server._loop
        timer = loop.call_later(held.timeout_s, held.expire)

        def settled(done: concurrent.futures.Future) -> None:  # on whichever thread settled it (most often the
            try:  # loop itself: a follower's fetch, served there, moved the high watermark)
                loop_handoff.run_on(loop, self._held_answer, job, done, timer)
            except RuntimeError:  # the loop is closed: the server shut down, the connection with it
                log.debug("a held %s answer came after the server shut down; dropped", job.request.type)
        self._next_of_order(job)
        held.future.add_done_callback(settled)

    def _held_answer(self, job: _Job, done: concurrent.futures.Future, timer: asyncio.TimerHandle) -> None:
        timer.cancel()
        exc = done.exception()
        if exc is not None:
            self._answer_error(job.request, exc)
        else:
            self._answer(job.request, done.result(), b"")
        self._answered(job)

    def _answer(self, request: messages.Request, result: Any, payload: Payload) -> None:
        try:
            header = messages.encode_result(request.id, result)
        except TypeError as exc:
            self._answer_error(request, exc)
            return
        self._write(header, payload)

    def _answer_error(self, request: messages.Request, exc: BaseException) -> None:
        if isinstance(exc, FabricError):
            log.debug("%s request refused: %s", clip(request.type, 60), exc)
        elif isinstance(exc, Exception):
            log.error("%s request failed", clip(request.type, 60), exc_info=exc)
        self._write(messages.encode_error(request.id, self.server.refusal(exc)
                                          if isinstance(exc, Exception) else {"type": type(exc).__name__,
                                                                              "message": str(exc)}), b"")

    def _refuse_and_close(self, request_id: int, exc: FabricError) -> None:
        log.info("closing a fabric protocol connection: %s", exc)
        self._write(messages.encode_error(request_id, self.server.refusal(exc)), b"")
        self.close()

    def _write(self, header: bytes, payload: Payload) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.active = self.server._loop.time()
            self.transport.writelines(frames.encode_parts(header, payload))
