"""Retrying a call that may fail with a retriable FabricError (a leader moving, a coordinator failing over,
replicas catching up) until a deadline, with a growing backoff between attempts."""
from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

from fabric.common.errors import FabricError

log = logging.getLogger(__name__)
T = TypeVar("T")


def retrying(call: Callable[[], T], what: str, timeout_s: float, backoff_s: float = 0.1,
             max_backoff_s: float = 2.0) -> T:
    """call(), again after each retriable FabricError until `timeout_s` has passed (then that error is raised);
    only safe for calls that may be repeated (idempotent ones)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except FabricError as exc:
            if not exc.retriable or time.monotonic() + backoff_s >= deadline:
                raise
            log.info("%s: %s; retrying in %.2f s", what, exc, backoff_s)
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, max_backoff_s)
