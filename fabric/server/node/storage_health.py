"""The health of a data node's replicas (Kafka's log-directory failure handling, per replica): which replicas the
node cannot serve now, reported to the controller with every heartbeat, which then treats them as it treats a dead
node's replicas for those partitions (coordinator/controller.py, ReplicasOffline).

A replica's health, the worst that holds of it:
- OFFLINE(reason): a read or write of its storage failed (a full, read-only or failing disk, a permission
  refused, or its directory gone: `guard`). Its writes are refused at once with KafkaStorageError (retriable:
  the controller moves the leadership to an in-sync replica), its fetcher stops, its maintenance pauses, and only
  the first failure is logged, at WARNING: no traceback, no log per request. `probe`, every PROBE_INTERVAL_S,
  writes PROBE_BYTES into its directory, and once that works (space freed, remounted read-write) the replica is
  back. A replica whose directory disappeared while the node served it stays OFFLINE until the node restarts:
  its records are gone, and the restart starts it empty and copies it from its leader, as Kafka brings an
  offline log directory back with a restart. A replica that could not take its role from the controller's view
  for a reason other than its storage (a file where its directory goes: `refused`) is OFFLINE too, and is back
  once a later view's role is taken (`took_role`): waiting on it would stall its partition's acks=all writes.
- DAMAGED(ranges): the scrubber or a read found frames below its high watermark that fail their checks, not yet
  repaired (`damaged` .. `repaired`; scrubber.py, repair.py). It serves and copies everything else.
- UNVERIFIED: its log was on disk when the node started and has not been scrubbed since (`unverified` ..
  `verified`). The scrubber walks it first, so a flipped bit while the node was down is found soon, and then it is
  DAMAGED. It is not reported meanwhile: it serves, and rejoins its ISR as soon as it has caught up (a rolling
  restart must not wait for whole logs to be read before the next node may stop), while a read that meets damage
  is repaired before it is answered (repair.py) whatever the replica's health.
- HEALTHY.
OFFLINE and DAMAGED replicas are reported to the controller; every change of a replica's health is logged once
and told to `on_change` (the node heartbeats at once).
"""
from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Callable, Iterator, Literal

from fabric.common.errors import FabricError, KafkaStorageError, StorageError, UnknownTopicOrPartitionError
from fabric.common.types import TopicPartition
from fabric.storage.errors import os_problem
from fabric.storage.scan import Damage

log = logging.getLogger(__name__)
PROBE_INTERVAL_S = 1.0  # how often an offline replica's storage is tried again
PROBE_BYTES = 64 << 10  # what a probe writes (and fsyncs, then removes)
PROBE_FILE = ".storage-probe"
GONE = (errno.ENOENT, errno.ENOTDIR)


class Health(str, enum.Enum):
    HEALTHY = "Healthy"
    UNVERIFIED = "Unverified"
    DAMAGED = "Damaged"
    OFFLINE = "Offline"


@dataclass(frozen=True)
class Condition:
    """A replica's health and why."""

    health: Health
    reason: str = ""


HEALTHY = Condition(Health.HEALTHY)
UNVERIFIED = Condition(Health.UNVERIFIED, "its log was on disk when the node started and is not scrubbed yet")


@dataclass
class _Replica:
    """What is known to be wrong with one replica."""

    failure: str = ""  # why its storage failed (OFFLINE)
    probe: bool = True  # whether a probe may bring it back
    refused: str = ""  # why it could not take its role, its storage working (OFFLINE until it takes it)
    damage: dict[int, Damage] = field(default_factory=dict)  # by first offset
    unverified: bool = False

    def condition(self) -> Condition:
        if self.failure or self.refused:
            return Condition(Health.OFFLINE, self.failure or self.refused)
        if self.damage:
            return Condition(Health.DAMAGED, "; ".join(d.describe() for _, d in sorted(self.damage.items())))
        return UNVERIFIED if self.unverified else HEALTHY

    def comes_back(self) -> str:
        """How an offline replica comes back, for its log line ("" where a probe brings it back)."""
        if not self.failure:
            return " (it tries again with each heartbeat)"
        return "" if self.probe else " (its directory is gone: restart the node to copy it again)"


class StorageHealth:
    """The health of node `node_id`'s replicas; `directory(tp)` is where a replica's log lives, `hosted(tp)` whether
    the node holds that replica now. Thread-safe."""

    def __init__(self, node_id: int, directory: Callable[[TopicPartition], str],
                 hosted: Callable[[TopicPartition], bool] = lambda tp: True) -> None:
        self.node_id, self.directory, self.hosted = node_id, directory, hosted
        self.on_change: Callable[[TopicPartition, Condition], None] = lambda tp, condition: None
        self._replicas: dict[TopicPartition, _Replica] = {}
        self.damage_found = 0  # damaged ranges found so far (fabric_log_damaged_ranges_total)
        self._found: set[tuple[TopicPartition, int]] = set()  # (replica, first offset) found and not repaired
        self._probed_at = 0.0
        self._lock = threading.Lock()

    def condition(self, tp: TopicPartition) -> Condition:
        with self._lock:
            known = self._replicas.get(tp)
            return known.condition() if known is not None else HEALTHY

    def offline(self, tp: TopicPartition) -> bool:
        return self.condition(tp).health is Health.OFFLINE

    def unhealthy(self) -> list[TopicPartition]:
        """The replicas the node cannot serve now (OFFLINE or DAMAGED), sorted: what its heartbeat reports."""
        with self._lock:
            return sorted(tp for tp, known in self._replicas.items()
                          if known.condition().health in (Health.OFFLINE, Health.DAMAGED))

    def damage(self, tp: TopicPartition) -> list[Damage]:
        """The damaged ranges of the replica not yet repaired, in offset order."""
        with self._lock:
            known = self._replicas.get(tp)
            return [d for _, d in sorted(known.damage.items())] if known is not None else []

    def _change(self, tp: TopicPartition, change: Callable[[_Replica], object]) -> None:
        """Apply `change` to what is known of the replica; log and tell on_change if its health changed."""
        with self._lock:
            known = self._replicas.setdefault(tp, _Replica())
            old = known.condition()
            change(known)
            new = known.condition()
            if new is HEALTHY:
                del self._replicas[tp]
        if new.health is old.health:
            return
        name = f"{tp[0]}-{tp[1]}"
        if new.health is Health.OFFLINE:
            log.warning("node %d: replica %s is offline: %s; the controller moves its leadership and ISR membership "
                        "to other replicas%s", self.node_id, name, new.reason, known.comes_back())
        elif new.health is Health.DAMAGED:  # (each finding is logged at WARNING where it is found)
            log.info("node %d: replica %s is damaged: %s; it is not eligible as leader while a healthy in-sync "
                     "replica is alive, until repaired", self.node_id, name, new.reason)
        else:
            log.info("node %d: replica %s is %s (%s)", self.node_id, name, new.health.value.lower(),
                     new.reason or f"was {old.health.value.lower()}: {old.reason}")
        self.on_change(tp, new)

    def forget(self, tp: TopicPartition) -> None:
        """The replica left the node (moved away, or its topic deleted)."""
        with self._lock:
            self._replicas.pop(tp, None)
            self._found = {found for found in self._found if found[0] != tp}

    def refused(self, tp: TopicPartition, why: str) -> None:
        """The replica could not take its role from the controller's view for a reason other than its storage (a
        file where its directory goes, too many open files): OFFLINE, so the controller moves its leadership and
        ISR membership on instead of waiting on it, until `took_role`."""
        self._change(tp, lambda known: setattr(known, "refused", why))

    def took_role(self, tp: TopicPartition) -> None:
        """The replica took its role from the controller's view (what `refused` said no longer holds)."""
        with self._lock:
            known = self._replicas.get(tp)
            if known is None or not known.refused:
                return
        self._change(tp, lambda known: setattr(known, "refused", ""))

    # -- scrubbing -------------------------------------------------------------------------------------------
    def unverified(self, tp: TopicPartition) -> None:
        """The replica's log was on disk when the node started: the scrubber walks it first."""
        self._change(tp, lambda known: setattr(known, "unverified", True))

    def verified(self, tp: TopicPartition) -> None:
        """A scrub of the replica found nothing it has not repaired."""
        self._change(tp, lambda known: setattr(known, "unverified", False))

    def found(self, tp: TopicPartition, damage: Damage) -> bool:
        """A damaged range of the replica met (by the scrubber or a read); True, and counted, the first time."""
        with self._lock:
            new = (tp, damage.first_offset) not in self._found
            self._found.add((tp, damage.first_offset))
            self.damage_found += new
        return new

    def damaged(self, tp: TopicPartition, damage: Damage) -> None:
        """Damage below the replica's high watermark not repaired yet: the replica is DAMAGED until it is."""
        self.found(tp, damage)
        self._change(tp, lambda known: known.damage.__setitem__(damage.first_offset, damage))

    def repaired(self, tp: TopicPartition, damage: Damage) -> None:
        with self._lock:
            self._found.discard((tp, damage.first_offset))
        self._change(tp, lambda known: known.damage.pop(damage.first_offset, None))

    # -- storage failures ------------------------------------------------------------------------------------
    def failed(self, tp: TopicPartition, exc: BaseException, doing: str) -> FabricError | None:
        """If `exc` (raised while doing `doing` to replica `tp`) is a storage failure, mark the replica offline
        and return the error to raise in its place; else None. A FileNotFoundError counts only if the replica's
        directory is gone (else a segment was replaced under a reader: not a failure of the storage) while the
        node still hosts it: one the node dropped meanwhile (its topic deleted, or moved away) is the
        UnknownTopicOrPartitionError a request after the drop gets, and marks nothing (the mark would outlive
        the replica, and keep one made again under its name offline)."""
        directory = self.directory(tp)
        if isinstance(exc, OSError) and exc.errno in GONE:
            if os.path.isdir(directory):
                return None
            if not self.hosted(tp):
                return UnknownTopicOrPartitionError(f"node {self.node_id} cannot {doing}: it no longer hosts "
                                                    f"{tp[0]}-{tp[1]}, deleted or moved away from it meanwhile")
            reason, probe = f"its directory {directory} is gone", False
        elif isinstance(exc, OSError) and os_problem(exc) is not None:
            reason, probe = f"{os_problem(exc)} ({exc.filename or directory})", True
        elif isinstance(exc, StorageError):
            reason, probe = str(exc), True
        else:
            return None

        def fail(known: _Replica) -> None:
            if not known.failure:
                known.failure, known.probe = reason, probe
        self._change(tp, fail)
        return self.error(tp, doing)

    def error(self, tp: TopicPartition, doing: str) -> KafkaStorageError:
        """The error a request for an offline replica gets: it names the node, the partition and why."""
        return KafkaStorageError(f"node {self.node_id} cannot {doing}: its replica of {tp[0]}-{tp[1]} is offline "
                                 f"({self.condition(tp).reason}); the controller moves the leadership to an in-sync "
                                 "replica: refresh the metadata and retry")

    def guard(self, tp: TopicPartition, doing: str) -> Guard:
        """Run an operation on replica `tp`'s storage: a storage failure marks it offline and is raised as
        KafkaStorageError (see `failed`); other errors pass through unchanged."""
        return Guard(self, tp, doing)

    @contextlib.contextmanager
    def writing(self, tp: TopicPartition, doing: str) -> Iterator[None]:
        """A write to replica `tp`'s storage: refused at once with KafkaStorageError, without touching the disk,
        while the replica is offline (so a full disk is not written again and again), else guarded."""
        if self.offline(tp):
            raise self.error(tp, doing)
        with self.guard(tp, doing):
            yield

    # -- probing ---------------------------------------------------------------------------------------------
    def probe(self) -> None:
        """Try the storage of every offline replica that may come back (at most every PROBE_INTERVAL_S): one
        whose directory takes a write of PROBE_BYTES, fsynced, is healthy again."""
        now = time.monotonic()
        if now - self._probed_at < PROBE_INTERVAL_S:
            return
        self._probed_at = now
        with self._lock:
            due = [tp for tp, known in self._replicas.items() if known.failure and known.probe]
        for tp in due:
            try:
                _write_probe(self.directory(tp))
            except OSError as exc:
                log.debug("node %d: replica %s-%d's storage still fails (%s)", self.node_id, *tp, exc)
                continue
            self._change(tp, lambda known: setattr(known, "failure", ""))


def _write_probe(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, PROBE_FILE)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if os.write(fd, bytes(PROBE_BYTES)) < PROBE_BYTES:
            raise OSError(errno.ENOSPC, "a short write", path)
        os.fsync(fd)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)


class Guard:
    """StorageHealth.guard's context: a class, not a generator, as a follower's fetch enters one per partition it
    names."""

    __slots__ = ("health", "tp", "doing")

    def __init__(self, health: StorageHealth, tp: TopicPartition, doing: str) -> None:
        self.health, self.tp, self.doing = health, tp, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> Literal[False]:
        if exc is None or isinstance(exc, KafkaStorageError) or not isinstance(exc, (OSError, StorageError)):
            return False  # none, decided already (this replica's damage, or another guard's), or not the storage's
        error = self.health.failed(self.tp, exc, self.doing)
        if error is None:
            return False
        raise error from exc
