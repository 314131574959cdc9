"""Turn a fabric URL into a Cluster: file:///dir or a path is embedded; fabric://host:port is remote."""
from __future__ import annotations

import os
from typing import Sequence
from urllib.parse import urlparse

from fabric.client.cluster import Cluster
from fabric.common.errors import InvalidConfigError
from fabric.common.redaction import redact_url

DEFAULT_URL = "./fabric-data"
ENV_URL = "FABRIC_URL"


def resolve(url: str | None = None) -> str:
    """The URL to use: the argument, else $FABRIC_URL, else ./fabric-data."""
    return url or os.environ.get(ENV_URL) or DEFAULT_URL


def bootstrap_url(servers: str | Sequence[str]) -> str:
    """Kafka's bootstrap servers (`host:port[,host:port]`, or a list of them) as the fabric:// URL of those
    coordinator services; a value that names a scheme (file://, fabric://), or a list of one such, is kept as it
    is (kafka-python's habit of a list: bootstrap_servers=["file:///dir"])."""
    if not isinstance(servers, str) and isinstance(servers, Sequence) and len(servers) == 1:
        servers = servers[0]
    if isinstance(servers, str) and "://" in servers:
        return servers
    listed = servers.split(",") if isinstance(servers, str) else list(servers)
    if not listed or not all(isinstance(s, str) and s.strip().rpartition(":")[0]
                             and s.strip().rpartition(":")[2].isdigit() for s in listed):
        raise InvalidConfigError(f"bootstrap servers are host:port[,host:port] (a coordinator service's), got "
                                 f"{servers!r}; or name the fabric by URL: file:///dir for an embedded one")
    return "fabric://" + ",".join(s.strip() for s in listed)


def open_cluster(url: str | None = None) -> Cluster:
    """Open the cluster a URL names."""
    url = resolve(url)
    if not isinstance(url, str):
        raise InvalidConfigError(f"a fabric URL is a string, got {type(url).__name__}; e.g. 'file:///tmp/fabric'")
    try:
        parsed = urlparse(url)
    except ValueError as exc:
        raise InvalidConfigError(f"fabric URL {url!r} cannot be parsed ({exc}); use file:///dir or "
                                 "fabric://host:port[,host:port]") from None
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidConfigError(f"file URL {redact_url(url)!r} names host {parsed.hostname!r}; "
                                     "use file:///absolute/dir")
        if not parsed.path or parsed.query or parsed.fragment:
            raise InvalidConfigError(f"file URL {redact_url(url)!r} must be a directory path and nothing else; "
                                     "use file:///absolute/dir")
        from fabric.client.embedded import EmbeddedCluster
        return EmbeddedCluster(parsed.path)
    if parsed.scheme in ("fabric", "fabric+tls"):
        from fabric.client.routing import RoutingCluster
        return RoutingCluster(url)
    if parsed.scheme == "" or (len(parsed.scheme) == 1 and os.name == "nt"):
        from fabric.client.embedded import EmbeddedCluster
        return EmbeddedCluster(url)
    raise InvalidConfigError(
        f"unsupported fabric URL {redact_url(url)!r}; use file:///dir (or a plain path) for an embedded fabric, "
        "or fabric://host:port[,host:port] for a coordinator service")
