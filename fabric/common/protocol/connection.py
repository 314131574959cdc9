"""A connection to a server's fabric protocol port (docs/protocol.md): one long-lived TCP connection per
server, shared by every thread of the caller (a client, or a server calling another), with any number of requests
in flight.

A caller sends its request and waits for the answer with its id. Whichever waiting caller finds nobody reading
the socket reads it, handing the answers of the others to them, until its own arrives (so a lone caller pays no
thread switch). A connection that breaks (closed, reset, bytes that are not frames) fails every request in flight
on it with ConnectionError; the next request opens a new one. So does a request after the server closed the
connection for being idle (its connections.max.idle.ms): a connection unused for a while is looked at before it
is used again.
"""
from __future__ import annotations

import itertools
import select
import socket
import ssl
import threading
import time
from typing import Any, Sequence

import msgspec

from fabric.common import vectored
from fabric.common.errors import ClientTimeoutError
from fabric.common.protocol import frames, messages
from fabric.common.protocol.payloads import Payload

RECEIVE_BYTES = 1 << 18
IDLE_CHECK_S = 1.0  # a connection unused this long is looked at (closed_by_server) before it is used again


class Refused(Exception):
    """A server refused a request with an error this client has no class for (`info`: its {"type", "message",
    ...}, e.g. a standby coordinator's NotActiveCoordinator naming the active one)."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(str(info.get("message", "")))
        self.info = info


def client_ssl(ca: bytes | None) -> ssl.SSLContext:
    """The TLS context of a fabric+tls:// client: the server's certificate checked against `ca` (PEM), or the
    system's roots."""
    context = ssl.create_default_context()
    if ca is not None:
        context.load_verify_locations(cadata=ca.decode())
    return context


class ProtocolConnection:
    """One connection to `address` (host:port), its hello sent with `token`; TLS with `tls`."""

    def __init__(self, address: str, token: str | None, tls: ssl.SSLContext | None, timeout_s: float,
                 error_of: Any) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._error_of = error_of  # {"type", "message"} -> the fabric.errors exception, or None
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock: socket.socket = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._state = threading.Condition()
        self._answers: dict[int, tuple[messages.Answer, Payload]] = {}
        self._waiting: set[int] = set()
        self._reading = False
        self._broken: Exception | None = None
        self._reader = frames.FrameReader()
        self._types: frozenset[str] | None = None
        self._used = time.monotonic()  # when a request was last sent or an answer read
        try:
            self.hello = self.call(messages.HELLO, {"protocol": messages.PROTOCOL, "version": messages.VERSION,
                                                    "token": token, "client": "python"}, timeout_s=timeout_s)[0]
        except BaseException:
            self.close()
            raise

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def closed_by_server(self) -> bool:
        """Whether the server closed this connection while it was idle: unused for IDLE_CHECK_S, no request in
        flight, and its socket readable (a server sends nothing unasked: that is its close). It is then broken, so
        the caller opens a new one rather than lose a request to it."""
        if time.monotonic() - self._used < IDLE_CHECK_S:
            return False
        with self._state:  # (a request sent meanwhile would make the socket readable with its answer)
            if self._broken is None and not self._waiting and not self._reading:
                try:
                    closed = bool(select.select([self._sock], [], [], 0)[0])
                except (OSError, ValueError):  # its socket was closed
                    closed = True
                if closed:
                    self._break(ConnectionError("closed by the server while idle"))
            return self._broken is not None

    def serves(self, kind: str) -> bool:
        """Whether the server takes requests of type `kind` (its hello answer lists them: a server of an earlier
        release of this protocol version may take fewer)."""
        if self._types is None:
            self._types = frozenset(messages.decode_result(self.hello, dict[str, Any]).get("types") or ())
        return kind in self._types

    def call(self, kind: str, args: dict[str, Any], payload: Payload = b"", timeout_s: float = 30.0
             ) -> tuple[msgspec.Raw, Payload]:
        """Send one request and wait for its answer: (its result, its payload). The server's refusal is raised as
        the fabric.errors exception it names (else Refused); ClientTimeoutError past `timeout_s`, ConnectionError
        if the connection breaks."""
        return self.wait(self.send(kind, args, payload), timeout_s)

    def send(self, kind: str, args: dict[str, Any], payload: Payload = b"") -> int:
        """Send one request without waiting; returns its id, for `wait`."""
        request_id = next(self._ids)
        header = messages.encode_request(request_id, kind, args)
        with self._state:
            if self._broken is not None:
                raise ConnectionError(f"the connection to {self.address} broke: {self._broken}")
            self._waiting.add(request_id)
        try:
            with self._send_lock:
                if isinstance(self._sock, ssl.SSLSocket):  # (TLS sockets cannot gather)
                    self._sock.sendall(frames.encode(header, payload))
                else:
                    vectored.write_all(self._sock.sendmsg, frames.encode_parts(header, payload))
        except OSError as exc:
            self._break(exc)
            raise ConnectionError(f"cannot send to {self.address}: {exc}") from None
        self._used = time.monotonic()
        return request_id

    def wait(self, request_id: int, timeout_s: float) -> tuple[msgspec.Raw, Payload]:
        """The answer of request `request_id` (see `call`)."""
        deadline = time.monotonic() + timeout_s
        try:
            answer, payload = self._answer_of(request_id, deadline)
        finally:
            self.forget(request_id)
        if answer.error is not None:
            raise self._refusal(answer.error)
        return answer.result, payload

    def forget(self, request_id: int) -> None:
        """Stop waiting for request `request_id`: its answer, read before or after, is dropped."""
        with self._state:
            self._waiting.discard(request_id)
            self._answers.pop(request_id, None)

    def _refusal(self, info: dict[str, Any]) -> Exception:
        known = self._error_of(info)
        return known if known is not None else Refused(info)

    def _answer_of(self, request_id: int, deadline: float) -> tuple[messages.Answer, Payload]:
        with self._state:
            while True:
                if request_id in self._answers:
                    return self._answers.pop(request_id)
                if self._broken is not None:
                    raise ConnectionError(f"the connection to {self.address} broke: {self._broken}")
                if not self._reading:
                    self._reading = True
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._timeout()
                self._state.wait(remaining)
        try:
            return self._read_until(request_id, deadline)
        finally:
            with self._state:
                self._reading = False
                self._state.notify_all()

    def _read_until(self, request_id: int, deadline: float) -> tuple[messages.Answer, Payload]:
        """Read answers (handing each to its waiter) until request `request_id`'s arrives."""
        while True:
            frame = self._next_frame(deadline)
            try:
                answer = messages.decode_answer(frame.header)
            except msgspec.DecodeError as exc:
                self._break(exc)
                raise ConnectionError(f"{self.address} answered a header that is not a fabric protocol answer "
                                      f"({exc})") from None
            self._used = time.monotonic()
            if answer.id == request_id:
                return answer, frame.payload
            with self._state:
                if answer.id in self._waiting:
                    self._answers[answer.id] = (answer, frame.payload)
                    self._state.notify_all()
                elif answer.id == -1 and answer.error is not None:  # the server refused the connection itself
                    self._break(self._refusal(answer.error))
                    raise self._refusal(answer.error)

    def _next_frame(self, deadline: float) -> frames.Frame:
        while True:
            try:
                frame = self._reader.next()
            except frames.FrameError as exc:
                self._break(exc)
                raise ConnectionError(f"{self.address} sent bytes that are not fabric protocol frames: {exc}"
                                      ) from None
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timeout()
            pending = isinstance(self._sock, ssl.SSLSocket) and self._sock.pending()
            if not pending and not self._readable(remaining):
                raise self._timeout()
            into, data = self._reader.receive_buffer(), b""
            try:
                if into is not None:  # a large frame's payload, received in place
                    count = self._sock.recv_into(into)
                else:
                    data = self._sock.recv(RECEIVE_BYTES)
                    count = len(data)
            except (ssl.SSLWantReadError, BlockingIOError):
                continue
            except OSError as exc:
                self._break(exc)
                raise ConnectionError(f"the connection to {self.address} broke: {exc}") from None
            if not count:
                self._break(ConnectionError("closed by the server"))
                raise ConnectionError(f"{self.address} closed the connection")
            if into is not None:
                self._reader.received(count)
            else:
                self._reader.feed(data)

    def _readable(self, timeout_s: float) -> bool:
        """Whether the socket has bytes to read within `timeout_s`; ConnectionError if another thread broke the
        connection (closing its socket) before or during the wait."""
        try:
            return bool(select.select([self._sock], [], [], timeout_s)[0])
        except (OSError, ValueError) as exc:  # EBADF, or a closed socket's descriptor -1
            self._break(ConnectionError(f"its socket was closed ({exc})"))
            raise ConnectionError(f"the connection to {self.address} broke: {self._broken}") from None

    def _timeout(self) -> ClientTimeoutError:
        return ClientTimeoutError(f"{self.address} did not answer in time")

    def _break(self, exc: Exception) -> None:
        with self._state:
            if self._broken is None:
                self._broken = exc
            self._state.notify_all()
        try:
            self._sock.close()
        except OSError:
            pass

    def close(self) -> None:
        self._break(ConnectionError("closed by the client"))


class ProtocolClients:
    """The connections of one client to many servers (by address), each opened at its first request and again
    after it broke."""

    def __init__(self, token: str | None, tls: ssl.SSLContext | None, error_of: Any) -> None:
        self.token, self.tls, self.error_of = token, tls, error_of
        self._connections: dict[str, ProtocolConnection] = {}
        self._lock = threading.Lock()

    def get(self, address: str, timeout_s: float) -> ProtocolConnection:
        with self._lock:
            connection = self._connections.get(address)
            if connection is not None and not connection.broken and not connection.closed_by_server():
                return connection
        connection = ProtocolConnection(address, self.token, self.tls, timeout_s, self.error_of)
        spare: ProtocolConnection | None
        with self._lock:
            current = self._connections.get(address)
            if current is not None and not current.broken:  # another thread opened one meanwhile: it is shared
                connection, spare = current, connection
            else:
                self._connections[address], spare = connection, current
        if spare is not None:
            spare.close()  # unused, or broken: no request in flight on it is cut
        return connection

    def close(self, addresses: Sequence[str] | None = None) -> None:
        with self._lock:
            closing = [self._connections.pop(a) for a in list(addresses or self._connections)
                       if a in self._connections]
        for connection in closing:
            connection.close()

