"""Time in one place: the wall clock in milliseconds and microseconds since the epoch, and a monotonic clock.

Timestamps, retention, segment age and group sessions are compared across processes and hosts, so they use
the wall clock. Intervals measured inside one process (the controller's node leases) use the monotonic clock,
which a wall-clock step cannot move. Whatever decides by the time takes a Clock, so a test can hand it one it
controls.
"""
from __future__ import annotations

import time


class Clock:
    """The system clocks; subclass it (overriding now_us and monotonic_ms) to control time in a test."""

    def now_us(self) -> int:
        """Microseconds since the epoch (record timestamps are stored in µs)."""
        return time.time_ns() // 1000

    def now_ms(self) -> int:
        """Milliseconds since the epoch (Kafka's unit for configs, timeouts and commit times)."""
        return self.now_us() // 1000

    def monotonic_ms(self) -> int:
        """Milliseconds on this process's monotonic clock: only differences mean anything."""
        return time.monotonic_ns() // 1_000_000


SYSTEM_CLOCK = Clock()
