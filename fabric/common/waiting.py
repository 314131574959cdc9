"""Waiting on a condition with a deadline (never on a fixed sleep): used by tests, benchmarks and notebooks."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 30.0, what: str = "condition",
             interval: float = 0.05) -> T:
    """Call `condition` until it returns something truthy and return that; raise TimeoutError naming
    `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
