"""Retrying a call that may fail with a retriable FabricError (a leader moving or down until the controller
elects another, a coordinator failing over, a replica not caught up yet) until a deadline, with a growing backoff
and fresh cluster metadata before each new attempt. Only for calls that may be repeated: reads, and writes a
retry cannot duplicate (an idempotent producer's, markers)."""
from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

from fabric.client.cluster import Cluster
from fabric.common.errors import FabricError

log = logging.getLogger(__name__)
T = TypeVar("T")
BACKOFF_S, MAX_BACKOFF_S = 0.1, 1.0  # first wait between attempts, doubled up to the max


def retrying(cluster: Cluster, call: Callable[[], T], what: str, timeout_s: float) -> T:
    """call(), retried after a backoff while it raises a retriable FabricError and `timeout_s` has not passed;
    each retry first refreshes the cluster's metadata (leaders and their epochs). A non-retriable error, or the
    last one once the time is up, is raised."""
    deadline = time.monotonic() + timeout_s
    backoff, refresh = BACKOFF_S, False
    while True:
        try:
            if refresh:
                cluster.describe_cluster(refresh=True)
            return call()
        except FabricError as exc:
            if not exc.retriable or time.monotonic() >= deadline:
                raise
            log.log(logging.INFO if refresh else logging.WARNING,  # a call's first retry warns, later ones inform
                    "%s: %s; retrying with fresh metadata for up to %.0f s more", what, exc,
                    deadline - time.monotonic())
        time.sleep(min(backoff, max(deadline - time.monotonic(), 0)))
        backoff, refresh = min(backoff * 2, MAX_BACKOFF_S), True
