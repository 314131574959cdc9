"""Produce and fetch requests as a server's Flight handlers serve them (Kafka's RequestsPerSec, BytesInPerSec /
BytesOutPerSec and request TotalTimeMs): per kind, a request count, the bytes of records carried, refusals by
error type and a latency histogram.

`RequestMetrics.measure(kind)` times one request; the code that decodes appended rows (shared by both
services), published parts (the coordinator's) and gathers fetched batches (shared) reports their size with
`count_bytes`, which adds it to the request measured on this thread (nothing outside one).
"""
from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram

from fabric.storage.lock import PartitionBusy

KINDS = ("produce", "fetch")
# from sub-millisecond reads to acks=all appends waiting for the ISR (request.timeout.ms defaults to 30 s)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class _Request:
    """The request being measured: the bytes of records it carried so far."""

    nbytes: int = 0


_current: ContextVar[_Request | None] = ContextVar("fabric_measured_request", default=None)


def count_bytes(nbytes: int) -> None:
    """Add `nbytes` of records to the request measured on this thread, if any."""
    request = _current.get()
    if request is not None:
        request.nbytes += nbytes


@dataclass(frozen=True)
class _KindMetrics:
    requests: Counter
    nbytes: Counter
    errors: Counter
    latency: Histogram


class RequestMetrics:
    """fabric_<kind>_requests_total, _bytes_total, _errors_total{error} and _latency_seconds for each of KINDS,
    in `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._kinds = {kind: _KindMetrics(
            Counter(f"fabric_{kind}_requests", f"{kind} requests served, refused ones included", registry=registry),
            Counter(f"fabric_{kind}_bytes", f"bytes of records in {kind} requests (Arrow buffers)",
                    registry=registry),
            Counter(f"fabric_{kind}_errors", f"{kind} requests refused or failed, by error type", ["error"],
                    registry=registry),
            Histogram(f"fabric_{kind}_latency_seconds", f"time to serve a {kind} request (a fetch: to read the "
                      "batches it answers, not to send them)", buckets=LATENCY_BUCKETS, registry=registry))
            for kind in KINDS}

    def add_bytes(self, kind: str, nbytes: int) -> None:
        """Count `nbytes` of records for a request of `kind` measured earlier (a held fetch's answer, read when
        its records came)."""
        self._kinds[kind].nbytes.inc(nbytes)

    @contextlib.contextmanager
    def measure(self, kind: str) -> Iterator[None]:
        """Count and time the request run inside, with the bytes `count_bytes` reports meanwhile and the type of
        the exception it raises, if any."""
        metrics = self._kinds[kind]
        request = _Request()
        token = _current.set(request)
        start = time.perf_counter()
        counted = True
        try:
            yield
        except PartitionBusy:  # not served here: an event loop hands it to a worker thread, which measures it
            counted = False
            raise
        except Exception as exc:
            metrics.errors.labels(type(exc).__name__).inc()
            raise
        finally:
            _current.reset(token)
            if counted:
                metrics.latency.observe(time.perf_counter() - start)
                metrics.requests.inc()
                metrics.nbytes.inc(request.nbytes)
