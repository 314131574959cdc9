"""connections.max.idle.ms on a real ProtocolServer and its clients in this process: a connection that never says
hello, or that a client stopped using, is closed once idle, but never one with a request in flight; a client whose
connection the server closed sends its next request on a new one."""
from __future__ import annotations

import select
import socket
import threading
import time
from typing import Any

import pytest

from fabric.common.protocol.connection import IDLE_CHECK_S, ProtocolClients, ProtocolConnection
from fabric.common.waiting import wait_for
from fabric.server import wire
from fabric.server.protocol_server import Handler, ProtocolServer

IDLE_MS = 300


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed `sock` (it reads as the end of the stream now)."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1 << 16, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def served():
    released = threading.Event()

    def echo(principal: str, args: dict[str, Any], payload: bytes) -> tuple[Any, bytes]:
        return args, payload

    def held(principal: str, args: dict[str, Any], payload: bytes) -> tuple[Any, bytes]:
        released.wait(60)
        return "released", b""
    server = ProtocolServer("127.0.0.1", 0, {"echo": Handler(echo, lambda args: False), "held": Handler(held)},
                            None, wire.error_fields, 1 << 20, idle_ms=IDLE_MS).start()
    yield server, released
    released.set()
    server.shutdown()


def idle_for(server: ProtocolServer, seconds: float) -> bool:
    """Whether every connection of `server` has sent and received nothing for `seconds` (its own clock)."""
    now = server._loop.time()
    return all(now - c.active >= seconds for c in list(server._connections))


def test_a_connection_that_never_says_hello_is_closed_once_idle(served) -> None:
    server, _ = served
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        wait_for(lambda: len(server._connections) == 1, 10, "the server to take the connection")
        wait_for(lambda: closed_by_peer(raw), 30, "the server to close the connection that said nothing")
    assert not server._connections


def test_a_connection_with_a_request_in_flight_stays_past_the_idle_time(served) -> None:
    server, released = served
    connection = ProtocolConnection(f"127.0.0.1:{server.port}", None, None, 10.0, wire.exception_of)
    request = connection.send("held", {})
    wait_for(lambda: idle_for(server, 3 * IDLE_MS / 1000), 30, "three idle periods with the request in flight")
    assert not connection.closed_by_server() and len(server._connections) == 1
    released.set()
    assert bytes(connection.wait(request, 10)[0]) == b'"released"'
    wait_for(lambda: not server._connections, 30, "the connection closed once idle with nothing in flight")
    connection.close()


def test_a_client_sends_its_next_request_on_a_new_connection_after_the_server_closed_its_idle_one(served) -> None:
    server, _ = served
    clients = ProtocolClients(None, None, wire.exception_of)
    address = f"127.0.0.1:{server.port}"
    first = clients.get(address, 10.0)
    assert bytes(first.call("echo", {"n": 1})[0]) == b'{"n":1}'
    wait_for(lambda: closed_by_peer(first._sock) and time.monotonic() - first._used >= IDLE_CHECK_S, 30,
             "the server to close the idle connection")
    second = clients.get(address, 10.0)  # (before the check, the request was sent into the closed connection)
    assert second is not first and first.broken
    assert bytes(second.call("echo", {"n": 2})[0]) == b'{"n":2}'
    clients.close()
