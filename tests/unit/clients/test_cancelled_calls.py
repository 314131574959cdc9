"""A Flight call its server cancels (gRPC CANCELLED, as a server that stops serving with calls under way answers) is
a call the server did not complete: the client goes on as after a refused connection, never with a bare error."""
from __future__ import annotations

from typing import Iterator

import pyarrow.flight as flight
import pytest

from fabric.client.routing import RoutingCluster
from fabric.common.errors import LeaderNotAvailableError
from fabric.common.types import NodeInfo
from fabric.server import wire
from fabric.server.connection import Connection, action_call, parse_url


class Server(flight.FlightServerBase):
    """A Flight server in this process that cancels every action, or answers each with "served"."""

    def __init__(self, cancels: bool) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.cancels = cancels
        self.calls = 0

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[flight.Result]:
        self.calls += 1
        if self.cancels:
            raise flight.FlightCancelledError("CANCELLED")
        return iter([flight.Result(wire.dumps("served"))])


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    cancelling, answering = Server(cancels=True), Server(cancels=False)
    yield cancelling, answering
    cancelling.shutdown()
    answering.shutdown()


def test_a_coordinator_call_cancelled_by_one_instance_fails_over_to_the_next(servers) -> None:
    cancelling, answering = servers
    connection = Connection(parse_url(f"fabric://127.0.0.1:{cancelling.port},127.0.0.1:{answering.port}"
                                      "?timeout_ms=30000"))
    try:
        assert connection.call(action_call("status")) == "served"
    finally:
        connection.close()
    assert (cancelling.calls, answering.calls) == (1, 1)


def test_a_node_call_cancelled_by_the_leader_says_the_leader_did_not_answer(servers) -> None:
    cancelling, _ = servers
    cluster = RoutingCluster(f"fabric://127.0.0.1:{cancelling.port}")
    node = NodeInfo(id=2, address=f"127.0.0.1:{cancelling.port}", node_epoch=1, alive=True)
    try:
        with pytest.raises(LeaderNotAvailableError, match=r"node 2 at .* the leader of t-0, did not answer"):
            cluster._at_node(node, "t", 0, action_call("status"))
    finally:
        cluster.close()
    assert cancelling.calls == 1
