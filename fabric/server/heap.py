"""A server's cyclic garbage collector kept from pausing its requests (docs/performance.md, "Full collections
out of the requests' way").

CPython's full collection walks every object the collector tracks with the interpreter lock held: about 120,000
in a data node hosting 1,000 partitions, 30 to 50 ms on the 2-core machine, every few seconds under load, and
every request the process serves meanwhile waits (the p99 of an acks=all write is made of such pauses). Nearly
all of those objects live as long as the process: modules, classes, functions, the partitions' state. So, as
CPython's documentation suggests for long-lived processes, they are moved out of the collector's way
(`gc.freeze`) once the server started and then every FREEZE_S (sooner at first: after 1 s, then 2, 4, ..., as a
starting server makes most of its long-lived objects early), each after a young collection, so that short-lived
cycles are collected rather than frozen; a full collection then walks only what was made since. Every FULL_S
the frozen objects are collected too (`gc.unfreeze`, then one full collection and a freeze), so cycles that
became garbage among them are reclaimed, at the price of one full pause every FULL_S instead of every few seconds.
Reference counting, which frees everything that is not in a cycle, is untouched.
"""
from __future__ import annotations

import gc
import logging
import time

from fabric.server.background import BackgroundWorker

log = logging.getLogger(__name__)
FREEZE_S = 60.0  # how often the objects that survived since are frozen
FIRST_FREEZE_S = 1.0  # the first time, after the start; each wait then doubles, up to FREEZE_S
FULL_S = 600.0  # how often everything is collected, frozen objects included


class QuietCollector(BackgroundWorker):
    """Freezes the long-lived objects of this process every `freeze_s`, and collects all of them every `full_s`,
    on a daemon thread of its own (stop() stops freezing and collecting)."""

    def __init__(self, freeze_s: float = FREEZE_S, full_s: float = FULL_S) -> None:
        if not 0 < freeze_s <= full_s:
            raise ValueError(f"freeze_s must be above 0 and at most full_s, got {freeze_s} and {full_s}")
        super().__init__("quiet-collector")
        self.freeze_s, self.full_s = freeze_s, full_s

    def start(self) -> QuietCollector:
        """Freeze what the process holds now, then keep at it."""
        gc.collect()
        gc.freeze()
        return super().start()

    def _run(self) -> None:
        full_at, wait_s = time.monotonic() + self.full_s, min(FIRST_FREEZE_S, self.freeze_s)
        while not self._stopped.wait(wait_s):
            wait_s = min(wait_s * 2, self.freeze_s)
            if time.monotonic() >= full_at:
                full_at = time.monotonic() + self.full_s
                self.collect_all()
            else:
                gc.collect(1)
                gc.freeze()

    @staticmethod
    def collect_all() -> int:
        """Collect every object, the frozen ones too, then freeze the survivors; the objects collected."""
        began = time.perf_counter()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        log.debug("full collection: %d objects collected, %d kept, in %.1f ms", collected, gc.get_freeze_count(),
                  (time.perf_counter() - began) * 1000)
        return collected
