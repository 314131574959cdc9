"""Time in one place: the wall clock in milliseconds and microseconds since the epoch.

Timestamps, retention, segment age and group sessions are compared across processes and hosts, so they use
the wall clock. Whatever decides by the time takes a Clock, so a test can hand it one it controls.
"""
from __future__ import annotations

import time


class Clock:
    """The system wall clock; subclass it (overriding now_us) to control time in a test."""

    def now_us(self) -> int:
        """Microseconds since the epoch (record timestamps are stored in µs)."""
        return time.time_ns() // 1000

    def now_ms(self) -> int:
        """Milliseconds since the epoch (Kafka's unit for configs, timeouts and commit times)."""
        return self.now_us() // 1000


SYSTEM_CLOCK = Clock()
