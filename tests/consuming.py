"""Reading what a consumer has, in tests: poll until an expected number of records arrived."""
from __future__ import annotations

import time


def drain(consumer, expected: int, timeout: float = 30.0) -> list:
    """Poll until `expected` records arrived; fail naming the shortfall after `timeout` seconds."""
    records, deadline = [], time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll(0.2)
    assert len(records) == expected, f"got {len(records)} of {expected} records within {timeout} s"
    return records
