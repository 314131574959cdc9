"""Requests to the coordinator service are checked up front, before any handler runs: their size and depth
(action bodies, DoPut descriptors, DoGet tickets), 64-bit integers, and the --listen address a server is asked to
bind. Errors name the problem and never echo more than a short piece of the input. (Raw Flight calls against a
real service: tests/integration/test_service_hardening.py and the fuzz suite.)"""
from __future__ import annotations

import json

import pytest

from fabric.common.errors import InvalidConfigError, InvalidRequestError
from fabric.server import wire
from fabric.server.arguments import check_call
from fabric.server.broker import Broker
from fabric.server.instance import check_listen


def nested(depth: int) -> list:
    """A list nested `depth` levels deep (within the JSON parser's limit, beyond the wire format's)."""
    value: list = ["x"]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("body, match", [
    (b"[" * 200_000 + b"]" * 200_000, "nests deeper than"),
    (json.dumps({"$": "dict", "v": [["group", nested(40)]]}).encode(), "nests deeper than 32 levels"),
    (b'{"$": "dict", "v": [["group", "' + b"g" * (3 << 20) + b'"]]}', "over the limit of 2097152"),
    (b'{"$": "' + b"t" * 100_000 + b'", "v": 1}', "unknown wire tag"),
    (b'{"$": "JoinRequest", "v": {"' + b"k" * 100_000 + b'": 1}}', "unexpected keyword"),
    (b'{"$": "dict", "v": [["value_schema", {"$": "schema", "v": "'
     b'/////5AAAAAQAAAAAAAKAAwABgAF1AgACgAAAAABBAAEAAAAvP///wQAAAAB'
     b'AAAAFAAAABAAGAAIAAYABwAMABAAFAAQAAAAAAABBRQAAABAAAAAHAAAAAQA'
     b'AAAAAAAAAQAAAHYAAAAIAAgAAAAEAAgAAAAMAAAACAAMAAgABwAIAAAAAAAAAQgAAAAEAAQABAAAAAAAAAA="}]]}',
     "not a serialized Arrow schema"),  # a damaged schema message (found by the service fuzz suite)
])
def test_oversized_deep_or_malformed_requests_are_refused_without_echo(body, match) -> None:
    for what in ("action body", "DoPut descriptor", "DoGet ticket"):
        with pytest.raises(InvalidRequestError, match=match) as raised:
            wire.request_args(body, what)
        assert what in str(raised.value) and len(str(raised.value)) < 600


def test_integers_beyond_64_bits_are_refused_by_name() -> None:
    for name, value in (("offset", 2**63), ("max_bytes", -(2**63) - 1), ("partition", 10**30)):
        args = {"topic": "t", "partition": 0, "offset": 0, "max_bytes": 1, name: value}
        with pytest.raises(InvalidRequestError, match=f"argument '{name}' must be int \\(64-bit\\)"):
            check_call("fetch", Broker.fetch, args)
    check_call("fetch", Broker.fetch, {"topic": "t", "partition": 0, "offset": 2**63 - 1, "max_bytes": 1})


def test_a_listen_address_that_cannot_be_served_is_named_with_the_fix(busy_port) -> None:
    with pytest.raises(InvalidConfigError, match=f"cannot listen on 127.0.0.1:{busy_port}: Address already in use; "
                                                 "stop the process that uses it or choose another --listen"):
        check_listen(f"127.0.0.1:{busy_port}")
    for listen, match in (("abc", "must be HOST:PORT"), ("127.0.0.1:99999", "port from 0 to 65535"),
                          (":9093", "must be HOST:PORT"), ("no-such-host.invalid:9093", "does not resolve")):
        with pytest.raises(InvalidConfigError, match=match):
            check_listen(listen)
