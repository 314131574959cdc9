"""A Flight connection to the coordinator instances of a fabric:// URL, with failover to the active one.

URL: `fabric://host:port[,host:port...][?token=T&tls=true&ca=/ca.pem&timeout_ms=30000]` (`fabric+tls://`
implies tls=true). The token defaults to $FABRIC_TOKEN, the CA file to $FABRIC_TLS_CA; a server process takes
its own token from its token file (token.file) or $FABRIC_TOKEN, never from its command line. Calls go to the
instance that answered last; on a connection error or a "not the active coordinator" answer the connection
moves to the named active instance (else the next address) and retries until timeout_ms has passed.
Clients (fabric.client.remote) and data nodes (fabric.server.node), which call the coordinator too, share it.

A caller with less time than that (a producer's send within delivery_timeout_ms and request_timeout_ms) runs its
calls inside `call_deadline(seconds)`: every Flight call this thread makes there, to a coordinator or a data node,
gives up by then, and a server holding one (acks=all, a long poll) is asked to answer before it (`hold_ms`).
"""
from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar
from urllib.parse import parse_qs, urlparse

import pyarrow as pa
import pyarrow.flight as flight

from fabric.common.checks import INT_MAX
from fabric.common.errors import CoordinatorUnavailableError, InvalidConfigError
from fabric.common.redaction import redact_url
from fabric.server import security, wire

log = logging.getLogger(__name__)
T = TypeVar("T")
ENV_TOKEN = "FABRIC_TOKEN"
ENV_CA = "FABRIC_TLS_CA"
SCHEMES = {"fabric": False, "fabric+tls": True}
QUERY_KEYS = ("token", "tls", "ca", "timeout_ms")
MIN_CALL_S = 0.001  # a call with no time left still gets this much: it fails as a timeout, not as a bad option
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("fabric_call_deadline", default=None)


class call_deadline:  # noqa: N801 (used as a function: `with call_deadline(seconds):`)
    """Within the block, every call of this thread (Connection.call, call_options) gives up `seconds` from now,
    or at an enclosing block's deadline if that is sooner. A class, not a generator context manager: every
    append of a producer enters one, and this costs a tenth of that."""

    __slots__ = ("_deadline", "_token")

    def __init__(self, seconds: float) -> None:
        self._deadline = time.monotonic() + max(seconds, 0.0)
        self._token: contextvars.Token[float | None] | None = None

    def __enter__(self) -> None:
        outer = _DEADLINE.get()
        self._token = _DEADLINE.set(self._deadline if outer is None else min(outer, self._deadline))

    def __exit__(self, *exc_info: object) -> None:
        assert self._token is not None
        _DEADLINE.reset(self._token)


def time_left(timeout_s: float) -> float:
    """`timeout_s`, or less inside call_deadline: the seconds until its deadline (at least MIN_CALL_S)."""
    deadline = _DEADLINE.get()
    return timeout_s if deadline is None else max(min(timeout_s, deadline - time.monotonic()), MIN_CALL_S)


@dataclass(frozen=True)
class RemoteOptions:
    """A parsed fabric:// URL."""

    addresses: tuple[str, ...]
    token: str | None
    tls: bool
    ca_file: str | None
    timeout_s: float


def parse_url(url: str) -> RemoteOptions:
    """Parse a fabric:// URL (see the module docstring); bad input names the expected form."""
    parsed = urlparse(url)
    shown = redact_url(url)  # errors never show the token
    if parsed.scheme not in SCHEMES or not parsed.netloc:
        raise InvalidConfigError(f"coordinator URL {shown!r} is invalid; use fabric://host:port[,host:port]")
    if "@" in parsed.netloc:
        raise InvalidConfigError(f"coordinator URL {shown!r} carries credentials before '@'; give the token as "
                                 f"?token=... or ${ENV_TOKEN} instead")
    query = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - set(QUERY_KEYS))
    if unknown:
        raise InvalidConfigError(f"coordinator URL option(s) {', '.join(unknown)} unknown; "
                                 f"known: {', '.join(QUERY_KEYS)}")
    addresses = tuple(a.strip() for a in parsed.netloc.split(","))
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidConfigError(f"coordinator address {address!r} in {shown!r} must be host:port, the port "
                                     "from 1 to 65535")
    try:
        timeout_ms = int(query.get("timeout_ms", "30000"))
    except ValueError:
        timeout_ms = -1
    if not 0 < timeout_ms <= INT_MAX:  # (a longer one overflowed the waits on a socket: Kafka's is an int32 too)
        raise InvalidConfigError(f"timeout_ms in {shown!r} must be a positive integer number of milliseconds up to "
                                 f"{INT_MAX}, e.g. timeout_ms=30000")
    timeout_s = timeout_ms / 1000
    tls_flag = query.get("tls", "false").lower()
    if tls_flag not in ("true", "1", "yes", "false", "0", "no"):  # (tls=on was plaintext)
        raise InvalidConfigError(f"tls in {shown!r} must be true or false, got {tls_flag!r}; or name the scheme "
                                 "fabric+tls://")
    tls = SCHEMES[parsed.scheme] or tls_flag in ("true", "1", "yes")
    return RemoteOptions(addresses, query.get("token") or os.environ.get(ENV_TOKEN) or None, tls,
                         query.get("ca") or os.environ.get(ENV_CA) or None, timeout_s)


def url_token(url: str) -> str | None:
    """The token of a fabric:// URL's ?token=, None if it has none (or cannot be parsed: parse_url says why)."""
    try:
        query = urlparse(url).query
    except ValueError:
        return None
    return parse_qs(query).get("token", [None])[-1]


def refuse_token_in_argv(option: str, url: str | None) -> None:
    """InvalidConfigError if `url`, given on a server's command line as `option`, carries ?token=: every user of
    the machine reads a process's command line (ps, /proc/PID/cmdline), so a server takes its token from a file
    or the environment only. The error shows the URL without the token."""
    if url and url_token(url) is not None:
        raise InvalidConfigError(f"{option} {redact_url(url)!r} carries ?token=, which every user of this machine "
                                 "can read on the process's command line (ps); drop it from the URL and put the "
                                 f"token in a file given as --token-file FILE (token.file), or set ${ENV_TOKEN}")


def server_token(token_file: str | None) -> str | None:
    """The token a server process presents to the coordinator and the data nodes: its token file's
    (--token-file, token.file), else $FABRIC_TOKEN, else None."""
    return security.load_token(token_file) if token_file else os.environ.get(ENV_TOKEN) or None


class Connection:
    """Flight clients to the instances of one URL, with failover to the active instance."""

    def __init__(self, options: RemoteOptions) -> None:
        self.options = options
        self.addresses = list(options.addresses)
        self.current = 0
        self._routes: dict[str, str] = {}  # a route (e.g. a group's offsets partition) -> the instance serving it
        self._clients: dict[str, flight.FlightClient] = {}
        self._lock = threading.Lock()
        self._headers = [(wire.AUTH_HEADER.encode(), f"Bearer {options.token}".encode())] if options.token else []
        self._ca = security.read_pem(options.ca_file, "TLS CA file (?ca= or $FABRIC_TLS_CA)")

    @property
    def call_options(self) -> flight.FlightCallOptions:
        """The options of one Flight call: the token, and the URL's timeout (less inside call_deadline)."""
        return self._options(time_left(self.options.timeout_s))

    def _options(self, timeout_s: float) -> flight.FlightCallOptions:
        return flight.FlightCallOptions(headers=self._headers, timeout=timeout_s)

    def client(self, address: str) -> flight.FlightClient:
        """The (cached) Flight client of one instance."""
        with self._lock:
            if address not in self._clients:
                scheme = "grpc+tls" if self.options.tls else "grpc+tcp"
                kwargs = {"tls_root_certs": self._ca} if self._ca else {}
                self._clients[address] = flight.connect(f"{scheme}://{address}", **kwargs)
            return self._clients[address]

    def call(self, fn: Callable[[flight.FlightClient, flight.FlightCallOptions], T], route: str | None = None) -> T:
        """Run fn against the active instance (with a `route`, the instance that last said it serves the route,
        else the active one), failing over until the URL's timeout (less inside call_deadline) has passed; each
        attempt gets the time that is left."""
        timeout_s = time_left(self.options.timeout_s)
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            address = self.address_for(route)
            try:
                return fn(self.client(address), self._options(max(deadline - time.monotonic(), MIN_CALL_S)))
            except wire.NO_ANSWER as exc:
                failure = exc
            except flight.FlightError as exc:
                raise wire.from_flight_error(exc) from None
            details = wire.error_details(failure)
            active = details.get("active") if details.get("type") == wire.NOT_ACTIVE else None
            if route is not None and (active or route in self._routes):
                self.reroute(route, address, active)
            else:
                self._move(address, active)  # the next call starts elsewhere, even if this one gives up (a hung
            # instance can take a whole call's time: without this, every call would go to it again)
            if time.monotonic() >= deadline:
                raise CoordinatorUnavailableError(
                    f"no active coordinator answered at {', '.join(self.addresses)} within "
                    f"{timeout_s:.3g} s (last: {details.get('message') or failure}); start one or "
                    "check the fabric:// URL") from None
            log.info("coordinator %s did not serve the call (%s); trying %s", address,
                     details.get("message") or type(failure).__name__, active or "the next address")
            time.sleep(min(0.05 * 2 ** min(attempt, 5), 1.0, max(0.0, deadline - time.monotonic())))  # backoff
            attempt += 1

    def address_for(self, route: str | None = None) -> str:
        """The instance calls (of `route`) go to now."""
        with self._lock:
            return (self._routes.get(route) if route else None) or self.addresses[self.current]

    def reroute(self, route: str, failed: str, to: str | None) -> None:
        """After `failed` did not serve a call of `route`: send the route's calls to `to` (the instance it named),
        else to the active instance again."""
        with self._lock:
            if (self._routes.get(route) or self.addresses[self.current]) != failed:
                return  # another thread already moved on
            if to and to != failed:
                self._routes[route] = to
            else:
                self._routes.pop(route, None)

    @property
    def ca(self) -> bytes | None:
        """The CA certificates (PEM) TLS connections check servers against, if given."""
        return self._ca

    def move_from(self, failed: str) -> None:
        """After `failed` did not answer a call made some other way: the next call starts at the next address."""
        self._move(failed, None)

    def _move(self, failed: str, active: str | None) -> None:
        """After `failed` did not serve a call: go to the named active instance, else the next address."""
        with self._lock:
            if self.addresses[self.current] != failed:
                return  # another thread already moved on
            if active and active != failed:
                if active not in self.addresses:
                    self.addresses.append(active)
                self.current = self.addresses.index(active)
            else:
                self.current = (self.current + 1) % len(self.addresses)

    def action(self, name: str, /, **kwargs: Any) -> Any:
        """Run a coordinator action; returns its decoded result."""
        return self.call(action_call(name, **kwargs))

    def status_of(self, address: str) -> wire.InstanceStatus:
        """The status of one instance, without failover (for `fabric coordinator status`)."""
        status: wire.InstanceStatus = self.action_at(address, "status")
        return status

    def action_at(self, address: str, name: str, /, **kwargs: Any) -> Any:
        """Run a coordinator action at one instance, without failover; its decoded result."""
        try:
            return action_call(name, **kwargs)(self.client(address), self.call_options)
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc) from None

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()




Call = Callable[[flight.FlightClient, flight.FlightCallOptions], Any]


def action_call(name: str, /, **kwargs: Any) -> Call:
    """One DoAction of `name` with keyword arguments, returning its decoded result, for any Flight client."""
    request = wire.action(name, **kwargs)
    return lambda client, options: wire.loads(next(iter(client.do_action(request, options))).body)


def put_call(descriptor: flight.FlightDescriptor, schema: pa.Schema,
             batches: Callable[[], Sequence[pa.RecordBatch]]) -> Call:
    """One DoPut of `batches()` (re-made on every retry), returning the server's JSON answer."""
    def run(client: flight.FlightClient, options: flight.FlightCallOptions) -> Any:
        writer, answers = client.do_put(descriptor, schema, options)
        try:
            for batch in batches():
                writer.write_batch(batch)
            writer.done_writing()
            return wire.loads(answers.read())
        finally:
            writer.close()
    return run


def fetch_call(ticket: flight.Ticket) -> Call:
    """One DoGet of `ticket`, returning the fetched runs."""
    return lambda client, options: wire.read_fetched(client.do_get(ticket, options))
