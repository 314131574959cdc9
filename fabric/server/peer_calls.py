"""Calls from one server to a data node over the fabric protocol (docs/protocol.md): the coordinator's calls to
partition leaders (fabric.server.leader_calls), and a follower node's replica fetches from its leaders
(fabric.server.node.fetcher).

A node names its protocol address in its Flight `status`; it is asked once per node and kept until a connection to
it fails (a restarted node has a new port). The calls carry the caller's own token and TLS context (its Flight
`Connection`'s), share one connection per node, and get the time the caller has left (call_deadline); the node
authorizes each exactly as the Flight call it stands for, and its refusal is raised as the same fabric error.
A caller on an event loop takes the node's connection read by that loop instead (`on_loop`), opened in the
background once a blocking call has learnt the node's address.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import msgspec
import pyarrow.flight as flight

from fabric.common.errors import ClientTimeoutError, FabricError, UnsupportedVersionError
from fabric.common.protocol.connection import ProtocolClients, client_ssl
from fabric.common.protocol.loop_connection import LoopConnection
from fabric.common.protocol.payloads import Payload
from fabric.server import wire
from fabric.server.connection import Connection, action_call, time_left

log = logging.getLogger(__name__)
REOPEN_S = 1.0  # between attempts at opening a node's loop connection


class PeerCalls:
    """Protocol connections to the data nodes, by each node's Flight address, with `connection`'s token, TLS, CA
    and timeout."""

    def __init__(self, connection: Connection) -> None:
        options = connection.options
        self.connection = connection
        self.clients = ProtocolClients(options.token, client_ssl(connection.ca) if options.tls else None,
                                       wire.refusal)
        self._addresses: dict[str, str] = {}  # a node's Flight address -> its protocol address
        self._lock = threading.Lock()
        # read by one event loop, touched on its thread only: protocol address -> connection, those being opened
        self._on_loop: dict[str, LoopConnection] = {}
        self._opening: dict[str, asyncio.Task[None]] = {}
        self._open_after: dict[str, float] = {}  # not opened again before then (monotonic), after a failure
        self._loop: asyncio.AbstractEventLoop | None = None

    def call(self, node: str, kind: str, args: dict[str, Any], payload: Payload = b""
             ) -> tuple[msgspec.Raw, Payload]:
        """Request `kind` at the node whose Flight address is `node`: (its result, its payload), within the
        connection's timeout (less inside call_deadline). The node's refusal is raised as its fabric error;
        ClientTimeoutError if no answer came in time, ConnectionError (an OSError) if the node cannot be reached
        or the connection broke (the request may have been served)."""
        timeout_s = time_left(self.connection.options.timeout_s)
        address = self._address(node)
        try:
            return self.clients.get(address, timeout_s).call(kind, args, payload, timeout_s)
        except ClientTimeoutError:
            raise  # the connection stays: other requests on it are answered
        except OSError:
            with self._lock:
                self._addresses.pop(node, None)  # asked again: a restarted node has a new port
            self.clients.close([address])
            raise

    def on_loop(self, node: str) -> LoopConnection | None:
        """The connection to `node` read by the running loop (called on its thread; one loop per PeerCalls), if
        it is open; else None, and it is opened in the background if the node's protocol address is known (a
        blocking `call` learns it)."""
        with self._lock:
            address = self._addresses.get(node)
        if address is None:
            return None
        connection = self._on_loop.get(address)
        if connection is not None:
            if not connection.broken:
                return connection
            del self._on_loop[address]
        if address not in self._opening and time.monotonic() >= self._open_after.get(address, 0.0):
            self._loop = asyncio.get_running_loop()
            self._opening[address] = self._loop.create_task(self._open_on_loop(address))
        return None

    async def _open_on_loop(self, address: str) -> None:
        try:
            self._on_loop[address] = await LoopConnection.open(address, self.clients.token, self.clients.tls,
                                                               self.connection.options.timeout_s, wire.refusal)
            self._open_after.pop(address, None)
            log.info("opened the event loop's connection to the data node at %s", address)
        except (OSError, asyncio.TimeoutError, FabricError) as exc:
            # said once until it opens (its calls go the blocking way meanwhile, which report their own failures)
            log.log(logging.DEBUG if address in self._open_after else logging.INFO,
                    "cannot open the event loop's connection to %s (%s); tried again every %.0f s", address,
                    exc or type(exc).__name__, REOPEN_S)
            self._open_after[address] = time.monotonic() + REOPEN_S
        finally:
            del self._opening[address]

    def _address(self, node: str) -> str:
        """The protocol address `node` names in its Flight status; ConnectionError if it does not answer,
        UnsupportedVersionError if it names none (a node of an older version)."""
        with self._lock:
            known = self._addresses.get(node)
        if known is not None:
            return known
        try:
            status = action_call("status")(self.connection.client(node), self.connection.call_options)
        except wire.NO_ANSWER as exc:
            raise ConnectionError(wire.error_details(exc).get("message") or str(exc)) from None
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc) from None
        address = str(status.get("protocol_address") or "")
        if not address:
            raise UnsupportedVersionError(f"the data node at {node} serves no fabric protocol port (an older "
                                          "version): upgrade it to the coordinator's version")
        with self._lock:
            self._addresses[node] = address
        log.debug("data node %s serves the fabric protocol at %s", node, address)
        return address

    def close(self) -> None:
        self.clients.close()
        loop, on_loop = self._loop, list(self._on_loop.values())
        if loop is not None and on_loop:
            try:
                for connection in on_loop:
                    loop.call_soon_threadsafe(connection.close)
            except RuntimeError:  # the loop is closed, its connections with it
                pass
