"""The HTTP endpoint serving a server's Prometheus registry at /metrics.

It binds metrics.host (loopback unless told otherwise: its answer names every topic and group), and with a
metrics token file it answers only scrapes sending `Authorization: Bearer <token>` (Prometheus's
`authorization` scrape setting), 401 to the rest, so a scraper's credential opens the metrics and nothing else.
"""
from __future__ import annotations

import hmac
import socket
import threading
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from fabric.common.errors import InvalidConfigError

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def bearer_only(app: WsgiApp, token: str) -> WsgiApp:
    """`app` behind a check of `Authorization: Bearer <token>`: a request without it, or with another token,
    gets 401 and a WWW-Authenticate challenge, and never reaches `app`."""
    expected = token.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scheme, _, sent = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(sent.strip().encode(), expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("WWW-Authenticate", 'Bearer realm="metrics"')])
        return [b"send the metrics token: Authorization: Bearer <token> (the server's metrics.token.file)\n"]

    return guarded


def start(registry: CollectorRegistry, host: str, port: int, token: str | None) -> tuple[WSGIServer, threading.Thread]:
    """Serve `registry` at http://host:port/metrics in a daemon thread (asking for `token` if given); the server
    and its thread. InvalidConfigError naming the fix if the address cannot be bound."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise InvalidConfigError(f"cannot serve metrics on {host}: the host does not resolve ({exc.strerror}); "
                                 "set --metrics-host (metrics.host) to an address of this machine, e.g. 127.0.0.1"
                                 ) from None

    class Server(ThreadingWSGIServer):
        address_family = family

    app = make_wsgi_app(registry)
    try:
        server = make_server(host, port, bearer_only(app, token) if token else app, Server,
                             handler_class=_QuietHandler)
    except OSError as exc:
        raise InvalidConfigError(f"cannot serve metrics on {host}:{port} ({exc.strerror}); stop the process that "
                                 "uses the port or choose another --metrics-port (0: any free port), or fix "
                                 "--metrics-host (metrics.host)") from None
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread
