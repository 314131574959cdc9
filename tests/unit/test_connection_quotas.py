"""max.connections, max.connections.per.ip and max.connections.per.ip.overrides: the counts and their refusals,
then a real ProtocolServer in this process: a connection over a quota is answered why (TooManyConnectionsError,
naming the key) and closed, and the slot of a closed connection is free again."""
from __future__ import annotations

import logging
import socket
from typing import Any

import pytest

from fabric.common.config import INT_MAX
from fabric.common.errors import InvalidConfigError, TooManyConnectionsError
from fabric.common.protocol import frames, messages
from fabric.common.protocol.connection import ProtocolConnection
from fabric.common.waiting import wait_for
from fabric.server import wire
from fabric.server.connection_quotas import ConnectionQuotas, parse_overrides
from fabric.server.protocol_server import Handler, ProtocolServer


def test_an_address_over_its_limit_is_refused_and_a_released_slot_admits_again() -> None:
    quotas = ConnectionQuotas(per_ip=2)
    assert quotas.admit("10.0.0.1") is None and quotas.admit("10.0.0.1") is None
    reason = quotas.admit("10.0.0.1")
    assert reason is not None and "max.connections.per.ip=2" in reason and "raise the limit" in reason
    assert quotas.admit("10.0.0.2") is None  # another address has its own count
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1") is None
    assert quotas.held == 3 == sum(quotas.counts.values())


def test_an_override_sets_one_address_limit_and_the_total_caps_them_all() -> None:
    quotas = ConnectionQuotas(total=3, per_ip=0, overrides={"10.0.0.9": 5})
    reason = quotas.admit("10.0.0.1")
    assert reason is not None and "max.connections.per.ip=0" in reason  # only the overridden address may connect
    assert [quotas.admit("10.0.0.9") for _ in range(3)] == [None] * 3
    reason = quotas.admit("10.0.0.9")  # within its override, over the total
    assert reason is not None and "max.connections=3" in reason


def test_an_ipv4_host_seen_through_a_dual_stack_socket_has_one_count_and_its_override() -> None:
    quotas = ConnectionQuotas(per_ip=1, overrides=parse_overrides("10.0.0.7:2"))
    assert quotas.admit("::ffff:10.0.0.7") is None and quotas.admit("10.0.0.7") is None
    assert quotas.admit("::ffff:10.0.0.7") is not None  # its override, 2, reached
    quotas.release("::ffff:10.0.0.7")
    assert quotas.counts == {"10.0.0.7": 1}


def test_a_flood_of_refusals_is_logged_once_per_address_at_info(caplog) -> None:
    quotas = ConnectionQuotas(per_ip=1)
    quotas.admit("10.0.0.1")
    with caplog.at_level(logging.DEBUG, logger="fabric.server.connection_quotas"):
        for _ in range(50):
            quotas.admit("10.0.0.1")
    assert [r.levelno for r in caplog.records].count(logging.INFO) == 1
    assert len(caplog.records) == 50


def test_overrides_are_host_count_pairs_and_a_bad_entry_names_the_form() -> None:
    assert parse_overrides(" 10.0.0.5:200, [::1]:3 ") == {"10.0.0.5": 200, "::1": 3}
    assert parse_overrides("localhost:7") in ({"127.0.0.1": 7}, {"::1": 7})  # a host name: its address
    assert parse_overrides("") == {} == parse_overrides(None)
    for bad in ("10.0.0.5", "10.0.0.5:-1", ":4", f"h:{INT_MAX + 1}"):
        with pytest.raises(InvalidConfigError, match="must be HOST:COUNT"):
            parse_overrides(bad)
    with pytest.raises(InvalidConfigError, match="does not resolve"):
        parse_overrides("no-such-host.invalid:3")


@pytest.fixture
def limited():
    def echo(principal: str, args: dict[str, Any], payload: bytes) -> tuple[Any, bytes]:
        return args, payload
    server = ProtocolServer("127.0.0.1", 0, {"echo": Handler(echo, lambda args: False)}, None, wire.error_fields,
                            1 << 20, quotas=ConnectionQuotas(per_ip=2)).start()
    yield server
    server.shutdown()


def connect(server: ProtocolServer) -> ProtocolConnection:
    return ProtocolConnection(f"127.0.0.1:{server.port}", None, None, 10.0, wire.exception_of)


def test_a_connection_over_the_per_ip_limit_hears_why_and_a_closed_one_frees_its_slot(limited) -> None:
    first, second = connect(limited), connect(limited)
    with pytest.raises(TooManyConnectionsError, match=r"127.0.0.1 holds 2 connections .*max.connections.per.ip=2"):
        connect(limited)
    assert bytes(second.call("echo", {"n": 2})[0]) == b'{"n":2}'  # the admitted ones are served as before
    first.close()
    wait_for(lambda: limited.quotas.held == 1, 30, "the server to count the closed connection out")
    third = connect(limited)
    assert bytes(third.call("echo", {"n": 3})[0]) == b'{"n":3}'
    wait_for(lambda: len(limited._connections) == 2, 30, "the refused connection to be closed")
    second.close()
    third.close()


def test_a_refused_connection_reads_nothing_its_client_sends(limited) -> None:
    """A raw client over the limit that sends a hello and a request anyway gets the one refusal (id -1), then
    the end of the stream: nothing it sent was served."""
    held = [connect(limited), connect(limited)]
    with socket.create_connection(("127.0.0.1", limited.port), timeout=30) as raw:
        raw.sendall(frames.encode(messages.encode_request(1, messages.HELLO, {
            "protocol": messages.PROTOCOL, "version": messages.VERSION})))
        raw.sendall(frames.encode(messages.encode_request(2, "echo", {"n": 1})))
        reader, answers = frames.FrameReader(1 << 20), []
        while data := raw.recv(1 << 16):
            reader.feed(data)
            while (frame := reader.next()) is not None:
                answers.append(messages.decode_answer(frame.header))
    assert [(a.id, a.error["type"]) for a in answers if a.error] == [(-1, "TooManyConnectionsError")]
    assert len(answers) == 1
    for connection in held:
        connection.close()
