"""A follower's replica_fetch at a real data node's fabric protocol port (docs/protocol.md#replica_fetch), with
tokens and ACLs: refused to a principal without cluster_action on the cluster, its arguments checked as the
DoAction's, answered with a JSON answer per partition; and the same in a fetch session (KIP-227): a malformed
`session` refused naming its form, the opening fetch answered with its session id and the partitions it carries,
a stale epoch refused as such."""
from __future__ import annotations

import pytest

import fabric
from fabric.common.errors import AuthorizationError, InvalidFetchSessionEpochError, InvalidRequestError
from fabric.common.protocol import messages
from fabric.common.protocol.connection import ProtocolConnection
from fabric.server import wire

TOKENS = {"admin-token": "admin", "node-token": "node", "user-token": "user"}
ACLS = """admin admin topic:*
admin admin cluster:fabric
node cluster_action cluster:fabric
user write topic:mine-rf
user read topic:mine-rf
user describe topic:mine-rf
"""


@pytest.fixture(scope="module")
def admin(secured_cluster):
    """The admin's client, with topic mine-rf (1 partition on the node)."""
    handle = fabric.connect(secured_cluster.coordinator.url("token=admin-token"))
    handle.create_topic("mine-rf", partitions=1, replication_factor=1)
    yield handle
    handle.close()


def connect(cluster, token: str) -> ProtocolConnection:
    """A protocol connection to node 1 with `token`."""
    address = cluster.nodes[1].status(token="admin-token")["protocol_address"]
    return ProtocolConnection(address, token, None, 30.0, wire.exception_of)


def test_a_replica_fetch_needs_cluster_action_and_is_checked_as_the_doaction(secured_cluster, admin) -> None:
    """A follower's replica_fetch at the node's protocol port: refused to a principal without cluster_action on the
    cluster, its arguments checked, and answered to the nodes' principal with a JSON answer per partition."""
    state = admin.cluster.describe_cluster(refresh=True).partitions[("mine-rf", 0)].state
    fetch = {"replica_id": 2, "partitions": [["mine-rf", 0, 0, state.leader_epoch, ""]], "max_wait_ms": 0}
    user = connect(secured_cluster, "user-token")
    with pytest.raises(AuthorizationError, match="principal 'user' is not allowed to cluster_action cluster:fabric"):
        user.call("replica_fetch", fetch)
    node = connect(secured_cluster, "node-token")
    with pytest.raises(InvalidRequestError, match="argument 'partitions' must be"):
        node.call("replica_fetch", {**fetch, "partitions": [["mine-rf", 0]]})
    result, payload = node.call("replica_fetch", fetch)
    [answer] = messages.decode_result(result, list[dict])
    assert answer["error"] == {"type": "IneligibleReplicaError",
                               "message": "node 2 is not a follower of mine-rf-0 (replicas [1])"}
    assert payload == b""
    user.close()
    node.close()


def test_a_replica_fetch_in_a_session_is_checked_and_answered_with_the_partitions_it_carries(secured_cluster,
                                                                                            admin) -> None:
    """A replica_fetch in a fetch session (KIP-227): a malformed `session` is refused naming its form, a principal
    without cluster_action is refused, the opening fetch is answered with its session id and each partition it
    carries, and a fetch quoting another epoch than the next is refused as such (the follower opens a new one)."""
    state = admin.cluster.describe_cluster(refresh=True).partitions[("mine-rf", 0)].state
    fetch = {"replica_id": 2, "partitions": [["mine-rf", 0, 0, state.leader_epoch, ""]], "max_wait_ms": 0}
    node = connect(secured_cluster, "node-token")
    for bad in ({"id": -1, "epoch": 0}, {"id": 0}, {"id": 0, "epoch": 0, "forgotten": [["mine-rf"]]}, [0, 0],
                {"id": 0, "epoch": 0, "extra": 1}):
        with pytest.raises(InvalidRequestError, match="argument 'session' must be"):
            node.call("replica_fetch", {**fetch, "session": bad})
    with pytest.raises(InvalidRequestError, match="opens a session .id 0. has epoch 0, got 3"):
        node.call("replica_fetch", {**fetch, "session": {"id": 0, "epoch": 3}})
    user = connect(secured_cluster, "user-token")
    with pytest.raises(AuthorizationError, match="not allowed to cluster_action"):
        user.call("replica_fetch", {**fetch, "session": {"id": 0, "epoch": 0}})
    result, payload = node.call("replica_fetch", {**fetch, "session": {"id": 0, "epoch": 0}})
    answer = messages.decode_result(result, dict)
    assert answer["session_id"] > 0 and payload == b""
    assert answer["partitions"] == [["mine-rf", 0, {"error": {
        "type": "IneligibleReplicaError", "message": "node 2 is not a follower of mine-rf-0 (replicas [1])"}}]]
    with pytest.raises(InvalidFetchSessionEpochError, match="is at epoch 1, the fetch quotes 7"):
        node.call("replica_fetch", {**fetch, "partitions": [], "session": {"id": answer["session_id"], "epoch": 7}})
    result, _ = node.call("replica_fetch", {**fetch, "partitions": [], "session": {"id": answer["session_id"],
                                                                                 "epoch": 1}})
    assert messages.decode_result(result, dict) == {"session_id": answer["session_id"], "partitions": []}
    user.close()
    node.close()


