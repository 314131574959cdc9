"""Calls from the coordinator to the leader of a replicated partition (the offsets topic's appends and reads,
transaction markers), over the fabric protocol (fabric.server.peer_calls), found in the controller's view of the
cluster and retried, with that view refreshed, while they fail retriably (a leader moving, a node restarting)."""
from __future__ import annotations

import logging
import time
from typing import Any

import msgspec

from fabric.common.errors import FabricError, LeaderNotAvailableError, UnknownPartitionError
from fabric.common.protocol.loop_connection import LoopConnection
from fabric.common.protocol.payloads import Payload
from fabric.common.types import ClusterDescription
from fabric.server.connection import Connection
from fabric.server.controller_driver import ControllerDriver
from fabric.server.peer_calls import PeerCalls

log = logging.getLogger(__name__)


class LeaderCalls:
    """Calls to partition leaders with `connection`'s token, TLS and timeout (fabric.server.peer_calls), each
    retried within `timeout_s`; the leaders as `controller` last described them (described again after a
    failure)."""

    def __init__(self, controller: ControllerDriver, connection: Connection, timeout_s: float) -> None:
        self.controller, self.peers, self.timeout_s = controller, PeerCalls(connection), timeout_s
        self._metadata: ClusterDescription | None = None

    def forget(self) -> None:
        """Describe the cluster again before the next call (a topic was created)."""
        self._metadata = None

    def leader(self, topic: str, partition: int) -> tuple[str, dict[str, Any]]:
        """The address of the partition's leader and what requests quote there (leader epoch, topic id)."""
        metadata = self._metadata
        if metadata is None or (topic, partition) not in metadata.partitions:
            metadata = self._metadata = self.controller.describe_cluster()
        return self._leader_in(metadata, topic, partition)

    def on_loop(self, topic: str, partition: int) -> tuple[LoopConnection, dict[str, Any]] | None:
        """The running loop's connection to the partition's leader and what requests quote there, as the cluster
        was last described, with nothing asked of anyone (on the loop's thread); None unless both are known
        (a blocking `call` learns them)."""
        metadata = self._metadata
        if metadata is None or (topic, partition) not in metadata.partitions:
            return None
        try:
            address, quoted = self._leader_in(metadata, topic, partition)
        except FabricError:
            return None
        connection = self.peers.on_loop(address)
        return None if connection is None else (connection, quoted)

    def _leader_in(self, metadata: ClusterDescription, topic: str, partition: int) -> tuple[str, dict[str, Any]]:
        registration = metadata.partitions.get((topic, partition))
        if registration is None:
            raise UnknownPartitionError(f"{topic}-{partition} is not placed on the data nodes (its topic was "
                                        "deleted, or is not replicated)")
        node = next((n for n in metadata.nodes if n.id == registration.state.leader), None)
        if node is None:
            self._metadata = None
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader now (in-sync replicas "
                                          f"{list(registration.state.isr)}); retry once the controller elected one")
        return node.address, {"leader_epoch": registration.state.leader_epoch,
                              "topic_id": metadata.topic_ids.get(topic, "")}

    def call(self, topic: str, partition: int, kind: str, args: dict[str, Any], payload: Payload = b""
             ) -> tuple[msgspec.Raw, Payload]:
        """Request `kind` with `args` and the quoted fields at the partition's leader: (its result, its payload),
        retried while it fails retriably, within timeout_s; a leader that does not answer is
        LeaderNotAvailableError."""
        deadline, attempt = time.monotonic() + self.timeout_s, 0
        while True:
            try:
                address, quoted = self.leader(topic, partition)
                try:
                    return self.peers.call(address, kind, {**args, **quoted}, payload)
                except OSError as exc:  # no connection, or no answer in time (ClientTimeoutError is a TimeoutError)
                    raise LeaderNotAvailableError(f"the leader of {topic}-{partition} at {address} did not answer "
                                                  f"({exc})") from None
            except FabricError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
                log.info("%s-%d: %s; retrying", topic, partition, exc)
                self._metadata = None
            time.sleep(min(0.02 * 2 ** min(attempt, 6), 1.0, max(0.0, deadline - time.monotonic())))
            attempt += 1
