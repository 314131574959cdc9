"""The clock of a leader's view of its followers: when each last fetched and was caught up (leader.py), when a
fetch session last swept its idle partitions (fetch_sessions.py), and how long an answer from memory holds
(partition.py). One function, so a test drives all of them by replacing it."""
from __future__ import annotations

import time


def now_ms() -> float:
    """Milliseconds of the monotonic clock."""
    return time.monotonic() * 1000
