"""The Prometheus metrics one server process exposes (a coordinator instance, a data node; `--metrics-port`).

Each server has a CollectorRegistry of its own, never prometheus_client's global one, so servers (and tests)
sharing a process never collide. Its Flight handlers record produce and fetch requests into it
(request_metrics.py), beside the process's own (process_cpu_seconds_total, process_resident_memory_bytes, ...);
the coordinator and the nodes register their own collectors (coordinator_metrics.py, node/metrics.py). The
HTTP endpoint (metrics_endpoint.py) is off unless a port is given: it serves /metrics in plain HTTP on
metrics.host (loopback by default), asking for a bearer token when given a metrics token file; port 0 binds any
free port, and `port` says which.
"""
from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector

from fabric.server import metrics_endpoint, security
from fabric.server.request_metrics import RequestMetrics

log = logging.getLogger(__name__)


class ServerMetrics:
    """A server's registry, the request metrics its handlers record, and its HTTP endpoint once `serve` ran."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # the process's CPU, memory and file descriptors
        self.requests = RequestMetrics(self.registry)
        self.port: int | None = None  # the endpoint's bound port while it serves
        self._http: tuple[WSGIServer, threading.Thread] | None = None

    def serve(self, host: str, port: int | None, token_file: str | None = None) -> None:
        """Serve the registry at http://host:port/metrics (nothing if `port` is None), asking for the token of
        `token_file` if given (metrics_endpoint); InvalidConfigError naming the fix if it cannot."""
        if port is None:
            return
        token = security.load_token(token_file, "--metrics-token-file") if token_file else None
        self._http = metrics_endpoint.start(self.registry, host, port, token)
        self.port = self._http[0].server_port
        log.info("serving Prometheus metrics at http://%s:%d/metrics (%s)", host, self.port,
                 "a bearer token required" if token else "no token required")

    def close(self) -> None:
        """Stop the endpoint (scrapes in flight finish)."""
        if self._http is not None:
            server, thread = self._http
            server.shutdown()
            server.server_close()
            thread.join()
            self._http, self.port = None, None
