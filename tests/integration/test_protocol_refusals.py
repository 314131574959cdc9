"""The fabric protocol's refusals (docs/protocol.md) on a real coordinator and data node with tokens and ACLs: each
is the error Flight gives, with nothing written (another version, no hello, an unknown type, an unknown token,
another principal's producer id, an ACL, an oversized or truncated frame, a stale leader epoch, batches whose
offsets point past their data, a negative max_bytes; the offsets producer id and transaction markers without
cluster_action), a client not authenticated yet makes the server hold no large frame, and a client of another
protocol version is told so and uses Flight. The secured cluster's principals, grants and helpers are
tests/protocol_kit.py's (the `protocol_kit`, `protocol_cluster` and `protocol_admin` fixtures).
"""
from __future__ import annotations

import socket
import struct

import pyarrow as pa
import pytest

import fabric
from fabric.client.protocol_calls import produce_payload
from fabric.common.errors import (
    AuthenticationError,
    AuthorizationError,
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRequestError,
    InvalidTxnStateError,
    RecordTooLargeError,
    UnsupportedVersionError,
)
from fabric.common.protocol import frames, messages, payloads
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.types import PartitionState
from fabric.coordinator.producer_ids import OFFSETS_PRODUCER_ID
from fabric.server import wire
from fabric.server.protocol_server import HELLO_MAX_BYTES


@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_refusals_name_the_problem_and_write_nothing(protocol_kit, protocol_cluster, protocol_admin, where) -> None:
    topic = "mine" if where == "coordinator" else "mine-rf"
    before = protocol_kit.end_offset(protocol_admin, topic, 0)
    address = protocol_kit.protocol_address(protocol_cluster, where)
    refused = protocol_kit.until_closed(address, protocol_kit.hello(version=2))[0]
    assert refused.error is not None and refused.error["type"] == UnsupportedVersionError.__name__
    assert refused.error["message"].startswith("this server speaks version 1 of the fabric protocol; the client "
                                               "speaks version 2")
    with pytest.raises(AuthenticationError, match="rejected the credentials: unknown token"):
        ProtocolConnection(address, "stolen-token", None, 30.0, wire.exception_of)
    connection = protocol_kit.connect(protocol_cluster, where)
    with pytest.raises(InvalidRequestError, match="unknown request type 'delete_everything'; this server takes"):
        connection.call("delete_everything", {})
    assert bytes(connection.call("echo", {"still": "open"})[0]) == b'{"still":"open"}'
    with pytest.raises(AuthorizationError, match="principal 'user' is not allowed to write topic:theirs"):
        connection.call("produce", {"topic": "theirs", "partition": 0}, produce_payload(protocol_kit.rows(b"x")))
    victim = protocol_admin.cluster.init_producer_id()
    with pytest.raises(AuthorizationError, match="handed that id to another principal"):
        connection.call("produce", {"topic": topic, "partition": 0, "producer_id": victim.producer_id,
                                    "producer_epoch": 0, "base_sequence": 0}, produce_payload(protocol_kit.rows(b"x")))
    with pytest.raises(InvalidRequestError, match="unknown argument"):
        connection.call("produce", {"topic": topic, "partition": 0, "rows": 1},
                        produce_payload(protocol_kit.rows(b"x")))
    if where == "node":
        state = protocol_admin.cluster.describe_cluster(refresh=True).partitions[(topic, 0)].state
        with pytest.raises(FencedLeaderEpochError):
            connection.call("produce", {"topic": topic, "partition": 0, "leader_epoch": state.leader_epoch - 1},
                            produce_payload(protocol_kit.rows(b"x")))
    header = messages.encode_request(9, "produce", {"topic": topic, "partition": 0})
    oversized = frames.PREFIX.pack(4 + len(header) + (200 << 20), len(header)) + header  # the rest never sent
    answer = protocol_kit.until_closed(address, protocol_kit.hello() + oversized)[-1]
    assert answer.id == 9 and answer.error is not None and answer.error["type"] == RecordTooLargeError.__name__
    assert "over socket.request.max.bytes" in answer.error["message"]
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:  # a frame cut short, then closed
        raw.sendall(protocol_kit.hello() + frames.encode(header, produce_payload(protocol_kit.rows(b"cut")))[:-10])
    assert protocol_kit.end_offset(protocol_admin, topic, 0) == before
    connection.close()


def pointing_past(batches: list[pa.RecordBatch], size: int, slot: int) -> bytes:
    """An Arrow IPC stream of `batches` whose first value column of `size`-byte values has offset `slot` pointing
    2^30 bytes on, past its data (patched in the stream's bytes: Arrow writes only what holds)."""
    stream = bytearray(b"".join(bytes(part) for part in payloads.ipc_stream(batches[0].schema, batches)))
    count = batches[0].num_rows
    offsets = struct.pack(f"<{count + 1}i", *range(0, (count + 1) * size, size))
    at = stream.index(offsets) + 4 * slot
    stream[at:at + 4] = struct.pack("<i", 1 << 30)
    return bytes(stream)


@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_a_produce_whose_offsets_point_past_their_data_is_refused_as_corrupt_with_nothing_written(
        protocol_kit, protocol_cluster, protocol_admin, where) -> None:
    """Batches whose offsets point past their data are refused as CorruptRecordError naming the batch, before
    any is combined with the next or weighed against max.message.bytes by those offsets (an Arrow or numpy index
    error, logged as the server's own failure, before; or a record "too large" by the offsets' count)."""
    topic = "mine" if where == "coordinator" else "mine-rf"
    before = protocol_kit.end_offset(protocol_admin, topic, 0)
    connection = protocol_kit.connect(protocol_cluster, where)
    produce = {"topic": topic, "partition": 0}
    small = protocol_kit.rows(b"1234567", b"abcdefg", b"ABCDEFG")
    with pytest.raises(CorruptRecordError, match=r"batch 0 of an append to topic .* is not a valid Arrow batch: "
                                                 r".*out of bounds"):
        connection.call("produce", produce, pointing_past([small, protocol_kit.rows(b"next")], 7, 3))
    large = protocol_kit.rows(b"x" * 700_000, b"y" * 700_000)  # its buffers over the topic's max.message.bytes (1 MiB)
    with pytest.raises(CorruptRecordError, match=r"a batch for topic .* is not a valid Arrow batch: .*out of bounds"):
        connection.call("produce", produce, pointing_past([large], 700_000, 1))
    assert protocol_kit.end_offset(protocol_admin, topic, 0) == before
    assert messages.decode_result(connection.call("produce", produce, produce_payload(small))[0], int) == before
    connection.close()


@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_a_fetch_of_no_bytes_answers_the_first_batch_and_a_negative_one_is_refused(
        protocol_kit, protocol_cluster, protocol_admin, where) -> None:
    """max_bytes is about how much to read: 0 still answers the first batch there is, whatever its size (Kafka's
    KIP-74: a consumer always makes progress); below 0 is refused, naming it."""
    topic = "mine" if where == "coordinator" else "mine-rf"
    connection = protocol_kit.connect(protocol_cluster, where)
    first = protocol_kit.end_offset(protocol_admin, topic, 0)
    connection.call("produce", {"topic": topic, "partition": 0}, produce_payload(protocol_kit.rows(b"one", b"two")))
    fetch = {"topic": topic, "partition": 0, "offset": first}
    fetched = payloads.fetched_of(*connection.call("fetch", {**fetch, "max_bytes": 0}))
    assert [(f.offset, f.batch.column("value").to_pylist()) for f in fetched] == [(first, [b"one", b"two"])]
    with pytest.raises(InvalidRequestError, match="max_bytes must be 0 or more .* got -1"):
        connection.call("fetch", {**fetch, "max_bytes": -1})
    connection.close()


def test_the_coordinators_requests_to_a_node_need_cluster_action_for_the_offsets_producer_and_markers(
        protocol_kit, protocol_cluster, protocol_admin) -> None:
    """The coordinator's calls to partition leaders (offsets-topic appends as the fixed offsets producer, the
    markers of timed-out transactions, partition_state) are checked on a node's protocol port as over Flight: a
    principal without cluster_action on the cluster may neither write as the offsets producer nor write markers
    of a transactional id it may not write, and nothing is written; the coordinator's principal ("node") passes
    authorization (its stray marker is then refused as undecided)."""
    before = protocol_kit.end_offset(protocol_admin, "mine-rf", 0)
    user, coordinator = (protocol_kit.connect(protocol_cluster, "node"),
                         protocol_kit.connect(protocol_cluster, "node", "node-token"))
    with pytest.raises(AuthorizationError, match="'user' may not write as producer id .* the coordinator's offsets "
                                                 "producer, which needs cluster_action on cluster:fabric"):
        user.call("produce", {"topic": "mine-rf", "partition": 0, "acks": "all", "producer_id": OFFSETS_PRODUCER_ID,
                              "producer_epoch": 0, "base_sequence": 0}, produce_payload(protocol_kit.rows(b"forged")))
    markers = {"topic": "mine-rf", "partition": 0, "transactional_id": "theirs", "commit": [],
               "abort": [[protocol_admin.cluster.init_producer_id().producer_id, 1]]}
    with pytest.raises(AuthorizationError, match="principal 'user' is not allowed to write transactional-id:theirs"):
        user.call("write_markers", markers)
    with pytest.raises(InvalidTxnStateError, match="not what the coordinator decided"):
        coordinator.call("write_markers", markers)
    with pytest.raises(AuthorizationError, match="principal 'other' is not allowed to describe topic:mine-rf"):
        protocol_kit.connect(protocol_cluster, "node", "other-token").call("partition_state",
                                                                           {"topic": "mine-rf", "partition": 0})
    state = messages.decode_result(user.call("partition_state", {"topic": "mine-rf", "partition": 0})[0],
                                   PartitionState)
    assert (state.topic, state.end_offset) == ("mine-rf", before) == (
        "mine-rf", protocol_kit.end_offset(protocol_admin, "mine-rf", 0))
    user.close()
    coordinator.close()


def test_the_first_request_must_be_hello(protocol_kit, protocol_cluster) -> None:
    answers = protocol_kit.until_closed(protocol_kit.protocol_address(protocol_cluster, "coordinator"),
                           frames.encode(messages.encode_request(5, "fetch", {"topic": "mine"})))
    assert [a.id for a in answers] == [5] and answers[0].error is not None
    assert answers[0].error["message"].startswith("the first request of a connection must be 'hello'")


@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_a_client_not_authenticated_yet_makes_the_server_hold_no_large_frame(protocol_kit, protocol_cluster,
                                                                              where) -> None:
    """Until its hello is answered, a connection's frame may be at most HELLO_MAX_BYTES (512 KiB, as Kafka's
    sasl.server.max.receive.size): a hello claiming 90 MiB is refused as soon as its header is in, and a frame whose
    header alone would pass the limit as soon as its length is, each with the limit named, and closed, before any of
    the payload was sent (four such connections held 360 MiB of a coordinator's memory before). After a hello,
    frames up to socket.request.max.bytes go through (test_refusals_name_the_problem_and_write_nothing)."""
    address = protocol_kit.protocol_address(protocol_cluster, where)
    header = messages.encode_request(3, "hello", {"protocol": "fabric", "version": 1, "token": "user-token"})
    refused = protocol_kit.until_closed(address, frames.PREFIX.pack(4 + len(header) + (90 << 20), len(header)) + header)
    assert [a.id for a in refused] == [3] and refused[0].error is not None
    assert refused[0].error["type"] == RecordTooLargeError.__name__
    assert refused[0].error["message"].startswith("the first frame of a connection, its hello, may be at most "
                                                  f"{HELLO_MAX_BYTES} bytes (its client is not authenticated yet); "
                                                  f"got one of {4 + 4 + len(header) + (90 << 20)} bytes")
    # a 600 KiB header, unsent
    refused = protocol_kit.until_closed(address, frames.PREFIX.pack(4 + (600 << 10), 600 << 10))
    assert [a.id for a in refused] == [-1] and refused[0].error is not None
    assert refused[0].error["type"] == InvalidRequestError.__name__
    assert f"may be at most {HELLO_MAX_BYTES} bytes" in refused[0].error["message"]


def test_a_client_of_another_protocol_version_is_told_so_and_uses_flight(protocol_kit, protocol_cluster,
                                                                          protocol_admin, monkeypatch) -> None:
    monkeypatch.setattr(messages, "VERSION", 2)  # this client speaks version 2; the servers speak 1
    address = protocol_kit.protocol_address(protocol_cluster, "coordinator")
    with pytest.raises(UnsupportedVersionError, match="this server speaks version 1 of the fabric protocol; the "
                                                      "client speaks version 2 of 'fabric': use a client of protocol "
                                                      "version 1"):
        ProtocolConnection(address, "user-token", None, 30.0, wire.exception_of)
    with fabric.connect(protocol_cluster.coordinator.url("token=user-token")) as user:
        start = protocol_kit.end_offset(protocol_admin, "mine", 1)
        assert user.cluster.append("mine", 1, protocol_kit.rows(b"over flight")) == start
        assert not user.cluster.protocol.clients._connections
        assert user.cluster.protocol._addresses[protocol_cluster.coordinator.address] == ""
