"""One coordinator instance's set-up: its settings (conf/fabric.properties overridden by command-line options),
its metadata store, and how it learns whether it is the active instance (always, on a SQLite store; by a
ZooKeeper election with epoch fencing, on a zk:// store).
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Protocol

from fabric.common.config import INT_MAX, TopicConfig
from fabric.common.errors import InvalidConfigError
from fabric.common.logs import add_log_level_option
from fabric.common.redaction import clip
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.groups import MAX_SESSION_TIMEOUT_MS, MAX_SIZE
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.node_leases import DEFAULT_SESSION_TIMEOUT_MS
from fabric.coordinator.offsets_records import SEGMENT_BYTES
from fabric.coordinator.transaction_timeouts import MAX_TIMEOUT_MS
from fabric.server import security
from fabric.server.broker import DEFAULT_MAX_PARTITIONS, partition_limit
from fabric.server.connection_quotas import OVERRIDES_KEY, PER_IP_KEY, TOTAL_KEY, ConnectionQuotas, parse_overrides
from fabric.server.offsets_retention import (
    CHECK_INTERVAL_KEY,
    CHECK_INTERVAL_MS,
    OFFSETS_RETENTION_MINUTES,
    RETENTION_KEY,
)
from fabric.server.protocol_server import CONNECTIONS_MAX_IDLE_MS
from fabric.server.wire import SOCKET_REQUEST_MAX_BYTES
from fabric.storage.log_maintenance import DEFAULT_INTERVAL_MS, INTERVAL_KEY
from fabric.storage.producer_state import DEFAULT_EXPIRATION_MS, EXPIRATION_KEY

log = logging.getLogger(__name__)
CLEANUP_KEY = "transaction.abort.timed.out.transaction.cleanup.interval.ms"  # Kafka's name
DEFAULT_LISTEN = "127.0.0.1:9093"
METRICS_HOST = "127.0.0.1"
SERVER_LOG_LEVEL = "INFO"


@dataclass(frozen=True)
class SocketSettings:
    """What every server process applies to its ports, under Kafka's broker keys and defaults (SOCKET_PROPERTIES):
    the largest request (socket.request.max.bytes), how long an idle connection is kept (connections.max.idle.ms)
    and how many connections are held (max.connections, max.connections.per.ip and its overrides: the fabric
    protocol port only; gRPC gives the Flight port no such limit)."""

    socket_request_max_bytes: int = SOCKET_REQUEST_MAX_BYTES
    connections_max_idle_ms: int = CONNECTIONS_MAX_IDLE_MS
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: str | None = None

    def connection_quotas(self) -> ConnectionQuotas:
        """The connection limits, counting nothing yet (one per protocol server)."""
        return ConnectionQuotas(self.max_connections, self.max_connections_per_ip,
                                parse_overrides(self.max_connections_per_ip_overrides))


@dataclass(frozen=True)
class Settings(SocketSettings):
    """How one instance runs; from conf/fabric.properties (PROPERTIES) overridden by command-line options."""

    listen: str = DEFAULT_LISTEN
    data_dir: str = "./fabric-data"
    store: str | None = None
    advertise: str | None = None
    tokens_file: str | None = None
    acl_file: str | None = None
    token_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    zk_session_timeout_ms: int = 18000
    max_partitions: int = DEFAULT_MAX_PARTITIONS
    shutdown_timeout_ms: int = 5000
    node_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    metrics_port: int | None = None
    metrics_host: str = METRICS_HOST
    metrics_token_file: str | None = None
    default_replication_factor: int | None = None
    log_retention_check_interval_ms: int = DEFAULT_INTERVAL_MS
    producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS
    offsets_topic_replication_factor: int | None = None
    offsets_topic_segment_bytes: int = SEGMENT_BYTES
    transaction_max_timeout_ms: int = MAX_TIMEOUT_MS
    transaction_cleanup_interval_ms: int = 10_000
    offsets_retention_minutes: int = OFFSETS_RETENTION_MINUTES
    offsets_retention_check_interval_ms: int = CHECK_INTERVAL_MS
    group_max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS
    group_max_size: int = MAX_SIZE

    @property
    def store_url(self) -> str:
        """The metadata store: --store, else the data directory's own SQLite database (shared with file:// clients)."""
        return self.store or f"sqlite://{os.path.abspath(self.data_dir)}/__fabric/metadata.db"

    @property
    def offsets_replication_factor(self) -> int | None:
        """The replication factor of the offsets topic on the data nodes (fabric.server.replicated_offsets):
        offsets.topic.replication.factor, else default.replication.factor; None when neither is set (no cluster
        configured): the offsets topic stays in the data directory (`offsets_dir`)."""
        return self.offsets_topic_replication_factor or self.default_replication_factor

    @property
    def offsets_dir(self) -> str:
        """The offsets topic (coordinator.offsets_topic): in the data directory every instance shares, where a
        SQLite store keeps it too (beside its database)."""
        return os.path.join(os.path.abspath(self.data_dir), "__fabric", "__consumer_offsets")

    def advertise_address(self, port: int) -> str:
        """host:port clients reach this instance at (the listen port 0 becomes the bound port)."""
        host, _, _ = (self.advertise or self.listen).rpartition(":")
        return self.advertise or f"{host}:{port}"


METRICS_PROPERTIES = {"metrics.port": "metrics_port", "metrics.host": "metrics_host",
                      "metrics.token.file": "metrics_token_file"}
# the keys of add_socket_arguments, the same for every server process
SOCKET_PROPERTIES = {"socket.request.max.bytes": "socket_request_max_bytes",
                     "connections.max.idle.ms": "connections_max_idle_ms", TOTAL_KEY: "max_connections",
                     PER_IP_KEY: "max_connections_per_ip", OVERRIDES_KEY: "max_connections_per_ip_overrides"}
PROPERTIES = {"coordinator.listen": "listen", "coordinator.data.dir": "data_dir", "coordinator.store": "store",
              "coordinator.advertised.listener": "advertise", "auth.tokens.file": "tokens_file",
              "acl.file": "acl_file", "token.file": "token_file", "tls.cert.file": "tls_cert",
              "tls.key.file": "tls_key", "zookeeper.session.timeout.ms": "zk_session_timeout_ms",
              "topic.max.partitions": "max_partitions",
              "coordinator.shutdown.timeout.ms": "shutdown_timeout_ms",
              "node.session.timeout.ms": "node_session_timeout_ms", **METRICS_PROPERTIES,
              "default.replication.factor": "default_replication_factor",
              INTERVAL_KEY: "log_retention_check_interval_ms", EXPIRATION_KEY: "producer_id_expiration_ms",
              "offsets.topic.replication.factor": "offsets_topic_replication_factor",
              "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
              "transaction.max.timeout.ms": "transaction_max_timeout_ms",
              CLEANUP_KEY: "transaction_cleanup_interval_ms", RETENTION_KEY: "offsets_retention_minutes",
              CHECK_INTERVAL_KEY: "offsets_retention_check_interval_ms",
              "group.max.session.timeout.ms": "group_max_session_timeout_ms", "group.max.size": "group_max_size",
              **SOCKET_PROPERTIES}
PATH_KEYS = ("tokens_file", "acl_file", "token_file", "tls_cert", "tls_key", "metrics_token_file")
MILLISECONDS = {"zk_session_timeout_ms": "zookeeper.session.timeout.ms",
                "shutdown_timeout_ms": "coordinator.shutdown.timeout.ms",
                "node_session_timeout_ms": "node.session.timeout.ms",
                "log_retention_check_interval_ms": INTERVAL_KEY, "producer_id_expiration_ms": EXPIRATION_KEY,
                "transaction_max_timeout_ms": "transaction.max.timeout.ms",
                "transaction_cleanup_interval_ms": CLEANUP_KEY,
                "offsets_retention_check_interval_ms": CHECK_INTERVAL_KEY,
                "group_max_session_timeout_ms": "group.max.session.timeout.ms"}


def add_start_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `fabric coordinator start` (each overrides its key in --config)."""
    parser.add_argument("--config", metavar="FILE", help="a properties file, e.g. conf/fabric.properties; "
                        "relative file paths in it are relative to its directory")
    add_log_level_option(parser, SERVER_LOG_LEVEL)
    parser.add_argument("--listen", metavar="HOST:PORT", help=f"address to serve on (default {DEFAULT_LISTEN})")
    parser.add_argument("--advertise", metavar="HOST:PORT", help="address clients use (default: --listen)")
    parser.add_argument("--store", metavar="URL", help="metadata store: sqlite:///path/metadata.db or "
                        "zk://host:port[,host:port]/chroot (default: DATA/__fabric/metadata.db)")
    parser.add_argument("--data", dest="data_dir", metavar="DIR", help="the shared data directory")
    add_security_arguments(parser, "the data nodes")
    parser.add_argument("--max-partitions", metavar="N", help="most partitions a topic may have "
                        f"(topic.max.partitions, default {DEFAULT_MAX_PARTITIONS})")
    parser.add_argument("--shutdown-timeout-ms", metavar="MS", help="SIGTERM or Ctrl-C stops the instance within "
                        "this time, whatever ZooKeeper or its peers do (coordinator.shutdown.timeout.ms, default 5000)")
    parser.add_argument("--node-session-timeout-ms", metavar="MS", help="a data node without a heartbeat for this "
                        f"long is dead (node.session.timeout.ms, default {DEFAULT_SESSION_TIMEOUT_MS})")
    parser.add_argument("--default-replication-factor", metavar="N", help="place topics created without a "
                        "replication factor on N data nodes too (default.replication.factor; default: such topics "
                        "stay in the coordinator's data directory)")
    parser.add_argument("--log-retention-check-interval-ms", metavar="MS", help="how often retention and compaction "
                        "run over every partition in the background, writes or not "
                        f"({INTERVAL_KEY}, default {DEFAULT_INTERVAL_MS})")
    add_producer_expiration_argument(parser)
    parser.add_argument("--offsets-topic-replication-factor", metavar="N", help="keep the group offsets in a "
                        "__consumer_offsets topic replicated on N data nodes (offsets.topic.replication.factor; "
                        "default: --default-replication-factor, and without either they stay in the data directory)")
    parser.add_argument("--offsets-topic-segment-bytes", metavar="BYTES", help="segment size of the replicated "
                        "__consumer_offsets topic, which the nodes compact segment by segment "
                        f"(offsets.topic.segment.bytes, default {SEGMENT_BYTES}; set when the topic is created)")
    parser.add_argument("--transaction-max-timeout-ms", metavar="MS", help="the largest transaction.timeout.ms a "
                        f"writer may ask for (transaction.max.timeout.ms, default {MAX_TIMEOUT_MS})")
    parser.add_argument("--transaction-cleanup-interval-ms", metavar="MS", help="how often the active instance "
                        f"aborts the transactions on data nodes that passed their timeout ({CLEANUP_KEY}, "
                        "default 10000)")
    parser.add_argument("--offsets-retention-minutes", metavar="MINUTES", help="forget the offsets and the state of "
                        "a group that has had no member and no commit for this long, as Kafka does "
                        f"({RETENTION_KEY}, default {OFFSETS_RETENTION_MINUTES}: 7 days)")
    parser.add_argument("--offsets-retention-check-interval-ms", metavar="MS", help="how often groups are looked at "
                        f"for that ({CHECK_INTERVAL_KEY}, default {CHECK_INTERVAL_MS})")
    parser.add_argument("--group-max-session-timeout-ms", metavar="MS", help="refuse a group member asking for a "
                        "longer session, which it would keep its partitions for once dead (InvalidSessionTimeoutError; "
                        f"group.max.session.timeout.ms, default {MAX_SESSION_TIMEOUT_MS})")
    parser.add_argument("--group-max-size", metavar="N", help="refuse a new member of a group that has N already "
                        "(GroupMaxSizeReachedError; group.max.size, default: no limit)")
    add_socket_arguments(parser)
    add_metrics_arguments(parser)


def add_producer_expiration_argument(parser: argparse.ArgumentParser) -> None:
    """--producer-id-expiration-ms, the same for every server process that takes idempotent appends."""
    parser.add_argument("--producer-id-expiration-ms", metavar="MS", help="forget an idempotent producer that wrote "
                        "nothing to a partition for this long: its next batch there takes a new producer id "
                        f"({EXPIRATION_KEY}, default {DEFAULT_EXPIRATION_MS}: a day)")


def add_security_arguments(parser: argparse.ArgumentParser, peers: str) -> None:
    """The authentication, authorization and TLS options, the same for every server process; `peers` are
    whom its own token (--token-file) is presented to."""
    parser.add_argument("--tokens-file", metavar="FILE", help="`token principal` lines; enables authentication")
    parser.add_argument("--acl-file", metavar="FILE", help="`principal operation resource` lines; enables ACLs")
    parser.add_argument("--token-file", metavar="FILE", help=f"a file holding the token this process presents to "
                        f"{peers} (token.file; default $FABRIC_TOKEN): a token is never given on the command line")
    parser.add_argument("--tls-cert", metavar="PEM", help="server certificate (with --tls-key: serve TLS)")
    parser.add_argument("--tls-key", metavar="PEM", help="server private key")


def add_socket_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of SocketSettings, the same for every server process."""
    parser.add_argument("--socket-request-max-bytes", metavar="BYTES", help="refuse a produce or publish request "
                        "larger than this, as it is read (socket.request.max.bytes, default "
                        f"{SOCKET_REQUEST_MAX_BYTES})")
    parser.add_argument("--connections-max-idle-ms", metavar="MS", help="close a fabric protocol connection with "
                        "no request in flight that sent and was sent nothing for this long (connections.max.idle.ms, "
                        f"default {CONNECTIONS_MAX_IDLE_MS}); clients open a new one at their next request")
    parser.add_argument("--max-connections", metavar="N", help="refuse a new fabric protocol connection while the "
                        f"server holds this many ({TOTAL_KEY}, default {INT_MAX}: no limit)")
    parser.add_argument("--max-connections-per-ip", metavar="N", help="refuse a new fabric protocol connection "
                        f"from an address that holds this many ({PER_IP_KEY}, default {INT_MAX}: no limit; count "
                        "the other servers' connections and those of every client process on a host)")
    parser.add_argument("--max-connections-per-ip-overrides", metavar="HOST:N,...", help="the limit of particular "
                        f"addresses or host names ({OVERRIDES_KEY}, e.g. 10.0.0.5:200)")


def check_socket_values(values: dict[str, Any]) -> None:
    """Check and convert, in place, the SocketSettings among a server's option `values`: InvalidConfigError naming
    the key and the fix."""
    if values.get("socket_request_max_bytes") is not None:
        values["socket_request_max_bytes"] = byte_count("socket.request.max.bytes", values["socket_request_max_bytes"])
    if values.get("connections_max_idle_ms") is not None:
        values["connections_max_idle_ms"] = milliseconds("connections.max.idle.ms", values["connections_max_idle_ms"])
    overrides = values.get("max_connections_per_ip_overrides")
    parse_overrides(overrides)
    for name, key, minimum in (("max_connections", TOTAL_KEY, 1),
                               ("max_connections_per_ip", PER_IP_KEY, 0 if overrides else 1)):
        if values.get(name) is not None:
            values[name] = whole_number(key, values[name], "connections", minimum, f" (0 only with {OVERRIDES_KEY})")


def byte_count(key: str, value: Any, minimum: int = 1) -> int:
    """A size option `key` in bytes: an int from `minimum` to INT_MAX."""
    return whole_number(key, value, "bytes", minimum)


def whole_number(key: str, value: Any, unit: str, minimum: int = 1, note: str = "") -> int:
    """An option `key` counting `unit`s: an int from `minimum` to INT_MAX; InvalidConfigError naming the key, the
    range and `note` otherwise."""
    text = str(value).strip()
    if not text.isdigit() or not minimum <= int(text) <= INT_MAX:
        raise InvalidConfigError(f"{key} must be a number of {unit} from {minimum} to {INT_MAX}{note}, got "
                                 f"{clip(value, 40)}")
    return int(text)


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """--metrics-port, --metrics-host and --metrics-token-file, the same for every server process."""
    parser.add_argument("--metrics-port", metavar="PORT", help="serve Prometheus metrics at "
                        "http://METRICS_HOST:PORT/metrics (metrics.port; 0: any free port, shown by the status "
                        "action; default: no metrics endpoint)")
    parser.add_argument("--metrics-host", metavar="HOST", help="the address the metrics endpoint binds "
                        f"(metrics.host, default {METRICS_HOST}: this machine only; 0.0.0.0 for every interface)")
    parser.add_argument("--metrics-token-file", metavar="FILE", help="a file holding the token a scrape must send "
                        "as `Authorization: Bearer <token>` (metrics.token.file; default: none asked)")


def metrics_port(value: Any) -> int:
    """The port of --metrics-port (metrics.port): 1 to 65535, or 0 for any free one."""
    text = str(value).strip()
    if not text.isdigit() or int(text) > 65535:
        raise InvalidConfigError(f"--metrics-port {clip(value, 40)} must be a port from 1 to 65535, or 0 for any "
                                 "free port (metrics.port); leave it out to serve no metrics")
    return int(text)


def replication_factor(value: Any, key: str = "default.replication.factor") -> int:
    """A replication factor option (--default-replication-factor, default.replication.factor, or another `key`):
    a number of replicas from 1."""
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= INT_MAX:
        raise InvalidConfigError(f"--{key.replace('.', '-')} {clip(value, 40)} must be a number of replicas from 1 "
                                 f"({key}), e.g. 3")
    return int(text)


def segment_bytes(value: Any) -> int:
    """offsets.topic.segment.bytes: a topic's segment.bytes, checked as the topic config checks it."""
    try:
        return int(TopicConfig({"segment.bytes": str(value).strip()})["segment.bytes"])
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"--offsets-topic-segment-bytes (offsets.topic.segment.bytes): {exc}") from None


def option_values(args: argparse.Namespace, settings: type, properties: dict[str, str], path_keys: tuple[str, ...],
                  durations: dict[str, str]) -> dict[str, Any]:
    """The values of a server's settings dataclass given by --config's `properties` (file paths among them
    relative to the file), then by the command-line options; the `durations` checked as milliseconds."""
    values: dict[str, Any] = {}
    if args.config:
        for key, value in security.load_properties(args.config).items():
            if key not in properties:
                raise InvalidConfigError(f"{args.config}: unknown key {clip(key, 60)}; known keys: "
                                         f"{', '.join(properties)}")
            name = properties[key]
            values[name] = security.resolve_path(value, args.config) if name in path_keys else (value or None)
    for f in fields(settings):
        if getattr(args, f.name, None) is not None:
            values[f.name] = getattr(args, f.name)
    for name, key in durations.items():
        if name in values:
            values[name] = milliseconds(key, values[name])
    return values


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from --config's properties, then the command-line options."""
    values = option_values(args, Settings, PROPERTIES, PATH_KEYS, MILLISECONDS)
    if "max_partitions" in values:
        values["max_partitions"] = partition_limit(values["max_partitions"])
    if values.get("metrics_port") is not None:
        values["metrics_port"] = metrics_port(values["metrics_port"])
    for name, key in (("default_replication_factor", "default.replication.factor"),
                      ("offsets_topic_replication_factor", "offsets.topic.replication.factor")):
        if values.get(name) is not None:
            values[name] = replication_factor(values[name], key)
    if values.get("offsets_retention_minutes") is not None:
        values["offsets_retention_minutes"] = whole_number(
            RETENTION_KEY, values["offsets_retention_minutes"], "minutes",
            note=f" (Kafka's default: {OFFSETS_RETENTION_MINUTES}, 7 days)")
    if values.get("group_max_size") is not None:
        values["group_max_size"] = whole_number("group.max.size", values["group_max_size"], "members")
    if values.get("offsets_topic_segment_bytes") is not None:
        values["offsets_topic_segment_bytes"] = segment_bytes(values["offsets_topic_segment_bytes"])
    check_socket_values(values)
    settings = replace(Settings(), **{k: v for k, v in values.items() if v is not None})
    check_address("listen", settings.listen)
    if settings.advertise is not None:
        check_address("advertise", settings.advertise)
    return settings


DAY_MS = 24 * 3600 * 1000
LONGEST_MS = {EXPIRATION_KEY: INT_MAX}  # durations that may pass a day (Kafka's int; its default is the day itself)


def milliseconds(key: str, value: Any) -> int:
    """Duration option `key` in milliseconds: an int from 1 to a day (LONGEST_MS names those that may be longer)."""
    most = LONGEST_MS.get(key, DAY_MS)
    try:
        ms = int(value)
    except (TypeError, ValueError):
        ms = -1
    if not 1 <= ms <= most:
        raise InvalidConfigError(f"{key} must be a number of milliseconds from 1 to {most}, got {clip(value, 40)}")
    return ms


def check_address(option: str, address: str) -> tuple[str, int]:
    """(host, port) of a --listen/--advertise HOST:PORT; InvalidConfigError naming the expected form."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidConfigError(f"--{option} {clip(address, 60)} must be HOST:PORT with a port from 0 to 65535, "
                                 f"e.g. {DEFAULT_LISTEN}")
    return host.strip("[]"), int(port)


def check_listen(listen: str) -> None:
    """Refuse to serve on an address this machine cannot bind now (unknown host, port in use) with the fix:
    gRPC itself only says that the server did not start."""
    host, port = check_address("listen", listen)
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InvalidConfigError(f"cannot listen on {listen}: host {host!r} does not resolve ({exc.strerror}); "
                                 "use an address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise InvalidConfigError(f"cannot listen on {listen}: {exc.strerror}; stop the process that uses it "
                                     "or choose another --listen address") from None


class Controller(Protocol):
    """What an election tells the instance's controller (fabric.server.controller_driver)."""

    def promote(self, claim: Callable[[], int]) -> None: ...

    def demote(self) -> None: ...


class Standalone:
    """The election of a sqlite-store instance: it is always active, and its controller claims a new controller
    epoch (`claim`) when it starts."""

    epoch = 0
    is_active = True

    def __init__(self, claim: Callable[[], int]) -> None:
        self.instance = ""
        self._claim = claim

    def start(self, instance: str, controller: Controller | None = None) -> None:
        self.instance = instance
        if controller is not None:
            controller.promote(self._claim)

    def active_instance(self) -> str:
        return self.instance

    def close(self, timeout: float = 30.0) -> None:
        pass


class ZkElection:
    """The ZooKeeper controller election of one instance; also the fence of its ZkCoordinator's writes.
    On promotion the instance takes the leadership of every single-directory partition (a new controller epoch)
    and starts its controller under the epoch it won; on demotion the controller stops."""

    def __init__(self, settings: Settings) -> None:
        from fabric.coordinator import zk_layout
        from fabric.coordinator.zk_store import ZkCoordinator
        timeout_s = settings.zk_session_timeout_ms / 1000
        self.client = zk_layout.connect(settings.store_url, session_timeout=timeout_s)
        self.store = ZkCoordinator(self.client, fence=self, session_timeout=timeout_s,
                                   offsets_dir=settings.offsets_dir, epoch=lambda: self.epoch)
        self.election: Any = None

    def start(self, instance: str, controller: Controller | None = None) -> None:
        from fabric.coordinator.election import ControllerElection
        self.election = ControllerElection(
            self.client, instance.replace(":", "_"), instance,
            on_promote=lambda token: self._promoted(token.epoch, controller),
            on_demote=lambda token: controller.demote() if controller is not None else None)
        self.election.start()

    def _promoted(self, epoch: int, controller: Controller | None) -> None:
        if controller is not None:
            controller.promote(lambda: epoch)
        try:
            changed = self.store.take_leadership()
        except Exception:  # noqa: BLE001 (the election thread must survive; the next promotion retries)
            log.exception("taking the leadership of the partitions failed; the next promotion retries")
            return
        log.info("active coordinator (controller epoch %d): leader of %d partition(s) changed", self.epoch, changed)

    @property
    def is_active(self) -> bool:
        return self.election is not None and self.election.is_active

    @property
    def epoch(self) -> int:
        return self.election.epoch if self.election is not None else 0

    def active_instance(self) -> str:
        info = self.election.active_instance() if self.election is not None else None
        return info.address if info is not None else ""

    def guard(self, txn: Any) -> Any:
        if self.election is None:
            raise NotControllerError("this coordinator instance has not joined the election yet")
        return self.election.guard(txn)

    def fenced(self, token: Any) -> None:
        if self.election is not None:
            self.election.fenced(token)

    def close(self, timeout: float = 30.0) -> None:
        """Leave the election (resigning at once if active) and end the ZooKeeper session, waiting at most
        about `timeout` seconds for ZooKeeper."""
        if self.election is not None:
            self.election.stop(timeout)
        self.client.stop()
        self.client.close()


def open_store(settings: Settings) -> tuple[Coordinator, Any]:
    """The Coordinator the --store URL names, and the instance's election (Standalone or ZkElection)."""
    url = settings.store_url
    if url.startswith("sqlite://"):
        from fabric.coordinator.sqlite_store import SqliteCoordinator
        store = SqliteCoordinator(url[len("sqlite://"):])
        return store, Standalone(store.claim_controller_epoch)
    if url.startswith("zk://"):
        election = ZkElection(settings)
        return election.store, election
    raise InvalidConfigError(f"unsupported --store {url!r}; use sqlite:///path/metadata.db or "
                             "zk://host:port[,host:port]/chroot")
