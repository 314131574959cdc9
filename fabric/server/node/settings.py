"""A data node's settings: its properties file (--config) overridden by command-line options, checked up front
so a bad option is an `error:` line naming the fix, never a traceback."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Any

from fabric.common.config import INT_MAX
from fabric.common.errors import InvalidConfigError
from fabric.common.logs import add_log_level_option
from fabric.common.redaction import clip
from fabric.coordinator.node_leases import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_SESSION_TIMEOUT_MS
from fabric.server.connection import ENV_TOKEN, parse_url, refuse_token_in_argv
from fabric.server.instance import (
    METRICS_HOST,
    METRICS_PROPERTIES,
    SERVER_LOG_LEVEL,
    SOCKET_PROPERTIES,
    SocketSettings,
    add_metrics_arguments,
    add_producer_expiration_argument,
    add_security_arguments,
    add_socket_arguments,
    byte_count,
    check_address,
    check_socket_values,
    metrics_port,
    option_values,
)
from fabric.server.node.fetcher import FetchSettings
from fabric.server.node.scrubber import BACKOFF_KEY, DEFAULT_BACKOFF_MS, DEFAULT_SCRUB_RATE, SCRUB_RATE_KEY
from fabric.storage.log_maintenance import DEFAULT_INTERVAL_MS, INTERVAL_KEY
from fabric.storage.producer_state import DEFAULT_EXPIRATION_MS, EXPIRATION_KEY

DEFAULT_LISTEN = "127.0.0.1:9095"


@dataclass(frozen=True)
class NodeSettings(SocketSettings):
    """How one data node runs. `session_timeout_ms` is the controller's node.session.timeout.ms: a node that
    could not heartbeat for that long stops leading (the controller has declared it dead)."""

    node_id: int = -1
    listen: str = DEFAULT_LISTEN
    advertise: str | None = None
    data_dir: str = "./fabric-node"
    coordinator: str = ""
    rack: str | None = None
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    tokens_file: str | None = None
    acl_file: str | None = None
    token_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    shutdown_timeout_ms: int = 5000
    replica_lag_time_max_ms: int = 30000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1 << 20
    replica_fetch_backoff_ms: int = 200
    metrics_port: int | None = None
    metrics_host: str = METRICS_HOST
    metrics_token_file: str | None = None
    log_retention_check_interval_ms: int = DEFAULT_INTERVAL_MS
    producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS
    log_scrubber_io_max_bytes_per_second: int = DEFAULT_SCRUB_RATE
    log_scrubber_backoff_ms: int = DEFAULT_BACKOFF_MS

    def fetch_settings(self) -> FetchSettings:
        return FetchSettings(self.replica_fetch_max_bytes, self.replica_fetch_wait_max_ms,
                             self.replica_fetch_backoff_ms)

    def advertise_address(self, port: int) -> str:
        """host:port clients reach this node at (the listen port 0 becomes the bound port)."""
        host, _, _ = (self.advertise or self.listen).rpartition(":")
        return self.advertise or f"{host}:{port}"


PROPERTIES = {"node.id": "node_id", "node.listen": "listen", "node.advertised.listener": "advertise",
              "node.data.dir": "data_dir", "node.coordinator": "coordinator", "node.rack": "rack",
              "node.heartbeat.interval.ms": "heartbeat_interval_ms", "node.session.timeout.ms": "session_timeout_ms",
              "auth.tokens.file": "tokens_file", "acl.file": "acl_file", "token.file": "token_file",
              "tls.cert.file": "tls_cert",
              "tls.key.file": "tls_key", "node.shutdown.timeout.ms": "shutdown_timeout_ms",
              "replica.lag.time.max.ms": "replica_lag_time_max_ms",
              "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
              "replica.fetch.max.bytes": "replica_fetch_max_bytes",
              "replica.fetch.backoff.ms": "replica_fetch_backoff_ms", **METRICS_PROPERTIES,
              INTERVAL_KEY: "log_retention_check_interval_ms", EXPIRATION_KEY: "producer_id_expiration_ms",
              **SOCKET_PROPERTIES,
              SCRUB_RATE_KEY: "log_scrubber_io_max_bytes_per_second", BACKOFF_KEY: "log_scrubber_backoff_ms"}
PATH_KEYS = ("tokens_file", "acl_file", "token_file", "tls_cert", "tls_key", "metrics_token_file")
MILLISECONDS = {"heartbeat_interval_ms": "node.heartbeat.interval.ms",
                "session_timeout_ms": "node.session.timeout.ms", "shutdown_timeout_ms": "node.shutdown.timeout.ms",
                "replica_lag_time_max_ms": "replica.lag.time.max.ms",
                "replica_fetch_wait_max_ms": "replica.fetch.wait.max.ms",
                "replica_fetch_backoff_ms": "replica.fetch.backoff.ms",
                "log_retention_check_interval_ms": INTERVAL_KEY, "producer_id_expiration_ms": EXPIRATION_KEY,
                "log_scrubber_backoff_ms": BACKOFF_KEY}


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `fabric node start` (each overrides its key in --config)."""
    parser.add_argument("--config", metavar="FILE", help="a properties file (keys: " + ", ".join(PROPERTIES)
                        + "); relative file paths in it are relative to its directory")
    add_log_level_option(parser, SERVER_LOG_LEVEL)
    parser.add_argument("--id", dest="node_id", metavar="N", help="this node's id, an int from 0 (node.id)")
    parser.add_argument("--listen", metavar="HOST:PORT", help=f"address to serve on (default {DEFAULT_LISTEN})")
    parser.add_argument("--advertise", metavar="HOST:PORT", help="address clients use (default: --listen)")
    parser.add_argument("--data", dest="data_dir", metavar="DIR", help="this node's own data directory")
    parser.add_argument("--coordinator", metavar="URL", help="the coordinator service: fabric://host:port[,host:port]"
                        f" (the node's token: --token-file or ${ENV_TOKEN}, never ?token= on the command line)")
    parser.add_argument("--rack", metavar="RACK", help="the node's rack, for rack-aware replica placement")
    parser.add_argument("--heartbeat-interval-ms", metavar="MS", help="how often the node heartbeats "
                        f"(node.heartbeat.interval.ms, default {DEFAULT_HEARTBEAT_INTERVAL_MS})")
    parser.add_argument("--session-timeout-ms", metavar="MS", help="the coordinator's node.session.timeout.ms: "
                        "without a heartbeat for this long the node stops leading "
                        f"(default {DEFAULT_SESSION_TIMEOUT_MS})")
    add_security_arguments(parser, "the coordinator and the other nodes")
    parser.add_argument("--replica-lag-time-max-ms", metavar="MS", help="a follower not caught up for this long "
                        "leaves the ISR (replica.lag.time.max.ms, default 30000)")
    parser.add_argument("--replica-fetch-wait-max-ms", metavar="MS", help="how long a leader holds a follower's "
                        "fetch while it has nothing new (replica.fetch.wait.max.ms, default 500)")
    parser.add_argument("--replica-fetch-max-bytes", metavar="BYTES", help="bytes of frames a follower fetches at "
                        "once, at least one frame (replica.fetch.max.bytes, default 1048576)")
    parser.add_argument("--shutdown-timeout-ms", metavar="MS", help="SIGTERM or Ctrl-C stops the node within this "
                        "time (node.shutdown.timeout.ms, default 5000)")
    parser.add_argument("--log-retention-check-interval-ms", metavar="MS", help="how often the node applies "
                        "retention to the partitions it leads and cleans the replicas of compacted topics it hosts "
                        f"({INTERVAL_KEY}, default {DEFAULT_INTERVAL_MS})")
    add_producer_expiration_argument(parser)
    parser.add_argument("--log-scrubber-io-max-bytes-per-second", metavar="BYTES", help="how fast the node reads "
                        "its replicas' logs to check every frame's CRC in the background, repairing damage from "
                        f"other replicas ({SCRUB_RATE_KEY}, default {DEFAULT_SCRUB_RATE}; 0 turns it off)")
    parser.add_argument("--log-scrubber-backoff-ms", metavar="MS", help="how long the scrubber waits after a pass "
                        f"over every replica before the next ({BACKOFF_KEY}, default {DEFAULT_BACKOFF_MS})")
    add_socket_arguments(parser)
    add_metrics_arguments(parser)


def node_settings_from(args: argparse.Namespace) -> NodeSettings:
    """NodeSettings from --config's properties, then the command-line options; InvalidConfigError naming the
    option and the fix for anything malformed or missing; a token in --coordinator is refused (ps shows it)."""
    refuse_token_in_argv("--coordinator", args.coordinator)
    values = option_values(args, NodeSettings, PROPERTIES, PATH_KEYS, MILLISECONDS)
    if "node_id" not in values:
        raise InvalidConfigError("a data node needs its id: --id N (node.id), an int from 0; keep it with its --data "
                                 "directory across restarts")
    values["node_id"] = _node_id(values["node_id"])
    if "replica_fetch_max_bytes" in values:
        values["replica_fetch_max_bytes"] = byte_count("replica.fetch.max.bytes", values["replica_fetch_max_bytes"])
    check_socket_values(values)
    if "log_scrubber_io_max_bytes_per_second" in values:
        values["log_scrubber_io_max_bytes_per_second"] = byte_count(
            SCRUB_RATE_KEY, values["log_scrubber_io_max_bytes_per_second"], minimum=0)
    if values.get("metrics_port") is not None:
        values["metrics_port"] = metrics_port(values["metrics_port"])
    if not values.get("coordinator"):
        raise InvalidConfigError("a data node needs its coordinator: --coordinator fabric://HOST:PORT[,HOST:PORT] "
                                 "(node.coordinator)")
    parse_url(values["coordinator"])
    settings = replace(NodeSettings(), **{k: v for k, v in values.items() if v is not None})
    check_address("listen", settings.listen)
    if settings.advertise is not None:
        check_address("advertise", settings.advertise)
    if settings.replica_fetch_wait_max_ms * 2 > settings.session_timeout_ms:
        raise InvalidConfigError(f"replica.fetch.wait.max.ms ({settings.replica_fetch_wait_max_ms}) must be at most "
                                 f"half of node.session.timeout.ms ({settings.session_timeout_ms}): a follower's call "
                                 "to its leader gives up at half the session")
    if settings.heartbeat_interval_ms >= settings.session_timeout_ms:
        raise InvalidConfigError(f"node.heartbeat.interval.ms ({settings.heartbeat_interval_ms}) must be below "
                                 f"node.session.timeout.ms ({settings.session_timeout_ms}), e.g. a third of it")
    return settings


def _node_id(value: Any) -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) > INT_MAX:
        raise InvalidConfigError(f"--id {clip(value, 40)} must be a node id, an int from 0 to {INT_MAX}")
    return int(text)
