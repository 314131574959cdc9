"""A data node's calls to other nodes over their fabric protocol ports (docs/protocol.md): a follower's
replica_fetch to its leader. One connection per node, shared by the node's threads, opened with the node's own
token and TLS (its Flight connection's: the coordinator URL's CA), within the time a Flight call of the node would
have (Connection.call_options: the URL's timeout, less inside call_deadline).

A node names its protocol address in its Flight `status`; it is asked once per node address and again after a
connection to it failed (a restarted node has a new port). A node that does not answer (no status, a port that
takes no connection, a connection that breaks, no answer in time) is LeaderNotAvailableError, as over Flight; a
refusal is the fabric error the node raised.
"""
from __future__ import annotations

import logging
from typing import Any

import msgspec
import pyarrow.flight as flight

from fabric.common.errors import FabricError, LeaderNotAvailableError
from fabric.common.protocol.connection import Payload, ProtocolClients, Refused, client_ssl
from fabric.server import wire
from fabric.server.connection import Connection, action_call, time_left

log = logging.getLogger(__name__)


class NodeProtocol:
    """The protocol connections of one node to the others, beside its Flight `connection` (same token and TLS)."""

    def __init__(self, connection: Connection) -> None:
        options = connection.options
        self.connection = connection
        self.clients = ProtocolClients(options.token, client_ssl(connection.ca) if options.tls else None,
                                       wire.exception_of)
        self._addresses: dict[str, str] = {}  # a node's Flight address -> its protocol address (dict operations
        # are atomic: the node's threads share it without a lock; two asking at once both ask the node)

    def call(self, node: str, address: str, kind: str, args: dict[str, Any], payload: Payload = b""
             ) -> tuple[msgspec.Raw, bytes]:
        """Request `kind` of `node` (as messages name it) at Flight address `address`, over its protocol port:
        (result, payload). Its refusal raised as the fabric error it is; LeaderNotAvailableError if it does not
        answer."""
        timeout_s = time_left(self.connection.options.timeout_s)
        protocol_address = self._address(node, address)
        try:
            return self.clients.get(protocol_address, timeout_s).call(kind, args, payload, timeout_s)
        except Refused as exc:
            raise FabricError(f"{node} at {address} refused {kind}: {exc.info.get('message', '')}") from None
        except OSError as exc:  # could not connect, broke, or no answer in time (ClientTimeoutError)
            self._forget(address, protocol_address)
            raise LeaderNotAvailableError(f"{node} at {address} did not answer (fabric protocol at "
                                          f"{protocol_address}: {exc})") from None

    def _address(self, node: str, address: str) -> str:
        """The protocol address of the node at Flight address `address`, asked of its status once."""
        known = self._addresses.get(address)
        if known:
            return known
        try:
            status = action_call("status")(self.connection.client(address), self.connection.call_options)
        except (flight.FlightUnavailableError, flight.FlightTimedOutError) as exc:
            raise LeaderNotAvailableError(f"{node} at {address} did not answer "
                                          f"({wire.error_details(exc).get('message') or exc})") from None
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc) from None
        known = str(status.get("protocol_address") or "")
        if not known:
            raise LeaderNotAvailableError(f"{node} at {address} serves no fabric protocol port; run every node "
                                          "at this fabric version")
        log.info("%s at %s serves the fabric protocol at %s", node, address, known)
        self._addresses[address] = known
        return known

    def _forget(self, address: str, protocol_address: str) -> None:
        """After `protocol_address` failed: ask the node at `address` again next time (a restarted node has a new
        port), on a new connection."""
        self._addresses.pop(address, None)
        self.clients.close([protocol_address])

    def close(self) -> None:
        self.clients.close()
