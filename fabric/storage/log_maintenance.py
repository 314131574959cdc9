"""Background log maintenance: retention and compaction on a schedule, so an idle partition expires and gets
cleaned without anything being written to it (Kafka's LogManager checks retention every
log.retention.check.interval.ms, and its cleaner threads run alike).

A LogMaintenance is one daemon thread. Every `interval_ms` it lists the partitions to look after and runs
Log.maintain() on each: retention (segments past retention.ms / retention.bytes deleted), a roll of an active
segment older than segment.ms (max.compaction.lag.ms on a compacted topic), then a cleaner pass if one is due.
It also forgets the idempotent producers that wrote nothing to a partition for producer.id.expiration.ms
(Log.expire_producers), in those partitions or in a wider list (a node's every replica, followers included).
What a pass deleted, cleaned or forgot is logged at INFO. A partition that fails (a broken directory, a disk
error) is logged at WARNING and the pass goes on with the next; a listing that fails is retried by the next pass.

Several processes may maintain one directory at once (embedded writers, coordinator instances sharing a data
directory): retention runs under the partition lock and the cleaner under `.cleaner-lock`, tried without
waiting, so two passes never work on one partition at the same time, and a pass killed anywhere leaves what
recovery repairs (segment_swap).
"""
from __future__ import annotations

import atexit
import logging
import threading
from typing import Callable, Iterable

from fabric.storage.log import Log
from fabric.storage.producer_state import DEFAULT_EXPIRATION_MS, EXPIRATION_KEY

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 300_000  # Kafka's log.retention.check.interval.ms default
EXIT_WAIT_S = 10.0  # how long a process's exit waits for a partition in progress
INTERVAL_KEY = "log.retention.check.interval.ms"

# What a pass looks after: each partition's name (topic-partition) and how to open its Log (opening may fail too).
Partitions = Callable[[], Iterable[tuple[str, Callable[[], Log]]]]


class LogMaintenance:
    """A thread maintaining the logs `partitions()` lists, every `interval_ms` (the first pass one interval after
    start(), so a short-lived process does no maintenance), and forgetting the producers silent for
    `producer_id_expiration_ms` in those, or in those `expiring()` lists if given. stop() ends it between two
    partitions."""

    def __init__(self, partitions: Partitions, interval_ms: int, name: str = "log-maintenance",
                 producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS, expiring: Partitions | None = None) -> None:
        self.partitions = partitions
        self.interval_ms = interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.expiring = expiring
        self.passes = 0  # passes completed
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> LogMaintenance:
        """Start the thread; a process that exits without stop() stops it first (atexit): a daemon thread still
        inside Arrow's C++ while the interpreter finalizes can abort the process."""
        self._thread.start()
        atexit.register(self._at_exit)
        log.info("log maintenance every %d ms (%s)", self.interval_ms, INTERVAL_KEY)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the thread and wait up to `timeout_s` for a partition in progress to finish (a thread still at it
        then is a daemon: a crash mid-pass is safe, recovery repairs it)."""
        self._stopping.set()
        atexit.unregister(self._at_exit)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("log maintenance did not stop within %.1f s: it is left to end with the process",
                            timeout_s)

    def _at_exit(self) -> None:
        self.stop(EXIT_WAIT_S)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_ms / 1000):
            self.run_once()

    def run_once(self) -> None:
        """One pass over every partition listed now; never raises (failures are logged)."""
        listed = self._list(self.partitions)
        if listed is None:
            return
        for name, open_log in listed:
            if self._stopping.is_set():
                return
            self._maintain(name, open_log, expire=self.expiring is None)
        others = [] if self.expiring is None else self._list(self.expiring) or []
        for name, open_log in others:  # (only their producers: e.g. a node's followers, which retain nothing)
            if self._stopping.is_set():
                return
            self._maintain(name, open_log, expire=True, maintain=False)
        self.passes += 1

    def _list(self, partitions: Partitions) -> list[tuple[str, Callable[[], Log]]] | None:
        try:
            return list(partitions())
        except Exception as exc:  # noqa: BLE001 (the loop must survive: the next pass lists again)
            log.warning("log maintenance could not list the partitions (%s); trying again in %d ms", exc,
                        self.interval_ms)
            return None

    def _maintain(self, name: str, open_log: Callable[[], Log], expire: bool, maintain: bool = True) -> None:
        """Log.maintain() on partition `name` (if `maintain`), then (if `expire`) its silent producers forgotten."""
        deleted = forgotten = 0
        try:
            plog = open_log()
            if maintain:
                deleted, _ = plog.maintain()  # a cleaner pass that cleaned logs its report itself (LogCleaner)
            if expire:
                forgotten = plog.expire_producers(self.producer_id_expiration_ms)
        except Exception as exc:  # noqa: BLE001 (one broken partition must not stop the others' maintenance)
            log.warning("log maintenance of %s failed (%s: %s); the other partitions go on, and it is tried again "
                        "next pass", name, type(exc).__name__, exc)
            return
        if deleted:
            log.info("%s: retention deleted %d segment(s); the log starts at offset %d now", name, deleted,
                     plog.start_offset)
        if forgotten:
            log.info("%s: forgot %d idempotent producer(s) that wrote nothing for %d ms (%s)", name, forgotten,
                     self.producer_id_expiration_ms, EXPIRATION_KEY)
