"""A data node's scrubber: a thread that walks the log of every replica the node hosts below its high watermark,
checking every frame's CRC (fabric/storage/scrub.py), reading at most log.scrubber.io.max.bytes.per.second, and
starts again log.scrubber.backoff.ms after each pass (at once when a replica is unverified).

- Replicas UNVERIFIED (their logs were on disk when the node started; storage_health) go first: a pass over one
  makes it verified once it reached what was on disk, so a replica damaged while its node was down cannot rejoin
  an ISR before the damage is found. Then the others, in partition order. A restarted replica's high watermark is
  the last one checkpointed, often below frames that were on disk all along; they are not walked before the high
  watermark passes them (a follower's frames above it may be truncated while they are walked, and a map read past
  a file's end kills the process), so the replica stays unverified, and is walked again (alone) whenever its high
  watermark moved, until it passed the log end first seen.
- Each finding is logged at WARNING (the partition, the offsets, the segment and the byte), counted
  (fabric_log_damaged_ranges_total), and repaired from another replica's copy at once (repair.py); a range that
  cannot be repaired yet leaves the replica DAMAGED (reported to the controller) and is tried again between passes,
  as often as the repairer allows (every repair.REPAIR_BACKOFF_S: no reader meets a follower's damage). A damage
  known from an earlier pass and no longer found (repaired by a read, or deleted by retention) is forgotten.
- An offline replica is skipped; a storage failure while scrubbing takes the replica offline as any other does.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from fabric.common.errors import StorageError
from fabric.common.types import TopicPartition
from fabric.server.background import BackgroundWorker
from fabric.server.node.partition import PartitionReplica
from fabric.server.node.replica_manager import ReplicaManager
from fabric.server.node.storage_health import Health
from fabric.storage import scrub
from fabric.storage.cut_barrier import CutPending
from fabric.storage.scan import Damage

log = logging.getLogger(__name__)
SCRUB_RATE_KEY = "log.scrubber.io.max.bytes.per.second"
DEFAULT_SCRUB_RATE = 16 << 20  # bytes per second (0 turns scrubbing off)
BACKOFF_KEY = "log.scrubber.backoff.ms"
DEFAULT_BACKOFF_MS = 15_000  # as Kafka's log.cleaner.backoff.ms
POLL_S = 1.0  # how often a scrubber between passes looks for unverified replicas
CUT_WALKS = 3  # walks of a replica a pass tries while truncations stop them
# the share of a pass's time its thread may spend on the CPU: after each replica it sleeps for the rest, so that the
# node's event loop, wanting the interpreter lock, finds it free (the walk of a small replica is Python throughout,
# and a thread that holds the lock keeps it for up to sys.getswitchinterval(), 5 ms, at each request's turn)
BUSY_SHARE = 0.2
# the CPU a walk spends before it sleeps for its share, within a replica too: a replica of many small frames costs
# more CPU per byte than the I/O limit bounds, and would otherwise hold the lock for its whole walk
SLICE_S = 0.0005


class Stopped(Exception):
    """The scrubber was stopped in the middle of a walk."""


class Scrubber(BackgroundWorker):
    """Scrubs the replicas of `replicas` at `rate` bytes per second at most, a pass every `backoff_ms` (and at once
    for an unverified replica), on a thread (`start`, `stop`)."""

    def __init__(self, replicas: ReplicaManager, rate: int, backoff_ms: int = DEFAULT_BACKOFF_MS) -> None:
        super().__init__("node-scrubber")
        self.replicas, self.rate, self.backoff_s = replicas, rate, backoff_ms / 1000
        self.scrubbed_bytes = 0
        self._window = (time.monotonic(), 0)  # (since, bytes walked since): the rate limit's reference
        self._slice_began = time.thread_time()  # this thread's CPU time when it last slept for its share
        self._on_disk: dict[TopicPartition, int] = {}  # an unverified replica's log end when first walked
        self._walked: dict[TopicPartition, int] = {}  # and the high watermark it was last walked below

    def start(self) -> Scrubber:
        log.info("scrubbing every replica's log at most %d bytes/s (%s), a pass every %.0f s (%s)", self.rate,
                 SCRUB_RATE_KEY, self.backoff_s, BACKOFF_KEY)
        return super().start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            if not self._guarded(self.run_once):
                return
            due = time.monotonic() + self.backoff_s
            while not self._stopped.wait(min(POLL_S, max(due - time.monotonic(), 0))):
                if time.monotonic() >= due:
                    break
                if not self._guarded(self._walk_due_unverified):
                    return
                self._repair_known()

    def _guarded(self, walk: Callable[[], object]) -> bool:
        """Run `walk`; False once stop() was called during it (a failure is logged: scrubbing goes on)."""
        try:
            walk()
        except Stopped:
            return False
        except Exception:  # noqa: BLE001 (a bug must not stop scrubbing for good)
            log.exception("a scrubber walk failed; scrubbing goes on, the next pass in at most %.0f s", self.backoff_s)
        return True

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

    def _walk_due_unverified(self) -> None:
        for replica in self._due_unverified():
            self._scrub_paced(replica)

    def _due_unverified(self) -> list[PartitionReplica]:
        """The unverified replicas not walked yet, or whose high watermark moved since they were last walked."""
        health = self.replicas.health
        return [r for r in self.replicas.hosted() if health.condition(r.tp).health is Health.UNVERIFIED
                and r.hw != self._walked.get(r.tp)]

    def run_once(self) -> int:
        """One pass over every hosted replica, unverified ones first; the bytes walked."""
        before = self.scrubbed_bytes
        health = self.replicas.health
        replicas = self.replicas.hosted()
        for replica in sorted(replicas, key=lambda r: (health.condition(r.tp).health is not Health.UNVERIFIED,
                                                       r.tp)):
            self._scrub_paced(replica)
        return self.scrubbed_bytes - before

    def _scrub_paced(self, replica: PartitionReplica) -> None:
        """`scrub`, with sleeps that keep this thread's CPU time to BUSY_SHARE of the walk's (every SLICE_S of
        CPU within the replica's walk, and for what is left after it); Stopped once stop() was called."""
        self.scrub(replica)
        self._pace(0.0)

    def _pace(self, slice_s: float) -> None:
        """Once this thread spent `slice_s` of CPU since it last slept, sleep (1 - BUSY_SHARE) / BUSY_SHARE times
        that; Stopped once stop() was called."""
        used = time.thread_time() - self._slice_began
        if used < slice_s:
            return
        if self._stopped.wait(used * (1 - BUSY_SHARE) / BUSY_SHARE):
            raise Stopped()
        self._slice_began = time.thread_time()

    def scrub(self, replica: PartitionReplica) -> None:
        """Scrub one replica below its high watermark, repair what it finds, and record the outcome (an unverified
        one is verified once the walk reached the log end it had when first walked, or its log end now if lower)."""
        health, tp = self.replicas.health, replica.tp
        self._slice_began = time.thread_time()  # (the pacing counts this walk's CPU from here)
        end = replica.hw
        if health.offline(tp) or end < 0:
            return
        unverified = health.condition(tp).health is Health.UNVERIFIED
        log_end = end  # (read only for an unverified replica: a verified one needs no watermark read per pass)
        try:
            if unverified:
                log_end = replica.log.end_offset
                self._on_disk.setdefault(tp, log_end)
                self._walked[tp] = end
            found = self._walk(replica, end)
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
        if not unverified or end >= min(self._on_disk[tp], log_end):
            health.verified(tp)
            self._on_disk.pop(tp, None)
            self._walked.pop(tp, None)
        for damage in found:
            self.replicas.repairer.repair(replica, damage)

    def _walk(self, replica: PartitionReplica, end: int) -> list[Damage]:
        """scrub.scrub of the replica below `end`, as a lock-free walk of its log (cut_barrier): a truncation of
        the log stops it, and it walks again below the high watermark then, up to CUT_WALKS times (then none is
        reported: the next pass walks it)."""
        for _ in range(CUT_WALKS):
            try:
                with replica.log.cut_barrier.reading() as barrier:
                    def throttle(nbytes: int) -> None:
                        barrier.check()
                        self._throttle(nbytes)
                    return scrub.scrub(replica.log, end, throttle)
            except CutPending:
                end = min(end, replica.hw)
        log.info("node %d: partition %s was truncated %d times while it was scrubbed; it is scrubbed next pass",
                 self.replicas.node_id, replica.name, CUT_WALKS)
        return []

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
        self._pace(SLICE_S)
