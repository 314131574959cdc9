"""The fabric protocol (docs/protocol.md) beside a client's Flight connection: which servers offer it, and calls
over it.

A server that offers the protocol names its address in its Flight `status` (a coordinator instance's
`protocol_address`, a data node's too); a client asks each server once and keeps the answer. A call returns None,
and the caller makes it over Flight, wherever the protocol cannot serve it: the server offers none (an older
one), its protocol port does not answer (the address is forgotten and asked again next time), or a coordinator
instance is not the active one (Flight's calls fail over to the active instance); a server of another protocol
version is called over Flight from then on. $FABRIC_CLIENT_PROTOCOL=flight makes every call over Flight.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable

import msgspec
import pyarrow as pa
import pyarrow.flight as flight

from fabric.common.errors import ClientTimeoutError, CoordinatorUnavailableError, FabricError, UnsupportedVersionError
from fabric.common.protocol import messages, payloads
from fabric.common.protocol.connection import Payload, ProtocolClients, ProtocolConnection, Refused, client_ssl
from fabric.common.types import CommittedOffset, Fetched, TopicPartition
from fabric.server import wire
from fabric.server.connection import Connection, action_call, time_left
from fabric.server.wire import refusal

log = logging.getLogger(__name__)
ENV_PROTOCOL = "FABRIC_CLIENT_PROTOCOL"
Answer = tuple[msgspec.Raw, Payload]


class _NotConnected(Exception):
    """A server's protocol port could not be reached: the call goes over Flight."""


class ProtocolCalls:
    """The protocol's connections of one client, beside its Flight `connection` (same token, TLS and CA)."""

    def __init__(self, connection: Connection) -> None:
        options = connection.options
        self.connection = connection
        self.enabled = os.environ.get(ENV_PROTOCOL, "fabric").lower() != "flight"
        self.clients = ProtocolClients(options.token, client_ssl(connection.ca) if options.tls else None,
                                       wire.exception_of)
        self._addresses: dict[str, str] = {}  # a server's Flight address -> its protocol address ("" if none)
        self._lock = threading.Lock()

    def _address(self, flight_address: str, lookup: Callable[[], str]) -> str:
        """The protocol address of the server at `flight_address` ("" if it has none, or does not answer now:
        the request goes over Flight, which fails over or names the error, and the server is asked again next
        time)."""
        with self._lock:
            known = self._addresses.get(flight_address)
        if known is None:
            try:
                known = lookup()
            except (FabricError, OSError) as exc:
                log.debug("%s did not say where it serves the fabric protocol (%s)", flight_address, exc)
                return ""
            with self._lock:
                self._addresses[flight_address] = known
        return known

    def _forget(self, flight_address: str, address: str) -> None:
        with self._lock:
            self._addresses.pop(flight_address, None)
        self.clients.close([address])

    def coordinator(self, kind: str, args: dict[str, Any], payload: Payload = b"", route: str | None = None
                    ) -> Answer | None:
        """A request to the coordinator instance the Flight connection calls now (for `route`); None: make it over
        Flight."""
        if not self.enabled:
            return None
        instance = self.connection.address_for(route)
        address = self._address(instance, lambda: self.connection.status_of(instance).protocol_address)
        if not address:
            return None
        try:
            return self._call(instance, address, kind, args, payload)
        except Refused as exc:
            if exc.info.get("type") == wire.NOT_ACTIVE:
                if route is not None and exc.info.get("active"):  # the instance serving the route was named
                    self.connection.reroute(route, instance, exc.info["active"])
                else:
                    self._forget(instance, address)
                return None
            raise refusal(exc.info) from None
        except CoordinatorUnavailableError as exc:  # nothing was served: Flight's call retries and fails over
            log.info("coordinator %s: %s; using Flight", instance, exc)
            return None
        except ClientTimeoutError:
            self._forget(instance, address)
            if route is not None:
                self.connection.reroute(route, instance, None)
            self.connection.move_from(instance)  # the next call starts elsewhere, as after a Flight timeout
            raise CoordinatorUnavailableError(f"no active coordinator answered at {instance} in time (fabric "
                                              "protocol); start one or check the fabric:// URL") from None
        except OSError as exc:  # it broke with the request sent: as a Flight call, made again (failing over)
            log.info("coordinator %s: its fabric protocol connection broke (%s); using Flight", instance, exc)
            self._forget(instance, address)
            return None

    def _call(self, server: str, address: str, kind: str, args: dict[str, Any], payload: Payload
              ) -> Answer | None:
        """One request to the protocol port `address` of `server`, within the caller's time (call_deadline);
        None if the port cannot be reached."""
        timeout_s = time_left(self.connection.options.timeout_s)
        try:
            connection = self._connected(server, address, timeout_s)
        except _NotConnected:
            return None
        if not connection.serves(kind):  # a server of an earlier release: Flight serves the call
            return None
        return connection.call(kind, args, payload, timeout_s)

    def _connected(self, server: str, address: str, timeout_s: float) -> ProtocolConnection:
        """The connection to `address` (the protocol port of `server`); _NotConnected if it cannot be opened
        (the address is forgotten: a restarted server has a new one)."""
        try:
            return self.clients.get(address, timeout_s)
        except UnsupportedVersionError as exc:  # a server of another version: Flight serves every version
            log.info("%s: %s; using Flight", server, exc)
            with self._lock:
                self._addresses[server] = ""
            raise _NotConnected() from None
        except OSError as exc:
            log.info("%s: its fabric protocol port %s does not answer (%s); using Flight", server, address, exc)
            self._forget(server, address)
            raise _NotConnected() from None

    def node(self, node_address: str, kind: str, args: dict[str, Any], payload: Payload = b"") -> Answer | None:
        """A request to the data node at `node_address`; None: make it over Flight. ConnectionError or
        ClientTimeoutError if its protocol port took the request and did not answer (it may have served it)."""
        sent = self.node_send(node_address, kind, args, payload)
        return None if sent is None else sent.wait()

    def node_send(self, node_address: str, kind: str, args: dict[str, Any], payload: Payload = b""
                  ) -> Sent | None:
        """Send a request to the data node at `node_address` now, its answer waited for later (`Sent.wait`, within
        the caller's time as it is now): requests sent one after another reach the node in that order, on one
        connection. None: make it over Flight. ConnectionError if the request could not be sent."""
        if not self.enabled:
            return None
        address = self._address(node_address, lambda: self._node_status(node_address))
        if not address:
            return None
        timeout_s = time_left(self.connection.options.timeout_s)
        try:
            connection = self._connected(node_address, address, timeout_s)
        except _NotConnected:
            return None
        try:
            request_id = connection.send(kind, args, payload)
        except OSError:
            self._forget(node_address, address)
            raise
        return Sent(self, node_address, address, connection, request_id, time.monotonic() + timeout_s)

    def _node_status(self, node_address: str) -> str:
        try:
            status = action_call("status")(self.connection.client(node_address), self.connection.call_options)
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc) from None
        return str(status.get("protocol_address") or "")

    def close(self) -> None:
        self.clients.close()


class Sent:
    """A request sent to a data node's protocol port (ProtocolCalls.node_send) whose answer is awaited until
    `deadline` (time.monotonic())."""

    def __init__(self, calls: ProtocolCalls, server: str, address: str, connection: ProtocolConnection,
                 request_id: int, deadline: float) -> None:
        self.calls, self.server, self.address, self.connection = calls, server, address, connection
        self.request_id, self.deadline = request_id, deadline

    def wait(self) -> Answer:
        """The answer; the node's refusal as its error, ConnectionError or ClientTimeoutError if the node took
        the request and did not answer by the deadline (it may have served it)."""
        try:
            return self.connection.wait(self.request_id, max(self.deadline - time.monotonic(), 0.0))
        except Refused as exc:
            raise refusal(exc.info) from None
        except ClientTimeoutError:
            raise
        except OSError:
            self.calls._forget(self.server, self.address)
            raise

    def cancel(self) -> None:
        """Nobody waits for the answer: it is dropped when it comes."""
        self.connection.forget(self.request_id)


def produce_payload(rows: pa.RecordBatch) -> tuple[bytes | pa.Buffer, ...]:
    """A produce's payload: its rows as an Arrow IPC stream."""
    return payloads.ipc_stream(rows.schema, [rows])


def fetched_of(answer: Answer) -> list[Fetched]:
    """The Fetched runs of a fetch's answer."""
    return payloads.fetched_of(*answer)


def offset_rows(offsets: Any) -> list[list[Any]] | None:
    """A commit's offsets as [topic, partition, offset] arrays; None for anything but a dict keyed by (topic,
    partition) pairs (sent over Flight, whose server names what is wrong with it)."""
    if not isinstance(offsets, dict) or not all(isinstance(k, tuple) and len(k) == 2 for k in offsets):
        return None
    return [[topic, partition, offset] for (topic, partition), offset in offsets.items()]


def committed_of(answer: Answer) -> dict[TopicPartition, CommittedOffset]:
    """A `committed` answer as the Coordinator interface returns it."""
    rows: list[dict[str, Any]] = messages.decode_result(answer[0], list[dict[str, Any]])
    return {(row["topic"], row["partition"]): CommittedOffset(row["offset"], row["metadata"], row["commit_ms"])
            for row in rows}
