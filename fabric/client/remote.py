"""`RemoteCluster`: the Cluster interface served by coordinator instances over Arrow Flight.

URL: `fabric://host:port[,host:port...][?token=T&tls=true&ca=/ca.pem&timeout_ms=30000]` (`fabric+tls://`
implies tls=true). The token defaults to $FABRIC_TOKEN, the CA file to $FABRIC_TLS_CA. Calls go to the
instance that answered last; on a connection error or a "not the active coordinator" answer the client
moves to the named active instance (else the next address) and retries until timeout_ms has passed.
A retried append may be written twice (at-least-once, as Kafka without idempotence); publish is exactly-once.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar
from urllib.parse import parse_qs, urlparse

import pyarrow as pa
import pyarrow.flight as flight

from fabric.client.cluster import Cluster
from fabric.common.errors import CoordinatorUnavailableError, InvalidConfigError
from fabric.common.redaction import redact_url
from fabric.common.types import (
    CommittedOffset,
    Fetched,
    GroupDescription,
    JoinRequest,
    JoinResult,
    PartitionState,
    SyncResult,
    TopicInfo,
    TopicPartition,
    TopicRecovery,
)
from fabric.coordinator.interface import Coordinator
from fabric.server import wire
from fabric.server.security import read_pem

log = logging.getLogger(__name__)
ENV_TOKEN = "FABRIC_TOKEN"
ENV_CA = "FABRIC_TLS_CA"
SCHEMES = {"fabric": False, "fabric+tls": True}
QUERY_KEYS = ("token", "tls", "ca", "timeout_ms")
T = TypeVar("T")


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
        if not host or not port.isdigit():
            raise InvalidConfigError(f"coordinator address {address!r} in {shown!r} must be host:port")
    try:
        timeout_s = int(query.get("timeout_ms", "30000")) / 1000
    except ValueError:
        raise InvalidConfigError(f"timeout_ms in {shown!r} must be an integer number of milliseconds") from None
    tls = SCHEMES[parsed.scheme] or query.get("tls", "false").lower() in ("true", "1", "yes")
    return RemoteOptions(addresses, query.get("token") or os.environ.get(ENV_TOKEN) or None, tls,
                         query.get("ca") or os.environ.get(ENV_CA) or None, timeout_s)


class Connection:
    """Flight clients to the instances of one URL, with failover to the active instance."""

    def __init__(self, options: RemoteOptions) -> None:
        self.options = options
        self.addresses = list(options.addresses)
        self.current = 0
        self._clients: dict[str, flight.FlightClient] = {}
        self._lock = threading.Lock()
        headers = [(wire.AUTH_HEADER.encode(), f"Bearer {options.token}".encode())] if options.token else []
        self.call_options = flight.FlightCallOptions(headers=headers, timeout=options.timeout_s)
        self._ca = read_pem(options.ca_file, "TLS CA file (?ca= or $FABRIC_TLS_CA)")

    def client(self, address: str) -> flight.FlightClient:
        """The (cached) Flight client of one instance."""
        with self._lock:
            if address not in self._clients:
                scheme = "grpc+tls" if self.options.tls else "grpc+tcp"
                kwargs = {"tls_root_certs": self._ca} if self._ca else {}
                self._clients[address] = flight.connect(f"{scheme}://{address}", **kwargs)
            return self._clients[address]

    def call(self, fn: Callable[[flight.FlightClient, flight.FlightCallOptions], T]) -> T:
        """Run fn against the active instance, failing over until the URL's timeout has passed."""
        deadline = time.monotonic() + self.options.timeout_s
        attempt = 0
        while True:
            with self._lock:
                address = self.addresses[self.current]
            try:
                return fn(self.client(address), self.call_options)
            except (flight.FlightUnavailableError, flight.FlightTimedOutError) as exc:
                failure = exc
            except flight.FlightError as exc:
                raise wire.from_flight_error(exc) from None
            details = wire.error_details(failure)
            if time.monotonic() >= deadline:
                raise CoordinatorUnavailableError(
                    f"no active coordinator answered at {', '.join(self.addresses)} within "
                    f"{self.options.timeout_s:g} s (last: {details.get('message') or failure}); start one or "
                    "check the fabric:// URL") from None
            active = details.get("active") if details.get("type") == wire.NOT_ACTIVE else None
            log.info("coordinator %s did not serve the call (%s); trying %s", address,
                     details.get("message") or type(failure).__name__, active or "the next address")
            self._move(address, active)
            time.sleep(min(0.05 * 2 ** min(attempt, 5), 1.0, max(0.0, deadline - time.monotonic())))  # backoff
            attempt += 1

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
        request = wire.action(name, **kwargs)
        return self.call(lambda client, options: wire.loads(next(iter(client.do_action(request, options))).body))

    def status_of(self, address: str) -> wire.InstanceStatus:
        """The status of one instance, without failover (for `fabric coordinator status`)."""
        try:
            return wire.loads(next(iter(self.client(address).do_action(wire.action("status"),
                                                                       self.call_options))).body)
        except flight.FlightError as exc:
            raise wire.from_flight_error(exc) from None

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


class RemoteCoordinator(Coordinator):
    """The Coordinator of a coordinator service: each method is one DoAction."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def create_topic(self, name: str, partitions: int, config: dict[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        return self.connection.action("create_topic", name=name, partitions=partitions, config=dict(config),
                                      value_schema=value_schema)

    def delete_topic(self, name: str) -> None:
        self.connection.action("delete_topic", name=name)

    def topic(self, name: str) -> TopicInfo:
        return self.connection.action("topic", name=name)

    def list_topics(self) -> list[str]:
        return self.connection.action("list_topics")

    def alter_topic_config(self, name: str, config: dict[str, str | None]) -> TopicInfo:
        return self.connection.action("alter_topic_config", name=name, config=dict(config))

    def set_partitions(self, name: str, total: int) -> TopicInfo:
        return self.connection.action("set_partitions", name=name, total=total)

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        self.connection.action("commit_offsets", group=group, offsets=dict(offsets), metadata=metadata,
                               generation=generation, member_id=member_id)

    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        return self.connection.action("committed", group=group, topics=None if topics is None else list(topics))

    def list_groups(self) -> list[str]:
        return self.connection.action("list_groups")

    def delete_group(self, group: str) -> None:
        self.connection.action("delete_group", group=group)

    def commit_transaction(self, txn: str) -> None:
        self.connection.action("commit_transaction", txn=txn)

    def transaction_committed(self, txn: str) -> bool:
        return self.connection.action("transaction_committed", txn=txn)

    def join_group(self, request: JoinRequest) -> JoinResult:
        return self.connection.action("join_group", request=request)

    def sync_group(self, group: str, member_id: str, generation: int) -> SyncResult:
        return self.connection.action("sync_group", group=group, member_id=member_id, generation=generation)

    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        self.connection.action("heartbeat", group=group, member_id=member_id, generation=generation)

    def leave_group(self, group: str, member_id: str) -> None:
        self.connection.action("leave_group", group=group, member_id=member_id)

    def describe_group(self, group: str) -> GroupDescription:
        return self.connection.action("describe_group", group=group)

    def close(self) -> None:
        self.connection.close()


class RemoteCluster(Cluster):
    """A fabric served by coordinator instances (`fabric://host:port[,host:port]`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.options = parse_url(url)
        self.connection = Connection(self.options)
        self.coordinator = RemoteCoordinator(self.connection)

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        return self.coordinator.create_topic(name, partitions, dict(config), value_schema)

    def delete_topic(self, name: str) -> None:
        self.coordinator.delete_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        return self.connection.action("create_partitions", name=name, total=total)

    def recover_topics(self, names: Sequence[str] | None = None) -> list[TopicRecovery]:
        return self.connection.action("recover_topics", names=None if names is None else list(names))

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        """The service checks the offsets against its logs (Broker.commit_offsets) before storing them."""
        self.coordinator.commit_offsets(group, offsets, metadata, generation, member_id)

    def _put(self, descriptor: flight.FlightDescriptor, schema: pa.Schema,
             batches: Callable[[], Sequence[pa.RecordBatch]]) -> Any:
        """One DoPut of `batches()` (re-made on every retry); returns the server's JSON answer."""
        def run(client: flight.FlightClient, options: flight.FlightCallOptions) -> Any:
            writer, answers = client.do_put(descriptor, schema, options)
            try:
                for batch in batches():
                    writer.write_batch(batch)
                writer.done_writing()
                return wire.loads(answers.read())
            finally:
                writer.close()
        return self.connection.call(run)

    def append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none") -> int:
        descriptor = wire.put_descriptor("append", topic=topic, partition=partition, codec=codec)
        return self._put(descriptor, rows.schema, lambda: [rows])

    def publish(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                codec: str = "none") -> bool:
        return self._publish("publish", txn, parts, codec=codec)

    def publish_frames(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.Buffer]]) -> bool:
        """Ships the sealed frames as they are; the service appends them without re-encoding."""
        return self._publish("publish_frames", txn, parts)

    def _publish(self, op: str, txn: str, parts: Mapping[TopicPartition, Sequence[Any]], **kwargs: Any) -> bool:
        descriptor = wire.put_descriptor(op, txn=txn, keys=[[t, p] for t, p in parts], **kwargs)
        payload = wire.PUBLISH_OPS[op][1]
        return self._put(descriptor, wire.ENVELOPE, lambda: list(wire.envelope(dict(parts), payload)))

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None) -> list[Fetched]:
        ticket = wire.fetch_ticket(topic, partition, offset, max_bytes, end_offset)
        return self.connection.call(lambda client, options: wire.read_fetched(client.do_get(ticket, options)))

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        return self.connection.action("partition_state", topic=topic, partition=partition)

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        return self.connection.action("offset_for_time", topic=topic, partition=partition, timestamp_us=timestamp_us)

    def enforce_retention(self, topic: str) -> int:
        return self.connection.action("enforce_retention", topic=topic)

    def statuses(self) -> dict[str, wire.InstanceStatus | Exception]:
        """Every listed instance's status, or the error reaching it."""
        out: dict[str, wire.InstanceStatus | Exception] = {}
        for address in self.options.addresses:
            try:
                out[address] = self.connection.status_of(address)
            except Exception as exc:  # noqa: BLE001 (reported per instance, not raised)
                out[address] = exc
        return out
