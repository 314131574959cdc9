"""How many fabric protocol connections a server holds at once, in all and per client address (Kafka's
max.connections, max.connections.per.ip and max.connections.per.ip.overrides): a client that opens connections
without end (a bug, or a hostile one) cannot take the file descriptors the server's own segment files need.

A connection over a limit is refused as it is accepted, before it is read: it is answered one error
(TooManyConnectionsError, naming the key to raise) and closed. Kafka's defaults (no limit) apply unless set. The
counts are kept on the protocol server's event loop only (its connections are made and lost there), so they take no
lock.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
from collections import Counter
from dataclasses import dataclass, field

from fabric.common.config import INT_MAX
from fabric.common.errors import InvalidConfigError
from fabric.common.redaction import clip

log = logging.getLogger(__name__)
REFUSED_REMEMBERED = 1024  # refused addresses whose next refusals are logged at DEBUG only
PER_IP_KEY, OVERRIDES_KEY, TOTAL_KEY = "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections"


def canonical(address: str) -> str:
    """An address as the quotas count it: an IPv4 address a dual-stack socket reports as IPv6 (::ffff:a.b.c.d) is
    that IPv4 address, so one host has one count and its override applies."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped or ip)


def parse_overrides(text: str | None) -> dict[str, int]:
    """max.connections.per.ip.overrides: `host:count` entries, comma-separated (a host name is resolved to its
    address now, as Kafka does); InvalidConfigError naming the entry and the form."""
    overrides: dict[str, int] = {}
    for entry in (e.strip() for e in (text or "").split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit() or int(count) > INT_MAX:
            raise InvalidConfigError(f"{OVERRIDES_KEY} entry {clip(entry, 60)} must be HOST:COUNT with a count from "
                                     f"0 to {INT_MAX}, e.g. 10.0.0.5:200,spark-worker-1:500")
        try:
            address = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
        except socket.gaierror as exc:
            raise InvalidConfigError(f"{OVERRIDES_KEY}: host {clip(host, 60)} does not resolve ({exc.strerror}); "
                                     "give its address instead") from None
        overrides[canonical(str(address))] = int(count)
    return overrides


@dataclass
class ConnectionQuotas:
    """The limits (`total`: max.connections; `per_ip`: max.connections.per.ip, unless `overrides` names the
    address) and the connections each address holds now. Invariant: `counts` sums to `held`, and no address holds
    more than its limit, nor all together more than `total` (checked in `admit`)."""

    total: int = INT_MAX
    per_ip: int = INT_MAX
    overrides: dict[str, int] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    held: int = 0
    _refused: set[str] = field(default_factory=set)  # addresses refused since they last got a connection

    def limit(self, address: str) -> int:
        return self.overrides.get(address, self.per_ip)

    def admit(self, address: str) -> str | None:
        """Count a new connection from `address` and return None, or, if it is over a limit, why not (nothing
        counted). The first refusal of an address (until it is admitted again) is logged at INFO, the others at
        DEBUG: a flood of connections does not flood the log."""
        address = canonical(address)
        limit = self.limit(address)
        if self.counts[address] >= limit:
            reason = (f"{address} holds {self.counts[address]} connections to this server, its limit "
                      f"({OVERRIDES_KEY if address in self.overrides else PER_IP_KEY}={limit}); close some (one "
                      f"client shares one connection per server) or raise the limit")
        elif self.held >= self.total:
            reason = (f"this server holds {self.held} connections, its limit ({TOTAL_KEY}={self.total}); retry later "
                      "or raise the limit")
        else:
            self.counts[address] += 1
            self.held += 1
            self._refused.discard(address)
            return None
        level = logging.DEBUG if address in self._refused else logging.INFO
        if len(self._refused) >= REFUSED_REMEMBERED:
            self._refused.clear()  # (many addresses refused: each is logged at INFO again, the set stays small)
        self._refused.add(address)
        log.log(level, "refused a fabric protocol connection: %s", reason)
        return reason

    def release(self, address: str) -> None:
        """A connection `admit` counted closed."""
        address = canonical(address)
        self.held -= 1
        self.counts[address] -= 1
        if not self.counts[address]:
            del self.counts[address]
