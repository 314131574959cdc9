"""A connection to a server's fabric protocol port read by an asyncio event loop (docs/protocol.md): for a server that
calls another from its own loop (the coordinator's offsets appends, fabric.server.offsets_on_loop), so a request
is sent and its answer taken with no thread handed anything.

`LoopConnection.open` connects and sends the hello; `request` sends one request and returns an asyncio future of
its answer, settled by the loop as the answer is read. Every request has a deadline: past it, its future fails with
ClientTimeoutError (the connection stays: other answers still come). A connection that breaks (closed, reset,
bytes that are not frames) fails every request in flight with ConnectionError and takes no more.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from typing import Any, Callable, cast

import msgspec

from fabric.common.errors import ClientTimeoutError
from fabric.common.protocol import frames, messages
from fabric.common.protocol.connection import Refused
from fabric.common.protocol.payloads import Payload

log = logging.getLogger(__name__)
Result = tuple[msgspec.Raw, Payload]  # an answer's result and payload


class LoopConnection(asyncio.BufferedProtocol):
    """One connection to `address` (host:port) read by the loop that opened it; `error_of` maps a refusal's
    {"type", "message"} to its exception (None: Refused)."""

    def __init__(self, address: str, error_of: Callable[[dict[str, Any]], Exception | None]) -> None:
        self.address, self._error_of = address, error_of
        self._transport: asyncio.Transport | None = None
        self._reader = frames.FrameReader()
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Result]] = {}
        self._broken: Exception | None = None

    @classmethod
    async def open(cls, address: str, token: str | None, tls: ssl.SSLContext | None, timeout_s: float,
                   error_of: Callable[[dict[str, Any]], Exception | None]) -> LoopConnection:
        """Connect to `address` and say hello with `token` (TLS with `tls`), within `timeout_s`."""
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(loop.create_connection(
            lambda: cls(address, error_of), host, int(port), ssl=tls, server_hostname=host if tls else None),
            timeout_s)
        try:
            await connection.request(messages.HELLO, {"protocol": messages.PROTOCOL, "version": messages.VERSION,
                                                      "token": token, "client": "python"}, b"", timeout_s)
        except BaseException:
            connection.close()
            raise
        return connection

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def request(self, kind: str, args: dict[str, Any], payload: Payload, timeout_s: float
                ) -> asyncio.Future[Result]:
        """Send one request (on the loop's thread): a future of (its result, its payload). The server's refusal
        fails it with the exception it names; ClientTimeoutError past `timeout_s`, ConnectionError if the
        connection breaks (or the refusal of the connection itself)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        if self._broken is not None or self._transport is None:
            future.set_exception(ConnectionError(f"the connection to {self.address} broke: {self._broken}"))
            return future
        request_id = next(self._ids)
        self._pending[request_id] = future
        timer = loop.call_later(timeout_s, self._expire, request_id)
        future.add_done_callback(lambda _: timer.cancel())
        self._transport.writelines(frames.encode_parts(messages.encode_request(request_id, kind, args), payload))
        return future

    def _expire(self, request_id: int) -> None:
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(ClientTimeoutError(f"{self.address} did not answer in time"))

    # -- asyncio.BufferedProtocol ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # (uvloop's transports are no asyncio.Transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.read_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._reader.read_into(nbytes)
        while self._broken is None:
            try:
                frame = self._reader.next()
                if frame is None:
                    return
                answer = messages.decode_answer(frame.header)
            except (frames.FrameError, msgspec.DecodeError) as exc:
                self._break(ConnectionError(f"{self.address} sent bytes that are not fabric protocol answers: "
                                            f"{exc}"))
                return
            future = self._pending.pop(answer.id, None)
            if answer.error is not None:
                refusal = self._error_of(answer.error) or Refused(answer.error)
                if answer.id == -1:  # the server refused the connection itself
                    self._break(refusal)
                elif future is not None and not future.done():
                    future.set_exception(refusal)
            elif future is not None and not future.done():
                future.set_result((answer.result, frame.payload))

    def connection_lost(self, exc: Exception | None) -> None:
        self._break(ConnectionError(f"the connection to {self.address} broke: {exc or 'closed by the server'}"))

    def _break(self, exc: Exception) -> None:
        if self._broken is None:
            self._broken = exc
            log.debug("fabric protocol connection to %s broke: %s", self.address, exc)
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(exc)
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        """Close it (on the loop's thread): requests in flight fail with ConnectionError."""
        self._break(ConnectionError("closed by the client"))
