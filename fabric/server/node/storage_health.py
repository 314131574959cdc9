"""The health of a data node's replicas (Kafka's log-directory failure handling, per replica): which replicas the
node cannot serve now, reported to the controller with every heartbeat, which then treats them as it treats a dead
node's replicas for those partitions (coordinator/controller.py, ReplicasOffline).

States of a replica's health:
- HEALTHY -> OFFLINE(reason): a read or write of its storage failed (a full, read-only or failing disk, a
  permission refused, or its directory gone: `guard`). Its writes are refused at once with KafkaStorageError
  (retriable: the controller moves the leadership to an in-sync replica), its fetcher stops, its maintenance
  pauses, and only the first failure is logged, at WARNING: no traceback, no log per request.
- OFFLINE -> HEALTHY: `probe`, every PROBE_INTERVAL_S, writes PROBE_BYTES into the replica's directory (its
  storage works again: space freed, remounted read-write); logged at INFO. A replica whose directory disappeared
  while the node served it stays OFFLINE until the node restarts: its records are gone, and the restart starts
  it empty and copies it from its leader, as Kafka brings an offline log directory back with a restart.
Every change of the set of unhealthy replicas is told to `on_change` (the node heartbeats at once).
"""
from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from fabric.common.errors import KafkaStorageError, StorageError
from fabric.common.types import TopicPartition
from fabric.storage.errors import os_problem

log = logging.getLogger(__name__)
PROBE_INTERVAL_S = 1.0  # how often an offline replica's storage is tried again
PROBE_BYTES = 64 << 10  # what a probe writes (and fsyncs, then removes)
PROBE_FILE = ".storage-probe"
GONE = (errno.ENOENT, errno.ENOTDIR)


class Health(str, enum.Enum):
    HEALTHY = "Healthy"
    OFFLINE = "Offline"


@dataclass(frozen=True)
class Condition:
    """A replica's health, why, and whether a probe may bring it back (not when its directory is gone)."""

    health: Health
    reason: str = ""
    probe: bool = True


HEALTHY = Condition(Health.HEALTHY)


class StorageHealth:
    """The health of node `node_id`'s replicas; `directory(tp)` is where a replica's log lives. Thread-safe."""

    def __init__(self, node_id: int, directory: Callable[[TopicPartition], str]) -> None:
        self.node_id, self.directory = node_id, directory
        self.on_change: Callable[[TopicPartition, Condition], None] = lambda tp, condition: None
        self._conditions: dict[TopicPartition, Condition] = {}
        self._probed_at = 0.0
        self._lock = threading.Lock()

    def condition(self, tp: TopicPartition) -> Condition:
        return self._conditions.get(tp, HEALTHY)

    def offline(self, tp: TopicPartition) -> bool:
        return self.condition(tp).health is Health.OFFLINE

    def unhealthy(self) -> list[TopicPartition]:
        """The replicas the node cannot serve now, sorted: what its heartbeat reports."""
        with self._lock:
            return sorted(self._conditions)

    def _set(self, tp: TopicPartition, condition: Condition) -> None:
        """Record the replica's condition; log and tell on_change if its health changed."""
        with self._lock:
            old = self.condition(tp)
            if condition.health is old.health:
                return
            if condition.health is Health.HEALTHY:
                self._conditions.pop(tp, None)
            else:
                self._conditions[tp] = condition
        name = f"{tp[0]}-{tp[1]}"
        if condition.health is Health.OFFLINE:
            log.warning("node %d: replica %s is offline: %s; the controller moves its leadership and ISR membership "
                        "to other replicas%s", self.node_id, name, condition.reason,
                        "" if condition.probe else " (its directory is gone: restart the node to copy it again)")
        else:
            log.info("node %d: replica %s is %s again (%s)", self.node_id, name, condition.health.value.lower(),
                     old.reason)
        self.on_change(tp, condition)

    def forget(self, tp: TopicPartition) -> None:
        """The replica left the node (moved away, or its topic deleted)."""
        with self._lock:
            self._conditions.pop(tp, None)

    # -- storage failures ------------------------------------------------------------------------------------
    def failed(self, tp: TopicPartition, exc: BaseException, doing: str) -> KafkaStorageError | None:
        """If `exc` (raised while doing `doing` to replica `tp`) is a storage failure, mark the replica offline
        and return the error to raise in its place; else None. A FileNotFoundError counts only if the replica's
        directory is gone (else a segment was replaced under a reader: not a failure of the storage)."""
        directory = self.directory(tp)
        if isinstance(exc, OSError) and exc.errno in GONE:
            if os.path.isdir(directory):
                return None
            reason, probe = f"its directory {directory} is gone", False
        elif isinstance(exc, OSError) and os_problem(exc) is not None:
            reason, probe = f"{os_problem(exc)} ({exc.filename or directory})", True
        elif isinstance(exc, StorageError):
            reason, probe = str(exc), True
        else:
            return None
        self._set(tp, Condition(Health.OFFLINE, reason, probe))
        return self.error(tp, doing)

    def error(self, tp: TopicPartition, doing: str) -> KafkaStorageError:
        """The error a request for an offline replica gets: it names the node, the partition and why."""
        return KafkaStorageError(f"node {self.node_id} cannot {doing}: its replica of {tp[0]}-{tp[1]} is offline "
                                 f"({self.condition(tp).reason}); the controller moves the leadership to an in-sync "
                                 "replica: refresh the metadata and retry")

    @contextlib.contextmanager
    def guard(self, tp: TopicPartition, doing: str) -> Iterator[None]:
        """Run an operation on replica `tp`'s storage: a storage failure marks it offline and is raised as
        KafkaStorageError (see `failed`); other errors pass through unchanged."""
        try:
            yield
        except (OSError, StorageError) as exc:
            error = self.failed(tp, exc, doing)
            if error is None:
                raise
            raise error from exc

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
            due = [tp for tp, c in self._conditions.items() if c.health is Health.OFFLINE and c.probe]
        for tp in due:
            try:
                _write_probe(self.directory(tp))
            except OSError as exc:
                log.debug("node %d: replica %s-%d's storage still fails (%s)", self.node_id, *tp, exc)
                continue
            self._set(tp, HEALTHY)


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
