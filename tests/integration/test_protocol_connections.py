"""How the fabric protocol port of real coordinator and node processes treats connections themselves, whatever they
carry: one idle for connections.max.idle.ms is closed and its client goes on over a new one; one over
max.connections.per.ip is refused, with why, while the admitted ones are served."""
from __future__ import annotations

import select
import socket
import ssl
import time
from pathlib import Path
from typing import Callable

import msgspec
import pyarrow as pa
import pytest

import fabric
from fabric.client.protocol_calls import produce_payload
from fabric.common.errors import TooManyConnectionsError
from fabric.common.protocol import frames, messages
from fabric.common.protocol.connection import IDLE_CHECK_S, ProtocolConnection, client_ssl
from fabric.common.records import to_storage
from fabric.common.waiting import wait_for
from fabric.server import wire


def test_idle_connections_are_closed_and_a_clients_next_requests_go_on_new_ones(node_cluster) -> None:
    """connections.max.idle.ms (500 ms here) on a coordinator and a node process: a connection that never says
    hello is closed, and so is a client's once unused; its next commit and produce go over new protocol
    connections (not into the closed ones, nor over Flight instead), and the server closes nothing in use."""
    idle = ("--connections-max-idle-ms", "500")
    cluster = node_cluster(nodes=1, coordinator_extra=idle, node_extra=idle)
    with fabric.connect(cluster.url) as fab, fab.producer() as producer:
        fab.create_topic("idle-local")
        fab.create_topic("idle-rf", replication_factor=1)

        def both() -> None:  # a produce to the node, one to the coordinator, and a commit there
            for topic in ("idle-rf", "idle-local"):
                producer.send(topic, b"r", partition=0).get(timeout=30)
            fab.cluster.coordinator.commit_offsets("idle-group", {("idle-local", 0): 1})
        both()
        used = dict(fab.cluster.protocol.clients._connections)
        assert len(used) == 2
        for address in used:
            host, _, port = address.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=30) as raw:  # says nothing
                raw.settimeout(60)
                assert raw.recv(1) == b""  # closed by the server
        wait_for(lambda: all(select.select([c._sock], [], [], 0)[0] and time.monotonic() - c._used > IDLE_CHECK_S
                             for c in used.values()), 60, "the servers to close the client's idle connections")
        both()  # (each finds its connection closed, and opens a new one)
        now = fab.cluster.protocol.clients._connections
        assert set(now) == set(used) and all(now[a] is not used[a] and not now[a].broken for a in used)
        assert fab.cluster.coordinator.committed("idle-group")[("idle-local", 0)].offset == 1


def test_a_flood_of_connections_over_max_connections_per_ip_is_refused_and_the_admitted_are_served(
        coordinators) -> None:
    """A coordinator process with max.connections.per.ip 2: a client and one raw connection hold both; 50 more,
    opened at once, are each told why (TooManyConnectionsError naming the key) and closed, logged once at INFO;
    the client's commits go on meanwhile, and a connection closed frees its slot for another."""
    instance = coordinators(extra=("--max-connections-per-ip", "2"))
    with fabric.connect(instance.url()) as fab:
        fab.create_topic("quota")
        fab.cluster.coordinator.commit_offsets("quota-group", {("quota", 0): 0})
        address = fab.cluster.connection.status_of(instance.address).protocol_address
        assert list(fab.cluster.protocol.clients._connections) == [address]  # the client's one slot
        second = ProtocolConnection(address, None, None, 30.0, wire.exception_of)
        refused = []
        for _ in range(50):
            with pytest.raises(TooManyConnectionsError) as caught:
                ProtocolConnection(address, None, None, 30.0, wire.exception_of)
            refused.append(str(caught.value))
        assert all("holds 2 connections to this server, its limit (max.connections.per.ip=2)" in r for r in refused)
        fab.cluster.coordinator.commit_offsets("quota-group", {("quota", 0): 0})  # served as before
        second.close()
        third = wait_for(lambda: _connected_or_none(address), 60, "the closed connection's slot to be free again")
        assert bytes(third.call("echo", {"n": 3})[0]) == b'{"n":3}'
        third.close()
    log = Path(instance.log_path).read_text(errors="replace")
    lines = [line for line in log.splitlines() if "refused a fabric protocol connection" in line]
    assert 1 <= len(lines) <= 2 and all(" INFO " in line for line in lines)  # once (again once its slot was free)


def test_tls_connections_count_from_their_accept_not_their_handshake(coordinators, tls_files) -> None:
    """A TLS coordinator process with max.connections.per.ip 2 and connections.max.idle.ms 10 s: two raw
    connections that never begin a handshake hold both slots, so a TLS client is refused, and told why over TLS;
    once the idle raw connections are closed by the server, the client connects and is served. (Counted after the
    handshake, as before, they held sockets uncounted for as long as asyncio waits for a handshake, a minute.)"""
    cert, key = tls_files
    instance = coordinators(tls=(cert, key), extra=("--max-connections-per-ip", "2", "--connections-max-idle-ms",
                                                    "10000"))  # (the refusal below comes well within it)
    with fabric.connect(instance.url(f"ca={cert}")) as fab:
        address = fab.cluster.connection.status_of(instance.address).protocol_address
    tls = client_ssl(Path(cert).read_bytes())
    host, _, port = address.rpartition(":")
    raw = [socket.create_connection((host, int(port)), timeout=60) for _ in range(2)]
    try:
        with pytest.raises(TooManyConnectionsError, match=r"max\.connections\.per\.ip=2"):
            ProtocolConnection(address, None, tls, 30.0, wire.exception_of)
        for sock in raw:
            assert sock.recv(1) == b""  # closed by the server once idle, no handshake begun
        admitted = wait_for(lambda: _connected_or_none(address, tls), 60, "a slot free for the TLS client")
        assert bytes(admitted.call("echo", {"n": 4})[0]) == b'{"n":4}'
        admitted.close()
    finally:
        for sock in raw:
            sock.close()


def test_a_client_that_does_not_read_its_answers_is_read_no_further_and_gets_them_all_once_it_reads(
        coordinators) -> None:
    """A raw client says hello, then sends echo requests of 256 KiB without reading an answer: the coordinator
    process stops reading it once WRITE_BUFFER_HIGH bytes of answers wait (its sends block: a few dozen requests
    went through, where the server used to read all 2,000 and hold 500 MiB of answers), serves another client
    meanwhile, and once the first reads, answers each of its requests, in order, whole."""
    instance = coordinators()
    with fabric.connect(instance.url()) as fab:
        fab.create_topic("backlog")
        address = fab.cluster.connection.status_of(instance.address).protocol_address
        host, _, port = address.rpartition(":")
        pad = "p" * (256 << 10)
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            sent = _sent_until_blocked(raw, lambda n: frames.encode(messages.encode_request(
                2 + n, "echo", {"n": n, "pad": pad})), 2000)
            assert 0 < sent < 400, sent  # (socket buffers and WRITE_BUFFER_HIGH hold a few dozen)
            fab.cluster.coordinator.commit_offsets("backlog-group", {("backlog", 0): 0})  # another client, served
            answers = _answers(raw, 1 + sent)
        assert [a.id for a in answers] == list(range(1, 2 + sent)) and all(a.error is None for a in answers)
        assert [msgspec.json.decode(a.result) for a in answers[1:]] == [{"n": n, "pad": pad} for n in range(sent)]
    assert fab.cluster.coordinator.committed("backlog-group")[("backlog", 0)].offset == 0


def test_produces_held_for_a_paused_follower_stop_reading_their_connection_at_socket_request_max_bytes(
        node_cluster) -> None:
    """A node with socket.request.max.bytes 4 MiB leads an RF 2 partition whose follower is SIGSTOPped: a raw client
    pipelining 1 MiB acks=all produces there is read no further once the payloads held for the follower reach
    4 MiB (its sends block after a handful, where the node used to read all 200 and hold them); once the follower
    is SIGCONTed each is answered, in order, and written once."""
    slow = ("--session-timeout-ms", "120000", "--replica-lag-time-max-ms", "120000")  # (the follower stays in sync)
    cluster = node_cluster(nodes=2, coordinator_extra=("--node-session-timeout-ms", "120000"),
                           node_extra=(*slow, "--socket-request-max-bytes", str(4 << 20)))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("held", replication_factor=2, config={"min.insync.replicas": "1"})
        with fab.producer() as producer:  # (both replicas in sync)
            producer.send("held", b"first", partition=0).get(timeout=60)
        leader = fab.partition_assignment("held", 0).state.leader
        follower = cluster.nodes[3 - leader]
        address = cluster.nodes[leader].status()["protocol_address"]
        host, _, port = address.rpartition(":")
        batch = to_storage(pa.table({"value": [b"v" * 1000] * 1000}), None, time.time_ns() // 1000).to_batches()[0]
        request = {"topic": "held", "partition": 0, "acks": "all", "timeout_ms": 600_000}
        follower.pause()
        try:
            with socket.create_connection((host, int(port)), timeout=30) as raw:
                sent = _sent_until_blocked(raw, lambda n: frames.encode(messages.encode_request(
                    2 + n, "produce", request), produce_payload(batch)), 200)
                assert 0 < sent < 100, sent  # (4 MiB held, and what the socket buffers take)
                follower.resume()
                answers = _answers(raw, 1 + sent)
        finally:
            follower.resume()
        assert [a.id for a in answers] == list(range(1, 2 + sent)) and all(a.error is None for a in answers)
        assert [msgspec.json.decode(a.result) for a in answers[1:]] == [1 + 1000 * n for n in range(sent)]


def _sent_until_blocked(raw: socket.socket, request: Callable[[int], bytes], most: int) -> int:
    """Say hello on `raw`, then send request(0), request(1), ... (at most `most`) without reading an answer, until
    a send blocks for 5 s (the server stopped reading): how many were sent whole."""
    raw.sendall(frames.encode(messages.encode_request(1, "hello", {"protocol": "fabric", "version": 1})))
    raw.settimeout(5)
    sent = 0
    try:
        while sent < most:
            raw.sendall(request(sent))
            sent += 1
    except TimeoutError:
        pass
    return sent


def _answers(raw: socket.socket, count: int) -> list[messages.Answer]:
    """The next `count` answers read from `raw`."""
    raw.settimeout(120)
    reader, answers = frames.FrameReader(), []
    while len(answers) < count:
        received = raw.recv(1 << 20)
        assert received, f"closed after {len(answers)} answers of {count}"
        reader.feed(received)
        answers += [messages.decode_answer(f.header) for f in reader.frames()]
    return answers


def _connected_or_none(address: str, tls: ssl.SSLContext | None = None) -> ProtocolConnection | None:
    try:
        return ProtocolConnection(address, None, tls, 30.0, wire.exception_of)
    except TooManyConnectionsError:
        return None
