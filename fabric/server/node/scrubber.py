"""A data node's scrubber: a thread that walks the log of every replica the node hosts below its high watermark
(an unverified one's below its log end), checking every frame's CRC (fabric/storage/scrub.py), reading at most
log.scrubber.io.max.bytes.per.second, and starts again log.scrubber.backoff.ms after each pass (at once when a
replica is unverified).

- Replicas UNVERIFIED (their logs were on disk when the node started; storage_health) go first: a pass over one
  makes it verified, so a replica damaged while its node was down cannot rejoin an ISR before the damage is
  found. Then the others, in partition order.
- Each finding is logged at WARNING (the partition, the offsets, the segment and the byte), counted
  (fabric_log_damaged_ranges_total), and repaired from another replica's copy at once (repair.py); a range that
  cannot be repaired yet leaves the replica DAMAGED (reported to the controller) and is tried again between passes,
  as often as the repairer allows (every repair.REPAIR_BACKOFF_S: no reader meets a follower's damage). A damage
  known from an earlier pass and no longer found (repaired by a read, or deleted by retention) is forgotten.
- An offline replica is skipped; a storage failure while scrubbing takes the replica offline as any other does.
"""
from __future__ import annotations

import logging
import threading
import time

from fabric.common.errors import StorageError
from fabric.server.node.partition import PartitionReplica
from fabric.server.node.replica_manager import ReplicaManager
from fabric.server.node.storage_health import Health
from fabric.storage import scrub

log = logging.getLogger(__name__)
SCRUB_RATE_KEY = "log.scrubber.io.max.bytes.per.second"
DEFAULT_SCRUB_RATE = 16 << 20  # bytes per second (0 turns scrubbing off)
BACKOFF_KEY = "log.scrubber.backoff.ms"
DEFAULT_BACKOFF_MS = 15_000  # as Kafka's log.cleaner.backoff.ms
POLL_S = 1.0  # how often a scrubber between passes looks for unverified replicas


class Stopped(Exception):
    """The scrubber was stopped in the middle of a walk."""


class Scrubber:
    """Scrubs the replicas of `replicas` at `rate` bytes per second at most, a pass every `backoff_ms` (and at once
    for an unverified replica), on a thread (`start`, `stop`)."""

    def __init__(self, replicas: ReplicaManager, rate: int, backoff_ms: int = DEFAULT_BACKOFF_MS) -> None:
        self.replicas, self.rate, self.backoff_s = replicas, rate, backoff_ms / 1000
        self.scrubbed_bytes = 0
        self._stopped = threading.Event()
        self._window = (time.monotonic(), 0)  # (since, bytes walked since): the rate limit's reference
        self._thread = threading.Thread(target=self._run, name="node-scrubber", daemon=True)

    def start(self) -> Scrubber:
        log.info("scrubbing every replica's log at most %d bytes/s (%s), a pass every %.0f s (%s)", self.rate,
                 SCRUB_RATE_KEY, self.backoff_s, BACKOFF_KEY)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.run_once()
            except Stopped:
                return
            except Exception:  # noqa: BLE001 (a bug must not stop scrubbing for good)
                log.exception("a scrubber pass failed; the next one starts in %.0f s", self.backoff_s)
            due = time.monotonic() + self.backoff_s
            while not self._stopped.wait(min(POLL_S, max(due - time.monotonic(), 0))) and not self._unverified():
                if time.monotonic() >= due:
                    break
                self._repair_known()

    def _repair_known(self) -> None:
        """Try again to repair the damage a pass found and could not repair (the repairer spaces the tries of a
        range REPAIR_BACKOFF_S apart)."""
        health = self.replicas.health
        for replica in self.replicas.hosted():
            for damage in [] if health.offline(replica.tp) else health.damage(replica.tp):
                try:
                    self.replicas.repairer.repair(replica, damage)
                except (OSError, StorageError) as exc:
                    if self.replicas.hosts(replica):
                        health.failed(replica.tp, exc, f"repair partition {replica.name}")

    def _unverified(self) -> bool:
        health = self.replicas.health
        return any(health.condition(r.tp).health is Health.UNVERIFIED for r in self.replicas.hosted())

    def run_once(self) -> int:
        """One pass over every hosted replica, unverified ones first; the bytes walked."""
        before = self.scrubbed_bytes
        health = self.replicas.health
        replicas = self.replicas.hosted()
        for replica in sorted(replicas, key=lambda r: (health.condition(r.tp).health is not Health.UNVERIFIED,
                                                       r.tp)):
            self.scrub(replica)
        return self.scrubbed_bytes - before

    def scrub(self, replica: PartitionReplica) -> None:
        """Scrub one replica below its high watermark, repair what it finds, and record the outcome. An unverified
        replica is scrubbed to its log end: its high watermark when the node started is only the last one
        checkpointed, and every frame that was on disk then must be checked before it counts as verified."""
        health, tp = self.replicas.health, replica.tp
        if health.offline(tp) or replica.hw < 0:
            return
        end = replica.log.end_offset if health.condition(tp).health is Health.UNVERIFIED else replica.hw
        try:
            found = scrub.scrub(replica.log, end, self._throttle)
        except (OSError, StorageError) as exc:
            if self.replicas.hosts(replica):  # (one that left the node meanwhile may have lost its directory)
                health.failed(tp, exc, f"scrub partition {replica.name}")
            return
        if not self.replicas.hosts(replica):
            return
        firsts = {d.first_offset for d in found}
        for gone in [d for d in health.damage(tp) if d.first_offset not in firsts]:
            health.repaired(tp, gone)
        for damage in found:
            if health.found(tp, damage):
                log.warning("node %d: scrubbing partition %s found damage: %s", self.replicas.node_id,
                            replica.name, damage.describe())
            health.damaged(tp, damage)
        health.verified(tp)
        for damage in found:
            self.replicas.repairer.repair(replica, damage)

    def _throttle(self, nbytes: int) -> None:
        """Wait as long as walking `nbytes` more takes at `rate`; Stopped once stop() was called."""
        self.scrubbed_bytes += nbytes
        since, walked = self._window
        now = time.monotonic()
        if now - since > 1.0 and walked <= self.rate * (now - since):  # idle, or behind: no burst to catch up
            since, walked = now, 0
        walked += nbytes
        self._window = (since, walked)
        ahead = walked / self.rate - (now - since)
        if ahead > 0 and self._stopped.wait(ahead) or self._stopped.is_set():
            raise Stopped()
