"""The Prometheus metrics one server process exposes (a coordinator instance, a data node; `--metrics-port`).

Each server has a CollectorRegistry of its own, never prometheus_client's global one, so servers (and tests)
sharing a process never collide. Its Flight handlers record produce and fetch requests into it
(request_metrics.py), beside the process's own (process_cpu_seconds_total, process_resident_memory_bytes, ...);
the coordinator and the nodes register their own collectors (coordinator_metrics.py, node/metrics.py). The
HTTP endpoint is off unless a port is given: it serves /metrics, in plain HTTP and without authentication, on
the host of --listen; port 0 binds any free port, and `port` says which.
"""
from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from fabric.common.errors import InvalidConfigError
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

    def serve(self, listen: str, port: int | None) -> None:
        """Serve the registry at http://HOST:port/metrics, HOST being `listen`'s (nothing if `port` is None);
        InvalidConfigError naming the fix if the port cannot be bound."""
        if port is None:
            return
        host = listen.rpartition(":")[0].strip("[]")
        try:
            self._http = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise InvalidConfigError(f"cannot serve metrics on {host}:{port} ({exc.strerror}); stop the process "
                                     "that uses the port or choose another --metrics-port (0: any free port)") from None
        self.port = self._http[0].server_port
        log.info("serving Prometheus metrics at http://%s:%d/metrics", host, self.port)

    def close(self) -> None:
        """Stop the endpoint (scrapes in flight finish)."""
        if self._http is not None:
            server, thread = self._http
            server.shutdown()
            server.server_close()
            thread.join()
            self._http, self.port = None, None
