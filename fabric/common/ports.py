"""Free TCP ports for server processes started here (tests, benchmarks, `fabric cluster up`).

A port is drawn below the kernel's ephemeral range: a port taken from that range can be handed out again to any
socket bound to port 0 (another server's fabric protocol port, a client connection), so a server restarted on its
old port could find it taken. Below the range, only a process that names the port can take it.
"""
from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10_000  # below the ports well-known services listen on
_handed_out: set[int] = set()  # ports free_port gave this process: their server may not listen on them yet


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (Linux; elsewhere IANA's 49152)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now and not handed out by this process before, outside the
    ephemeral range where the machine has room (else one the kernel picks)."""
    top = _ephemeral_start()
    for port in random.sample(range(LOWEST, top), min(64, max(top - LOWEST, 0))):
        if port in _handed_out:  # (a server started a moment ago may not have bound it yet)
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
