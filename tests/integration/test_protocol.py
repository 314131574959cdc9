"""The fabric protocol (docs/protocol.md) against a real coordinator and data node with tokens and ACLs: requests
pipelined on one connection keep their order per partition, a retried idempotent produce is answered with the
first offset, commits answered on the coordinator's event loop are checked and fenced as over Flight, describe_cluster,
list_topics and offset_for_time are Flight's answers kept to what the caller may describe, a fabric client produces
and fetches over it, over TLS too, and a connection read by an event loop answers as the blocking one does; Java built
from Spark's jars alone finds a server's protocol port from its Flight port (the JVM reader's discovery), fetches a
partition range as the Python consumer reads it, and slices a payload's batches as the JVM reader does (refusing a
damaged payload). A node holds consumers' long polls without a thread each. The refusals are
test_protocol_refusals.py's; the secured cluster's principals, grants and helpers are tests/protocol_kit.py's (the
`protocol_kit`, `protocol_cluster` and `protocol_admin` fixtures).
"""
from __future__ import annotations

import asyncio
import glob
import os
import shutil
import socket
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
    IllegalGenerationError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownMemberError,
)
from fabric.common.protocol import payloads
from fabric.common.protocol.cluster import cluster_of
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.protocol.loop_connection import LoopConnection
from fabric.common.types import JoinRequest
from fabric.server import wire
from fabric.server.protocol_server import WORKERS
from fabric.spark import jar

JAVA_SOURCES = os.path.join(os.path.dirname(__file__), "..", "jvm", "*.java")
needs_reader = pytest.mark.skipif(jar.path() is None or shutil.which("javac") is None,
                                  reason="the JVM reader is not built (no javac): make install")


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


@pytest.mark.parametrize("where, topic, quoted", [("coordinator", "mine", False), ("node", "mine-rf", True)])
def test_pipelined_produces_are_appended_and_answered_in_order_per_partition(protocol_kit, protocol_cluster,
                                                                            protocol_admin, where, topic,
                                                                            quoted) -> None:
    connection = protocol_kit.connect(protocol_cluster, where)
    partitions = 2 if topic == "mine" else 1
    extra = {}
    if quoted:
        state = protocol_admin.cluster.describe_cluster(refresh=True).partitions[(topic, 0)].state
        extra = {"leader_epoch": state.leader_epoch, "acks": "all"}
    starts = [protocol_kit.end_offset(protocol_admin, topic, p) for p in range(partitions)]
    sent = [(i % partitions, connection.send("produce", {"topic": topic, "partition": i % partitions, **extra},
                                             produce_payload(protocol_kit.rows(b"v%d" % i)))) for i in range(40)]
    answers: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for partition, request_id in reversed(sent):  # waited for in the reverse order: answers come as they may
        answers[partition].insert(0, int(bytes(connection.wait(request_id, 30.0)[0])))
    for partition in range(partitions):
        assert answers[partition] == list(range(starts[partition], starts[partition] + 40 // partitions))
        fetched = protocol_admin.cluster.fetch(topic, partition, starts[partition], 1 << 20)
        values = [v for f in fetched for v in f.batch.column("value").to_pylist()]
        assert values == [b"v%d" % i for i in range(40) if i % partitions == partition]
    connection.close()


def test_a_retried_idempotent_produce_is_answered_with_the_first_offset(protocol_kit, protocol_cluster,
                                                                        protocol_admin) -> None:
    user = fabric.connect(protocol_cluster.coordinator.url("token=user-token"))
    identity = user.cluster.init_producer_id()
    connection = protocol_kit.connect(protocol_cluster, "coordinator")
    produce = {"topic": "mine", "partition": 1, "producer_id": identity.producer_id,
               "producer_epoch": identity.producer_epoch}
    start = protocol_kit.end_offset(protocol_admin, "mine", 1)
    first, again = (connection.send("produce", {**produce, "base_sequence": 0},
                                    produce_payload(protocol_kit.rows(b"a", b"b")))
                    for _ in range(2))  # a retry pipelined behind the first
    following = connection.send("produce", {**produce, "base_sequence": 2}, produce_payload(protocol_kit.rows(b"c")))
    offsets = [int(bytes(connection.wait(i, 30.0)[0])) for i in (first, again, following)]
    late = connection.call("produce", {**produce, "base_sequence": 0}, produce_payload(protocol_kit.rows(b"a", b"b")))
    assert offsets + [int(bytes(late[0]))] == [start, start, start + 2, start]
    assert protocol_kit.end_offset(protocol_admin, "mine", 1) == start + 3
    connection.close()
    user.close()


def test_commits_on_the_coordinators_loop_are_authorized_fenced_checked_and_kept_in_order(
        protocol_kit, protocol_cluster, protocol_admin) -> None:
    """The coordinator (offsets in its local offsets topic) answers commits on its event loop: with every check a
    commit has over Flight, and a connection's commits of one group landing in the order sent."""
    group, member = "loop-commits", protocol_kit.connect(protocol_cluster, "coordinator", "admin-token")
    base = int(bytes(member.call("produce", {"topic": "mine", "partition": 0},
                                 produce_payload(protocol_kit.rows(b"a", b"b")))[0]))
    user = protocol_kit.connect(protocol_cluster, "coordinator")
    with pytest.raises(AuthorizationError, match="principal 'user' is not allowed"):
        user.call("commit_offsets", {"group": group, "offsets": [["mine", 0, base]]})
    coordinator = protocol_admin.cluster.coordinator
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
        member.call("commit_offsets",
                    {**who, "offsets": [["mine", 0, protocol_kit.end_offset(protocol_admin, "mine", 0) + 1]]})
    assert coordinator.committed(group)[("mine", 0)].offset == base + 1
    coordinator.leave_group(group, joined.member_id)
    member.close()
    user.close()


@needs_reader
def test_a_java_program_with_sparks_jars_fetches_a_partition_as_the_python_consumer_reads_it(
        protocol_kit, protocol_cluster, protocol_admin, java_classes) -> None:
    start = protocol_kit.end_offset(protocol_admin, "mine", 0)
    protocol_admin.cluster.append("mine", 0, protocol_kit.rows(b"one", b"", b"three", keys=[b"k1", None, b"k3"]))
    protocol_admin.cluster.append("mine", 0, protocol_kit.rows(*[b"v%d" % i for i in range(50)]))
    end = protocol_kit.end_offset(protocol_admin, "mine", 0)
    done = java(java_classes, "FabricFetch", protocol_kit.protocol_address(protocol_cluster, "coordinator"),
                "user-token", "mine", "0", str(start + 1), str(end))
    assert done.returncode == 0, done.stderr[-3000:]
    with fabric.connect(protocol_cluster.coordinator.url("token=user-token")) as user:
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
def test_the_jvm_reader_finds_a_servers_protocol_port_from_its_flight_port(protocol_kit, protocol_cluster, java_classes,
                                                                            where) -> None:
    """A fabric:// URL names Flight ports; a JVM client has no gRPC library, yet Spark's Netty speaks HTTP/2, which
    carries the one unary Flight call (status) that names the server's protocol address."""
    server = protocol_cluster.coordinator if where == "coordinator" else protocol_cluster.nodes[1]
    host, _, port = server.address.rpartition(":")
    discovery = "io.sparkfabric.connector.FlightDiscovery"
    found = java(java_classes, discovery, host, port, "user-token")
    assert found.returncode == 0, found.stderr[-3000:]
    assert found.stdout.strip() == protocol_kit.protocol_address(protocol_cluster, where)
    refused = java(java_classes, discovery, host, port, "no-such-token")
    assert refused.returncode != 0 and "gRPC status 16" in refused.stderr  # UNAUTHENTICATED, named


def test_describe_cluster_over_the_protocol_is_flights_answer_kept_to_what_the_caller_may_describe(
        protocol_kit, protocol_cluster, protocol_admin) -> None:
    protocol_admin.create_topic("secret-rf", partitions=1, replication_factor=1, exist_ok=True)
    with fabric.connect(protocol_cluster.coordinator.url("token=user-token")) as user:
        over_flight = user.cluster.connection.action("describe_cluster")
        seen = user.cluster.describe_cluster(refresh=True)  # the client's own routing metadata
    connection = protocol_kit.connect(protocol_cluster, "coordinator")
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
    connection = protocol_kit.connect(protocol_cluster, "coordinator", "admin-token")
    try:
        everything = cluster_of(connection.call("describe_cluster", {})[0])
    finally:
        connection.close()
    assert {topic for topic, _ in everything.partitions} >= {"mine-rf", "secret-rf"}


def test_a_fabric_client_produces_and_fetches_over_the_protocol_of_coordinator_and_node(
        protocol_kit, protocol_cluster, protocol_admin) -> None:
    with fabric.connect(protocol_cluster.coordinator.url("token=user-token")) as user:
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
            protocol_kit.protocol_address(protocol_cluster, "coordinator"),
            protocol_kit.protocol_address(protocol_cluster, "node")}


@pytest.mark.parametrize("where, replication_factor", [("coordinator", None), ("node", 1)])
def test_waiting_consumer_fetches_hold_no_worker_and_answer_the_record_that_ends_their_wait(
        protocol_kit, protocol_cluster, protocol_admin, where, replication_factor) -> None:
    """Long polls at a log end are held on the server's event loop (consumer_fetches.py), not on worker threads,
    on a node as on the coordinator service (its own topics): more of them than the server has workers leave a
    long poll of a partition with records answered at once, and an append to their partition answers every one
    of them with the record."""
    topic = f"held-at-{where}"
    protocol_admin.create_topic(topic, partitions=2, replication_factor=replication_factor)
    with protocol_admin.producer() as producer:
        producer.send(topic, b"there already", partition=1).get(timeout=30)
    connection = protocol_kit.connect(protocol_cluster, where, token="admin-token")
    idle = [connection.send("fetch", {"topic": topic, "partition": 0, "offset": 0, "max_bytes": 1 << 20,
                                      "max_wait_ms": 60_000}) for _ in range(WORKERS + 6)]
    waited = connection.send("fetch", {"topic": topic, "partition": 1, "offset": 0, "max_bytes": 1 << 20,
                                       "max_wait_ms": 60_000})
    assert [r.batch.column("value").to_pylist() for r in payloads.fetched_of(*connection.wait(waited, 30))] == [
        [b"there already"]]
    with protocol_admin.producer() as producer:
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


def test_a_connection_read_by_an_event_loop_answers_refuses_and_fails_what_is_in_flight(
        protocol_kit, protocol_cluster, protocol_admin) -> None:
    """LoopConnection (the coordinator's connection to a leader, read by its event loop): answers and refusals come
    back as the blocking connection's do, a stolen token is refused at open, and requests in flight when the
    connection closes fail with ConnectionError."""
    address = protocol_kit.protocol_address(protocol_cluster, "node")

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


def test_a_tls_server_takes_the_protocol_over_tls_only(protocol_kit, coordinators, tls_files) -> None:
    cert, key = tls_files
    instance = coordinators(tls=(cert, key))
    with fabric.connect(instance.url(f"ca={cert}")) as fab:
        fab.create_topic("secure", config={"max.message.bytes": 4 << 20})
        assert fab.cluster.append("secure", 0, protocol_kit.rows(b"sealed")) == 0
        assert fab.cluster.fetch("secure", 0, 0, 1 << 20)[0].batch.column("value").to_pylist() == [b"sealed"]
        # frames over frames.LARGE_FRAME_BYTES both ways: the answer's payload received into a buffer of its own
        values = [bytes([i % 251]) * 1000 for i in range(3000)]
        assert fab.cluster.append("secure", 0, protocol_kit.rows(*values)) == 1
        fetched = fab.cluster.fetch("secure", 0, 1, 8 << 20)
        assert [v for f in fetched for v in f.batch.column("value").to_pylist()] == values
        address = fab.cluster.connection.status_of(instance.address).protocol_address
        assert list(fab.cluster.protocol.clients._connections) == [address]
    with pytest.raises(ConnectionError):  # a plaintext client gets no answer it can read
        ProtocolConnection(address, None, None, 5.0, wire.exception_of)


def test_list_topics_over_the_protocol_is_flights_answer_kept_to_what_the_caller_may_describe(
        protocol_kit, protocol_cluster, protocol_admin) -> None:
    protocol_admin.create_topic("secret-rf", partitions=1, replication_factor=1, exist_ok=True)
    with fabric.connect(protocol_cluster.coordinator.url("token=user-token")) as user:
        over_flight = user.cluster.connection.action("list_topics")
    connection = protocol_kit.connect(protocol_cluster, "coordinator")
    try:
        result, payload = connection.call("list_topics", {})
        assert msgspec.json.decode(result) == over_flight and payload == b""
        with pytest.raises(InvalidRequestError, match="bogus"):
            connection.call("list_topics", {"bogus": 1})
    finally:
        connection.close()
    assert sorted(over_flight) == ["mine", "mine-rf"]  # not secret-rf: no describe ACL
    connection = protocol_kit.connect(protocol_cluster, "coordinator", "admin-token")
    try:
        assert {"mine", "mine-rf", "secret-rf"} <= set(msgspec.json.decode(connection.call("list_topics", {})[0]))
    finally:
        connection.close()


@pytest.mark.parametrize("where, topic", [("coordinator", "mine"), ("node", "mine-rf")])
def test_offset_for_time_over_the_protocol_is_flights_answer_and_needs_describe(
        protocol_kit, protocol_cluster, protocol_admin, where, topic) -> None:
    before_us = time.time_ns() // 1000
    with fabric.connect(protocol_cluster.coordinator.url("token=user-token")) as user:
        with user.producer() as producer:
            producer.send(topic, b"timed", partition=0).get(timeout=30)
        expected = user.cluster.offset_for_time(topic, 0, before_us)
    args: dict = {"topic": topic, "partition": 0, "timestamp_us": before_us}
    if where == "node":
        state = protocol_admin.cluster.describe_cluster(refresh=True).partitions[(topic, 0)].state
        args.update(leader_epoch=state.leader_epoch,
                    topic_id=protocol_admin.cluster.describe_cluster().topic_ids[topic])
    connection = protocol_kit.connect(protocol_cluster, where)
    try:
        result, payload = connection.call("offset_for_time", args)
        assert expected is not None and msgspec.json.decode(result) == expected and payload == b""
        assert msgspec.json.decode(connection.call("offset_for_time", {**args, "timestamp_us": 2**62})[0]) is None
    finally:
        connection.close()
    protocol_admin.create_topic("secret", partitions=1, exist_ok=True)
    connection = protocol_kit.connect(protocol_cluster, "coordinator")
    try:
        with pytest.raises(AuthorizationError):
            connection.call("offset_for_time", {"topic": "secret", "partition": 0, "timestamp_us": 0})
    finally:
        connection.close()
