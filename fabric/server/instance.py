"""One coordinator instance's set-up: its settings (conf/fabric.properties overridden by command-line options),
its metadata store, and how it learns whether it is the active instance (always, on a SQLite store; by a
ZooKeeper election with epoch fencing, on a zk:// store).
"""
from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, fields, replace
from typing import Any

from fabric.common.errors import InvalidConfigError
from fabric.common.logs import add_log_level_option
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.interface import Coordinator
from fabric.server import security

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:9093"
SERVER_LOG_LEVEL = "INFO"


@dataclass(frozen=True)
class Settings:
    """How one instance runs; from conf/fabric.properties (PROPERTIES) overridden by command-line options."""

    listen: str = DEFAULT_LISTEN
    data_dir: str = "./fabric-data"
    store: str | None = None
    advertise: str | None = None
    tokens_file: str | None = None
    acl_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    zk_session_timeout_ms: int = 18000

    @property
    def store_url(self) -> str:
        """The metadata store: --store, else the data directory's own SQLite database (shared with file:// clients)."""
        return self.store or f"sqlite://{os.path.abspath(self.data_dir)}/__fabric/metadata.db"

    def advertise_address(self, port: int) -> str:
        """host:port clients reach this instance at (the listen port 0 becomes the bound port)."""
        host, _, _ = (self.advertise or self.listen).rpartition(":")
        return self.advertise or f"{host}:{port}"


PROPERTIES = {"coordinator.listen": "listen", "coordinator.data.dir": "data_dir", "coordinator.store": "store",
              "coordinator.advertised.listener": "advertise", "auth.tokens.file": "tokens_file",
              "acl.file": "acl_file", "tls.cert.file": "tls_cert", "tls.key.file": "tls_key",
              "zookeeper.session.timeout.ms": "zk_session_timeout_ms"}
PATH_KEYS = ("tokens_file", "acl_file", "tls_cert", "tls_key")


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
    parser.add_argument("--tokens-file", metavar="FILE", help="`token principal` lines; enables authentication")
    parser.add_argument("--acl-file", metavar="FILE", help="`principal operation resource` lines; enables ACLs")
    parser.add_argument("--tls-cert", metavar="PEM", help="server certificate (with --tls-key: serve TLS)")
    parser.add_argument("--tls-key", metavar="PEM", help="server private key")


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from --config's properties, then the command-line options."""
    values: dict[str, Any] = {}
    if args.config:
        for key, value in security.load_properties(args.config).items():
            if key not in PROPERTIES:
                raise InvalidConfigError(f"{args.config}: unknown key {key!r}; known keys: {', '.join(PROPERTIES)}")
            name = PROPERTIES[key]
            values[name] = security.resolve_path(value, args.config) if name in PATH_KEYS else (value or None)
    for f in fields(Settings):
        if getattr(args, f.name, None) is not None:
            values[f.name] = getattr(args, f.name)
    try:
        values["zk_session_timeout_ms"] = int(values.get("zk_session_timeout_ms", 18000))
    except ValueError:
        raise InvalidConfigError("zookeeper.session.timeout.ms must be an integer number of milliseconds") from None
    return replace(Settings(), **{k: v for k, v in values.items() if v is not None})


class Standalone:
    """The election of a sqlite-store instance: it is always active."""

    epoch = 0
    is_active = True

    def __init__(self) -> None:
        self.instance = ""

    def start(self, instance: str) -> None:
        self.instance = instance

    def active_instance(self) -> str:
        return self.instance

    def close(self) -> None:
        pass


class ZkElection:
    """The ZooKeeper controller election of one instance; also the fence of its ZkCoordinator's writes.
    On promotion the instance takes the leadership of every partition (a new controller epoch)."""

    def __init__(self, settings: Settings) -> None:
        from fabric.coordinator import zk_layout
        from fabric.coordinator.zk_store import ZkCoordinator
        timeout_s = settings.zk_session_timeout_ms / 1000
        self.client = zk_layout.connect(settings.store_url, session_timeout=timeout_s)
        self.store = ZkCoordinator(self.client, fence=self, session_timeout=timeout_s)
        self.election: Any = None

    def start(self, instance: str) -> None:
        from fabric.coordinator.election import ControllerElection
        self.election = ControllerElection(self.client, instance.replace(":", "_"), instance,
                                           on_promote=lambda token: self._promoted())
        self.election.start()

    def _promoted(self) -> None:
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

    def close(self) -> None:
        if self.election is not None:
            self.election.stop()
        self.client.stop()
        self.client.close()


def open_store(settings: Settings) -> tuple[Coordinator, Any]:
    """The Coordinator the --store URL names, and the instance's election (Standalone or ZkElection)."""
    url = settings.store_url
    if url.startswith("sqlite://"):
        from fabric.coordinator.sqlite_store import SqliteCoordinator
        return SqliteCoordinator(url[len("sqlite://"):]), Standalone()
    if url.startswith("zk://"):
        election = ZkElection(settings)
        return election.store, election
    raise InvalidConfigError(f"unsupported --store {url!r}; use sqlite:///path/metadata.db or "
                             "zk://host:port[,host:port]/chroot")
