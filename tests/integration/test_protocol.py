"""The fabric protocol (docs/protocol.md) against a real coordinator and data node with tokens and ACLs: requests
pipelined on one connection keep their order per partition, a retried idempotent produce is answered with the
first offset, every refusal is the error Flight gives with nothing written (another version, no hello, an unknown
type, an unknown token, another principal's producer id, an ACL, an oversized or truncated frame, a stale leader
epoch; the offsets producer id and transaction markers without cluster_action), commits answered on the
coordinator's event loop are checked and fenced as over Flight, and Java built from Spark's jars alone finds a
server's protocol port from its Flight port (the JVM reader's discovery), fetches a partition range as the Python
consumer reads it, and slices a payload's batches as the JVM reader does (refusing a damaged payload). A node
holds consumers' long polls without a thread each.
"""
from __future__ import annotations

import asyncio
import glob
import os
import shutil
import socket
import struct
import subprocess
import time

import msgspec
import pyarrow as pa
import pytest

import fabric
from fabric.client.protocol_calls import produce_payload
from fabric.common.errors import (
    AuthenticationError,
    AuthorizationError,
    ClientTimeoutError,
    CorruptRecordError,
    FencedLeaderEpochError,
    IllegalGenerationError,
    InvalidRequestError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownMemberError,
    UnsupportedVersionError,
)
from fabric.common.protocol import frames, messages, payloads
from fabric.common.protocol.cluster import cluster_of
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.protocol.loop_connection import LoopConnection
from fabric.common.records import to_storage
from fabric.common.types import JoinRequest, PartitionState
from fabric.coordinator.producer_ids import OFFSETS_PRODUCER_ID
from fabric.server import wire
from fabric.server.protocol_server import HELLO_MAX_BYTES, WORKERS
from fabric.spark import jar

TOKENS = {"admin-token": "admin", "node-token": "node", "user-token": "user", "other-token": "other"}
ACLS = """admin admin topic:*
admin admin group:*
admin admin cluster:fabric
node cluster_action cluster:fabric
user write topic:mine
user read topic:mine
user describe topic:mine
user write topic:mine-rf
user read topic:mine-rf
user describe topic:mine-rf
other write topic:mine
other describe topic:mine
"""
JAVA_SOURCES = os.path.join(os.path.dirname(__file__), "..", "jvm", "*.java")
needs_reader = pytest.mark.skipif(jar.path() is None or shutil.which("javac") is None,
                                  reason="the JVM reader is not built (no javac): make install")


def rows(*values: bytes, keys: list[bytes | None] | None = None) -> pa.RecordBatch:
    table = pa.table({"value": list(values), **({"key": keys} if keys is not None else {})})
    return to_storage(table, None, time.time_ns() // 1000).to_batches()[0]


@pytest.fixture(scope="module")
def admin(secured_cluster):
    """The admin's client, with topic mine (2 partitions, at the coordinator) and mine-rf (1 partition on the
    node)."""
    handle = fabric.connect(secured_cluster.coordinator.url("token=admin-token"))
    handle.create_topic("mine", partitions=2)
    handle.create_topic("mine-rf", partitions=1, replication_factor=1)
    yield handle
    handle.close()


def protocol_address(cluster, where: str) -> str:
    """The protocol address of the coordinator ("coordinator") or of node 1 ("node")."""
    if where == "coordinator":
        return cluster.coordinator.status(token="admin-token").protocol_address
    return cluster.nodes[1].status(token="admin-token")["protocol_address"]


def connect(cluster, where: str, token: str = "user-token") -> ProtocolConnection:
    return ProtocolConnection(protocol_address(cluster, where), token, None, 30.0, wire.exception_of)


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory) -> str:
    """tests/jvm's programs compiled against the JVM reader's jar (fabric.spark.jar) and pyspark's jars alone: the
    class path that runs them."""
    jars = os.path.join(os.path.dirname(pa.__file__), "..", "pyspark", "jars", "*")
    assert glob.glob(jars), "pyspark's jars are not installed"
    class_path = os.pathsep.join((str(jar.path()), jars))
    classes = tmp_path_factory.mktemp("jvm")
    subprocess.run(["javac", "-cp", class_path, "-d", str(classes), *glob.glob(JAVA_SOURCES)], check=True,
                   capture_output=True, timeout=600)
    return os.pathsep.join((str(classes), class_path))


def java(class_path: str, program: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "--add-opens=java.base/java.nio=ALL-UNNAMED", "-cp", class_path, program, *args],
                          capture_output=True, text=True, timeout=300)


def end_offset(admin, topic: str, partition: int) -> int:
    return admin.cluster.partition_state(topic, partition).end_offset


@pytest.mark.parametrize("where, topic, quoted", [("coordinator", "mine", False), ("node", "mine-rf", True)])
def test_pipelined_produces_are_appended_and_answered_in_order_per_partition(secured_cluster, admin, where, topic,
                                                                            quoted) -> None:
    connection = connect(secured_cluster, where)
    partitions = 2 if topic == "mine" else 1
    extra = {}
    if quoted:
        state = admin.cluster.describe_cluster(refresh=True).partitions[(topic, 0)].state
        extra = {"leader_epoch": state.leader_epoch, "acks": "all"}
    starts = [end_offset(admin, topic, p) for p in range(partitions)]
    sent = [(i % partitions, connection.send("produce", {"topic": topic, "partition": i % partitions, **extra},
                                             produce_payload(rows(b"v%d" % i)))) for i in range(40)]
    answers: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for partition, request_id in reversed(sent):  # waited for in the reverse order: answers come as they may
        answers[partition].insert(0, int(bytes(connection.wait(request_id, 30.0)[0])))
    for partition in range(partitions):
        assert answers[partition] == list(range(starts[partition], starts[partition] + 40 // partitions))
        fetched = admin.cluster.fetch(topic, partition, starts[partition], 1 << 20)
        values = [v for f in fetched for v in f.batch.column("value").to_pylist()]
        assert values == [b"v%d" % i for i in range(40) if i % partitions == partition]
    connection.close()


def test_a_retried_idempotent_produce_is_answered_with_the_first_offset(secured_cluster, admin) -> None:
    user = fabric.connect(secured_cluster.coordinator.url("token=user-token"))
    identity = user.cluster.init_producer_id()
    connection = connect(secured_cluster, "coordinator")
    produce = {"topic": "mine", "partition": 1, "producer_id": identity.producer_id,
               "producer_epoch": identity.producer_epoch}
    start = end_offset(admin, "mine", 1)
    first, again = (connection.send("produce", {**produce, "base_sequence": 0}, produce_payload(rows(b"a", b"b")))
                    for _ in range(2))  # a retry pipelined behind the first
    following = connection.send("produce", {**produce, "base_sequence": 2}, produce_payload(rows(b"c")))
    offsets = [int(bytes(connection.wait(i, 30.0)[0])) for i in (first, again, following)]
    late = connection.call("produce", {**produce, "base_sequence": 0}, produce_payload(rows(b"a", b"b")))
    assert offsets + [int(bytes(late[0]))] == [start, start, start + 2, start]
    assert end_offset(admin, "mine", 1) == start + 3
    connection.close()
    user.close()


def test_commits_on_the_coordinators_loop_are_authorized_fenced_checked_and_kept_in_order(secured_cluster,
                                                                                          admin) -> None:
    """The coordinator (offsets in its local offsets topic) answers commits on its event loop: with every check a
    commit has over Flight, and a connection's commits of one group landing in the order sent."""
    group, member = "loop-commits", connect(secured_cluster, "coordinator", "admin-token")
    base = int(bytes(member.call("produce", {"topic": "mine", "partition": 0}, produce_payload(rows(b"a", b"b")))[0]))
    user = connect(secured_cluster, "coordinator")
    with pytest.raises(AuthorizationError, match="principal 'user' is not allowed"):
        user.call("commit_offsets", {"group": group, "offsets": [["mine", 0, base]]})
    coordinator = admin.cluster.coordinator
    joined = coordinator.join_group(JoinRequest(group, "", ("mine",)))
    assert joined.ready
    coordinator.sync_group(group, joined.member_id, joined.generation)
    who = {"group": group, "member_id": joined.member_id, "generation": joined.generation}
    with pytest.raises(IllegalGenerationError, match="is stale"):
        member.call("commit_offsets", {**who, "generation": joined.generation + 1, "offsets": [["mine", 0, base]]})
    with pytest.raises(UnknownMemberError, match="only its members may commit"):
        member.call("commit_offsets", {"group": group, "offsets": [["mine", 0, base]]})
    with pytest.raises(InvalidRequestError, match="argument 'offsets' must be a list"):
        member.call("commit_offsets", {**who, "offsets": {"mine": base}})
    sent = [member.send("commit_offsets", {**who, "offsets": [["mine", 0, offset]]})
            for offset in [base, base + 2, base + 1] * 10]  # pipelined: the last sent is the one kept
    for request_id in sent:
        member.wait(request_id, 30.0)
    assert coordinator.committed(group)[("mine", 0)].offset == base + 1
    # a burst of several groups' commits (the loop writes those of one turn together): a stale one among them is
    # refused alone, the others are written
    alone = [f"{group}-{n}" for n in range(4)]
    burst = [member.send("commit_offsets", {"group": other, "offsets": [["mine", 0, base + 2]]}) for other in alone]
    stale = member.send("commit_offsets", {**who, "generation": joined.generation + 1, "offsets": [["mine", 0, base]]})
    burst += [member.send("commit_offsets", {"group": other, "offsets": [["mine", 0, base + 1]]}) for other in alone]
    for request_id in burst:
        member.wait(request_id, 30.0)
    with pytest.raises(IllegalGenerationError, match="is stale"):
        member.wait(stale, 30.0)
    kept = {other: coordinator.committed(other)[("mine", 0)].offset for other in alone}
    assert kept == dict.fromkeys(alone, base + 1)
    assert coordinator.committed(group)[("mine", 0)].offset == base + 1
    with pytest.raises(OffsetOutOfRangeError, match="cannot commit offset"):
        member.call("commit_offsets", {**who, "offsets": [["mine", 0, end_offset(admin, "mine", 0) + 1]]})
    assert coordinator.committed(group)[("mine", 0)].offset == base + 1
    coordinator.leave_group(group, joined.member_id)
    member.close()
    user.close()


def hello(version: int = 1) -> bytes:
    return frames.encode(messages.encode_request(1, "hello", {"protocol": "fabric", "version": version,
                                                                "token": "user-token"}))


def until_closed(address: str, data: bytes) -> list[messages.Answer]:
    """Send raw bytes and read the answers until the server closes the connection."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        raw.sendall(data)
        reader, answers = frames.FrameReader(), []
        while received := raw.recv(1 << 16):
            reader.feed(received)
            answers += [messages.decode_answer(f.header) for f in reader.frames()]
        return answers


@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_refusals_name_the_problem_and_write_nothing(secured_cluster, admin, where) -> None:
    topic = "mine" if where == "coordinator" else "mine-rf"
    before = end_offset(admin, topic, 0)
    address = protocol_address(secured_cluster, where)
    refused = until_closed(address, hello(version=2))[0]
    assert refused.error is not None and refused.error["type"] == UnsupportedVersionError.__name__
    assert refused.error["message"].startswith("this server speaks version 1 of the fabric protocol; the client "
                                               "speaks version 2")
    with pytest.raises(AuthenticationError, match="rejected the credentials: unknown token"):
        ProtocolConnection(address, "stolen-token", None, 30.0, wire.exception_of)
    connection = connect(secured_cluster, where)
    with pytest.raises(InvalidRequestError, match="unknown request type 'delete_everything'; this server takes"):
        connection.call("delete_everything", {})
    assert bytes(connection.call("echo", {"still": "open"})[0]) == b'{"still":"open"}'
    with pytest.raises(AuthorizationError, match="principal 'user' is not allowed to write topic:theirs"):
        connection.call("produce", {"topic": "theirs", "partition": 0}, produce_payload(rows(b"x")))
    victim = admin.cluster.init_producer_id()
    with pytest.raises(AuthorizationError, match="handed that id to another principal"):
        connection.call("produce", {"topic": topic, "partition": 0, "producer_id": victim.producer_id,
                                    "producer_epoch": 0, "base_sequence": 0}, produce_payload(rows(b"x")))
    with pytest.raises(InvalidRequestError, match="unknown argument"):
        connection.call("produce", {"topic": topic, "partition": 0, "rows": 1}, produce_payload(rows(b"x")))
    if where == "node":
        state = admin.cluster.describe_cluster(refresh=True).partitions[(topic, 0)].state
        with pytest.raises(FencedLeaderEpochError):
            connection.call("produce", {"topic": topic, "partition": 0, "leader_epoch": state.leader_epoch - 1},
                            produce_payload(rows(b"x")))
    header = messages.encode_request(9, "produce", {"topic": topic, "partition": 0})
    oversized = frames.PREFIX.pack(4 + len(header) + (200 << 20), len(header)) + header  # the rest never sent
    answer = until_closed(address, hello() + oversized)[-1]
    assert answer.id == 9 and answer.error is not None and answer.error["type"] == RecordTooLargeError.__name__
    assert "over socket.request.max.bytes" in answer.error["message"]
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as raw:  # a frame cut short, then closed
        raw.sendall(hello() + frames.encode(header, produce_payload(rows(b"cut")))[:-10])
    assert end_offset(admin, topic, 0) == before
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
        secured_cluster, admin, where) -> None:
    """Batches whose offsets point past their data are refused as CorruptRecordError naming the batch, before
    any is combined with the next or weighed against max.message.bytes by those offsets (an Arrow or numpy index
    error, logged as the server's own failure, before; or a record "too large" by the offsets' count)."""
    topic = "mine" if where == "coordinator" else "mine-rf"
    before = end_offset(admin, topic, 0)
    connection = connect(secured_cluster, where)
    produce = {"topic": topic, "partition": 0}
    small = rows(b"1234567", b"abcdefg", b"ABCDEFG")
    with pytest.raises(CorruptRecordError, match=r"batch 0 of an append to topic .* is not a valid Arrow batch: "
                                                 r".*out of bounds"):
        connection.call("produce", produce, pointing_past([small, rows(b"next")], 7, 3))
    large = rows(b"x" * 700_000, b"y" * 700_000)  # its buffers over the topic's max.message.bytes (1 MiB)
    with pytest.raises(CorruptRecordError, match=r"a batch for topic .* is not a valid Arrow batch: .*out of bounds"):
        connection.call("produce", produce, pointing_past([large], 700_000, 1))
    assert end_offset(admin, topic, 0) == before
    assert messages.decode_result(connection.call("produce", produce, produce_payload(small))[0], int) == before
    connection.close()


@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_a_fetch_of_no_bytes_answers_the_first_batch_and_a_negative_one_is_refused(secured_cluster, admin,
                                                                                 where) -> None:
    """max_bytes is about how much to read: 0 still answers the first batch there is, whatever its size (Kafka's
    KIP-74: a consumer always makes progress); below 0 is refused, naming it."""
    topic = "mine" if where == "coordinator" else "mine-rf"
    connection = connect(secured_cluster, where)
    first = end_offset(admin, topic, 0)
    connection.call("produce", {"topic": topic, "partition": 0}, produce_payload(rows(b"one", b"two")))
    fetch = {"topic": topic, "partition": 0, "offset": first}
    fetched = payloads.fetched_of(*connection.call("fetch", {**fetch, "max_bytes": 0}))
    assert [(f.offset, f.batch.column("value").to_pylist()) for f in fetched] == [(first, [b"one", b"two"])]
    with pytest.raises(InvalidRequestError, match="max_bytes must be 0 or more .* got -1"):
        connection.call("fetch", {**fetch, "max_bytes": -1})
    connection.close()


def test_the_coordinators_requests_to_a_node_need_cluster_action_for_the_offsets_producer_and_markers(
        secured_cluster, admin) -> None:
    """The coordinator's calls to partition leaders (offsets-topic appends as the fixed offsets producer, the
    markers of timed-out transactions, partition_state) are checked on a node's protocol port as over Flight: a
    principal without cluster_action on the cluster may neither write as the offsets producer nor write markers
    of a transactional id it may not write, and nothing is written; the coordinator's principal ("node") passes
    authorization (its stray marker is then refused as undecided)."""
    before = end_offset(admin, "mine-rf", 0)
    user, coordinator = connect(secured_cluster, "node"), connect(secured_cluster, "node", "node-token")
    with pytest.raises(AuthorizationError, match="'user' may not write as producer id .* the coordinator's offsets "
                                                 "producer, which needs cluster_action on cluster:fabric"):
        user.call("produce", {"topic": "mine-rf", "partition": 0, "acks": "all", "producer_id": OFFSETS_PRODUCER_ID,
                              "producer_epoch": 0, "base_sequence": 0}, produce_payload(rows(b"forged")))
    markers = {"topic": "mine-rf", "partition": 0, "transactional_id": "theirs", "commit": [],
               "abort": [[admin.cluster.init_producer_id().producer_id, 1]]}
    with pytest.raises(AuthorizationError, match="principal 'user' is not allowed to write transactional-id:theirs"):
        user.call("write_markers", markers)
    with pytest.raises(InvalidTxnStateError, match="not what the coordinator decided"):
        coordinator.call("write_markers", markers)
    with pytest.raises(AuthorizationError, match="principal 'other' is not allowed to describe topic:mine-rf"):
        connect(secured_cluster, "node", "other-token").call("partition_state", {"topic": "mine-rf", "partition": 0})
    state = messages.decode_result(user.call("partition_state", {"topic": "mine-rf", "partition": 0})[0],
                                   PartitionState)
    assert (state.topic, state.end_offset) == ("mine-rf", before) == ("mine-rf", end_offset(admin, "mine-rf", 0))
    user.close()
    coordinator.close()


def test_the_first_request_must_be_hello(secured_cluster) -> None:
    answers = until_closed(protocol_address(secured_cluster, "coordinator"),
                           frames.encode(messages.encode_request(5, "fetch", {"topic": "mine"})))
    assert [a.id for a in answers] == [5] and answers[0].error is not None
    assert answers[0].error["message"].startswith("the first request of a connection must be 'hello'")


@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_a_client_not_authenticated_yet_makes_the_server_hold_no_large_frame(secured_cluster, where) -> None:
    """Until its hello is answered, a connection's frame may be at most HELLO_MAX_BYTES (512 KiB, as Kafka's
    sasl.server.max.receive.size): a hello claiming 90 MiB is refused as soon as its header is in, and a frame whose
    header alone would pass the limit as soon as its length is, each with the limit named, and closed, before any of
    the payload was sent (four such connections held 360 MiB of a coordinator's memory before). After a hello,
    frames up to socket.request.max.bytes go through (test_refusals_name_the_problem_and_write_nothing)."""
    address = protocol_address(secured_cluster, where)
    header = messages.encode_request(3, "hello", {"protocol": "fabric", "version": 1, "token": "user-token"})
    refused = until_closed(address, frames.PREFIX.pack(4 + len(header) + (90 << 20), len(header)) + header)
    assert [a.id for a in refused] == [3] and refused[0].error is not None
    assert refused[0].error["type"] == RecordTooLargeError.__name__
    assert refused[0].error["message"].startswith("the first frame of a connection, its hello, may be at most "
                                                  f"{HELLO_MAX_BYTES} bytes (its client is not authenticated yet); "
                                                  f"got one of {4 + 4 + len(header) + (90 << 20)} bytes")
    refused = until_closed(address, frames.PREFIX.pack(4 + (600 << 10), 600 << 10))  # a 600 KiB header, unsent
    assert [a.id for a in refused] == [-1] and refused[0].error is not None
    assert refused[0].error["type"] == InvalidRequestError.__name__
    assert f"may be at most {HELLO_MAX_BYTES} bytes" in refused[0].error["message"]


@needs_reader
def test_a_java_program_with_sparks_jars_fetches_a_partition_as_the_python_consumer_reads_it(
        secured_cluster, admin, java_classes) -> None:
    start = end_offset(admin, "mine", 0)
    admin.cluster.append("mine", 0, rows(b"one", b"", b"three", keys=[b"k1", None, b"k3"]))
    admin.cluster.append("mine", 0, rows(*[b"v%d" % i for i in range(50)]))
    end = end_offset(admin, "mine", 0)
    done = java(java_classes, "FabricFetch", protocol_address(secured_cluster, "coordinator"), "user-token", "mine",
                "0", str(start + 1), str(end))
    assert done.returncode == 0, done.stderr[-3000:]
    with fabric.connect(secured_cluster.coordinator.url("token=user-token")) as user:
        consumer = user.consumer(auto_offset_reset="earliest")
        consumer.assign([("mine", 0)])
        consumer.seek("mine", 0, start + 1)
        records = []
        deadline = time.monotonic() + 60
        while len(records) < end - start - 1 and time.monotonic() < deadline:
            records += consumer.poll(0.5)
        consumer.close()
    expected = [f"{r.offset}\t{r.key.hex() if r.key is not None else '-'}\t{r.value.hex()}" for r in records]
    assert done.stdout.splitlines() == expected and len(expected) == 52


@needs_reader
def test_the_jvm_readers_payload_batches_are_sliced_whole_and_a_damaged_payload_is_refused(java_classes) -> None:
    """IpcBatches (the JVM reader's record batches, sliced from a fetch's payload with no copy) reads back what
    Arrow's own stream writer wrote, and refuses a payload cut short or that is no Arrow stream with an
    IOException, freeing what it held each time (tests/jvm/IpcBatchesCheck.java)."""
    done = java(java_classes, "io.sparkfabric.connector.IpcBatchesCheck")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "whole: 3 batches, 1003 rows"
    assert lines[1].startswith("cut short: ") and "cut short within a record batch" in lines[1]
    assert lines[2].startswith("junk: ")


@needs_reader
@pytest.mark.parametrize("where", ["coordinator", "node"])
def test_the_jvm_reader_finds_a_servers_protocol_port_from_its_flight_port(secured_cluster, java_classes,
                                                                            where) -> None:
    """A fabric:// URL names Flight ports; a JVM client has no gRPC library, yet Spark's Netty speaks HTTP/2, which
    carries the one unary Flight call (status) that names the server's protocol address."""
    server = secured_cluster.coordinator if where == "coordinator" else secured_cluster.nodes[1]
    host, _, port = server.address.rpartition(":")
    discovery = "io.sparkfabric.connector.FlightDiscovery"
    found = java(java_classes, discovery, host, port, "user-token")
    assert found.returncode == 0, found.stderr[-3000:]
    assert found.stdout.strip() == protocol_address(secured_cluster, where)
    refused = java(java_classes, discovery, host, port, "no-such-token")
    assert refused.returncode != 0 and "gRPC status 16" in refused.stderr  # UNAUTHENTICATED, named



def test_describe_cluster_over_the_protocol_is_flights_answer_kept_to_what_the_caller_may_describe(
        secured_cluster, admin) -> None:
    admin.create_topic("secret-rf", partitions=1, replication_factor=1, exist_ok=True)
    with fabric.connect(secured_cluster.coordinator.url("token=user-token")) as user:
        over_flight = user.cluster.connection.action("describe_cluster")
        seen = user.cluster.describe_cluster(refresh=True)  # the client's own routing metadata
    connection = connect(secured_cluster, "coordinator")
    try:
        assert connection.serves("describe_cluster") and not connection.serves("no-such-request")
        result, payload = connection.call("describe_cluster", {})
        with pytest.raises(InvalidRequestError, match="bogus"):
            connection.call("describe_cluster", {"bogus": 1})
    finally:
        connection.close()
    over_protocol = cluster_of(result)
    assert payload == b"" and over_protocol == over_flight == seen
    assert {topic for topic, _ in over_protocol.partitions} == {"mine-rf"}  # not secret-rf: no describe ACL
    assert [n.id for n in over_protocol.nodes] == [1] and "secret-rf" not in over_protocol.topic_ids
    connection = connect(secured_cluster, "coordinator", "admin-token")
    try:
        everything = cluster_of(connection.call("describe_cluster", {})[0])
    finally:
        connection.close()
    assert {topic for topic, _ in everything.partitions} >= {"mine-rf", "secret-rf"}


def test_a_fabric_client_produces_and_fetches_over_the_protocol_of_coordinator_and_node(secured_cluster, admin) -> None:
    with fabric.connect(secured_cluster.coordinator.url("token=user-token")) as user:
        with user.producer() as producer:
            for topic in ("mine", "mine-rf"):
                producer.send(topic, b"over the protocol", partition=0).get(timeout=30)
        consumer = user.consumer(auto_offset_reset="earliest")
        consumer.assign([("mine-rf", 0)])
        records = []
        deadline = time.monotonic() + 30
        while b"over the protocol" not in [r.value for r in records] and time.monotonic() < deadline:
            records += consumer.poll(0.5)
        consumer.close()
        assert b"over the protocol" in [r.value for r in records]
        assert set(user.cluster.protocol.clients._connections) == {
            protocol_address(secured_cluster, "coordinator"), protocol_address(secured_cluster, "node")}


@pytest.mark.parametrize("where, replication_factor", [("coordinator", None), ("node", 1)])
def test_waiting_consumer_fetches_hold_no_worker_and_answer_the_record_that_ends_their_wait(
        secured_cluster, admin, where, replication_factor) -> None:
    """Long polls at a log end are held on the server's event loop (consumer_fetches.py), not on worker threads,
    on a node as on the coordinator service (its own topics): more of them than the server has workers leave a
    long poll of a partition with records answered at once, and an append to their partition answers every one
    of them with the record."""
    topic = f"held-at-{where}"
    admin.create_topic(topic, partitions=2, replication_factor=replication_factor)
    with admin.producer() as producer:
        producer.send(topic, b"there already", partition=1).get(timeout=30)
    connection = connect(secured_cluster, where, token="admin-token")
    idle = [connection.send("fetch", {"topic": topic, "partition": 0, "offset": 0, "max_bytes": 1 << 20,
                                      "max_wait_ms": 60_000}) for _ in range(WORKERS + 6)]
    waited = connection.send("fetch", {"topic": topic, "partition": 1, "offset": 0, "max_bytes": 1 << 20,
                                       "max_wait_ms": 60_000})
    assert [r.batch.column("value").to_pylist() for r in payloads.fetched_of(*connection.wait(waited, 30))] == [
        [b"there already"]]
    with admin.producer() as producer:
        producer.send(topic, b"the end of the wait", partition=0).get(timeout=30)
    for request in idle:
        fetched = payloads.fetched_of(*connection.wait(request, 30))
        assert [(r.offset, r.batch.column("value").to_pylist()) for r in fetched] == [(0, [b"the end of the wait"])]
    connection.close()


def test_a_fetch_held_at_the_service_sees_another_process_append_to_its_directory(coordinators, tmp_path) -> None:
    """A held fetch is woken by its server's own appends; another process appending to the service's directory
    (a `file://` producer over it) calls nothing there, and the held fetch sees its record within a look every
    reader.FOREIGN_APPEND_POLL_S, not at the end of its max_wait_ms."""
    service = coordinators()
    with fabric.connect(service.url()) as served:
        served.create_topic("shared", partitions=1)
    connection = ProtocolConnection(service.status().protocol_address, None, None, 30.0, wire.exception_of)
    waiting = connection.send("fetch", {"topic": "shared", "partition": 0, "offset": 0, "max_bytes": 1 << 20,
                                        "max_wait_ms": 120_000})
    connection.call("echo", {}, b"")  # answered after the fetch was read, and found nothing: it is held
    began = time.monotonic()
    with fabric.connect("file://" + str(tmp_path / "data")) as embedded, embedded.producer() as producer:
        producer.send("shared", b"from another process").get(timeout=30)
    fetched = payloads.fetched_of(*connection.wait(waiting, 60))
    assert [r.batch.column("value").to_pylist() for r in fetched] == [[b"from another process"]]
    assert time.monotonic() - began < 60  # (the fetch would otherwise have waited 120 s)
    connection.close()


def test_a_connection_read_by_an_event_loop_answers_refuses_and_fails_what_is_in_flight(secured_cluster, admin
                                                                                        ) -> None:
    """LoopConnection (the coordinator's connection to a leader, read by its event loop): answers and refusals come
    back as the blocking connection's do, a stolen token is refused at open, and requests in flight when the
    connection closes fail with ConnectionError."""
    address = protocol_address(secured_cluster, "node")

    async def converse() -> None:
        with pytest.raises(AuthenticationError, match="rejected the credentials: unknown token"):
            await LoopConnection.open(address, "stolen-token", None, 30.0, wire.exception_of)
        connection = await LoopConnection.open(address, "user-token", None, 30.0, wire.exception_of)
        echoed, refused = (connection.request("echo", {"n": n}, b"", 30.0) for n in (1, 2)), \
            connection.request("delete_everything", {}, b"", 30.0)
        assert [bytes((await answer)[0]) for answer in echoed] == [b'{"n":1}', b'{"n":2}']
        with pytest.raises(InvalidRequestError, match="unknown request type 'delete_everything'"):
            await refused
        waiting = connection.request("echo", {"n": 3}, b"", 30.0)
        connection.close()  # before the loop read its answer
        with pytest.raises(ConnectionError):
            await waiting
        assert connection.broken
        with socket.create_server(("127.0.0.1", 0)) as silent:  # takes connections, never answers
            port = silent.getsockname()[1]
            _, unanswered = await asyncio.get_running_loop().create_connection(
                lambda: LoopConnection(f"127.0.0.1:{port}", wire.exception_of), "127.0.0.1", port)
            with pytest.raises(ClientTimeoutError, match="did not answer in time"):
                await unanswered.request("echo", {}, b"", 0.2)
            assert not unanswered.broken  # the connection stays: other answers may still come
            unanswered.close()
    asyncio.run(converse())


def test_a_tls_server_takes_the_protocol_over_tls_only(coordinators, tls_files) -> None:
    cert, key = tls_files
    instance = coordinators(tls=(cert, key))
    with fabric.connect(instance.url(f"ca={cert}")) as fab:
        fab.create_topic("secure", config={"max.message.bytes": 4 << 20})
        assert fab.cluster.append("secure", 0, rows(b"sealed")) == 0
        assert fab.cluster.fetch("secure", 0, 0, 1 << 20)[0].batch.column("value").to_pylist() == [b"sealed"]
        # frames over frames.LARGE_FRAME_BYTES both ways: the answer's payload received into a buffer of its own
        values = [bytes([i % 251]) * 1000 for i in range(3000)]
        assert fab.cluster.append("secure", 0, rows(*values)) == 1
        fetched = fab.cluster.fetch("secure", 0, 1, 8 << 20)
        assert [v for f in fetched for v in f.batch.column("value").to_pylist()] == values
        address = fab.cluster.connection.status_of(instance.address).protocol_address
        assert list(fab.cluster.protocol.clients._connections) == [address]
    with pytest.raises(ConnectionError):  # a plaintext client gets no answer it can read
        ProtocolConnection(address, None, None, 5.0, wire.exception_of)


def test_a_client_of_another_protocol_version_is_told_so_and_uses_flight(secured_cluster, admin, monkeypatch) -> None:
    monkeypatch.setattr(messages, "VERSION", 2)  # this client speaks version 2; the servers speak 1
    address = protocol_address(secured_cluster, "coordinator")
    with pytest.raises(UnsupportedVersionError, match="this server speaks version 1 of the fabric protocol; the "
                                                      "client speaks version 2 of 'fabric': use a client of protocol "
                                                      "version 1"):
        ProtocolConnection(address, "user-token", None, 30.0, wire.exception_of)
    with fabric.connect(secured_cluster.coordinator.url("token=user-token")) as user:
        start = end_offset(admin, "mine", 1)
        assert user.cluster.append("mine", 1, rows(b"over flight")) == start
        assert not user.cluster.protocol.clients._connections
        assert user.cluster.protocol._addresses[secured_cluster.coordinator.address] == ""


def test_list_topics_over_the_protocol_is_flights_answer_kept_to_what_the_caller_may_describe(
        secured_cluster, admin) -> None:
    admin.create_topic("secret-rf", partitions=1, replication_factor=1, exist_ok=True)
    with fabric.connect(secured_cluster.coordinator.url("token=user-token")) as user:
        over_flight = user.cluster.connection.action("list_topics")
    connection = connect(secured_cluster, "coordinator")
    try:
        result, payload = connection.call("list_topics", {})
        assert msgspec.json.decode(result) == over_flight and payload == b""
        with pytest.raises(InvalidRequestError, match="bogus"):
            connection.call("list_topics", {"bogus": 1})
    finally:
        connection.close()
    assert sorted(over_flight) == ["mine", "mine-rf"]  # not secret-rf: no describe ACL
    connection = connect(secured_cluster, "coordinator", "admin-token")
    try:
        assert {"mine", "mine-rf", "secret-rf"} <= set(msgspec.json.decode(connection.call("list_topics", {})[0]))
    finally:
        connection.close()


@pytest.mark.parametrize("where, topic", [("coordinator", "mine"), ("node", "mine-rf")])
def test_offset_for_time_over_the_protocol_is_flights_answer_and_needs_describe(secured_cluster, admin, where,
                                                                                topic) -> None:
    before_us = time.time_ns() // 1000
    with fabric.connect(secured_cluster.coordinator.url("token=user-token")) as user:
        with user.producer() as producer:
            producer.send(topic, b"timed", partition=0).get(timeout=30)
        expected = user.cluster.offset_for_time(topic, 0, before_us)
    args: dict = {"topic": topic, "partition": 0, "timestamp_us": before_us}
    if where == "node":
        state = admin.cluster.describe_cluster(refresh=True).partitions[(topic, 0)].state
        args.update(leader_epoch=state.leader_epoch, topic_id=admin.cluster.describe_cluster().topic_ids[topic])
    connection = connect(secured_cluster, where)
    try:
        result, payload = connection.call("offset_for_time", args)
        assert expected is not None and msgspec.json.decode(result) == expected and payload == b""
        assert msgspec.json.decode(connection.call("offset_for_time", {**args, "timestamp_us": 2**62})[0]) is None
    finally:
        connection.close()
    admin.create_topic("secret", partitions=1, exist_ok=True)
    connection = connect(secured_cluster, "coordinator")
    try:
        with pytest.raises(AuthorizationError):
            connection.call("offset_for_time", {"topic": "secret", "partition": 0, "timestamp_us": 0})
    finally:
        connection.close()
