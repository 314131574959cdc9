"""Data-node liveness as the active controller sees it: a heartbeat lease per registered node (KRaft's broker
heartbeats), kept in memory on the monotonic clock; registrations (and their node epochs) are what the stores
persist.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.common.errors import StaleNodeEpochError

log = logging.getLogger(__name__)
DEFAULT_SESSION_TIMEOUT_MS = 9000  # node.session.timeout.ms, as Kafka's broker.session.timeout.ms
DEFAULT_HEARTBEAT_INTERVAL_MS = 2000  # node.heartbeat.interval.ms, as Kafka's broker.heartbeat.interval.ms


def check_interval_ms(session_timeout_ms: int) -> int:
    """How often the controller expires leases: a quarter of the session, from 50 ms to 1 s. A gap of more than
    half a session between two lease calls is therefore a pause of the controller, never its cadence."""
    return max(50, min(session_timeout_ms // 4, 1000))


@dataclass(frozen=True)
class _Lease:
    node_epoch: int
    expires_ms: int


class NodeLeases:
    """A lease per node, renewed by each heartbeat and lapsing `session_timeout_ms` after the last one.

    Invariants: a node is alive exactly while it holds a lease that has not lapsed; a lease belongs to one node
    epoch, so a heartbeat quoting another (a zombie of an older registration, or a node already declared dead)
    is refused with StaleNodeEpochError and the node must register again. A node is never blamed for time the
    controller could not hear it: a newly elected controller (`grant_all`), and a controller that resumes after
    a pause (more than half a session between two lease calls, which its lease-checking tick makes every
    `check_interval_ms`: SIGSTOP, a stalled machine, a lock held too long), gives every node whose lease had not
    lapsed one full session from now to heartbeat before it can be declared dead."""

    def __init__(self, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS, clock: Clock = SYSTEM_CLOCK) -> None:
        if session_timeout_ms < 1:
            raise ValueError(f"node.session.timeout.ms must be at least 1, got {session_timeout_ms}")
        self.session_timeout_ms, self.clock = session_timeout_ms, clock
        self._leases: dict[int, _Lease] = {}
        self._last_call_ms = clock.monotonic_ms()

    def _now(self) -> int:
        """The monotonic time of this call, after renewing every live lease if the controller was paused."""
        now = self.clock.monotonic_ms()
        gap, last = now - self._last_call_ms, self._last_call_ms
        self._last_call_ms = now
        if gap > self.session_timeout_ms // 2:
            held = {node_id: lease for node_id, lease in self._leases.items() if lease.expires_ms >= last}
            if held:
                log.warning("the controller made no progress for %d ms (paused or stalled): nodes %s get a full "
                            "session (%d ms) to heartbeat before any is declared dead", gap, sorted(held),
                            self.session_timeout_ms)
                self._leases.update({node_id: replace(lease, expires_ms=now + self.session_timeout_ms)
                                     for node_id, lease in held.items()})
        return now

    def grant_all(self, registered: Iterable[tuple[int, int]]) -> None:
        """A new controller's start: a fresh lease for each (node id, node epoch) registered."""
        expires = self._now() + self.session_timeout_ms
        self._leases = {node_id: _Lease(epoch, expires) for node_id, epoch in registered}

    def register(self, node_id: int, node_epoch: int) -> None:
        """A node registered with a new epoch: its lease starts now and fences every older epoch."""
        now = self._now()
        old = self._leases.get(node_id)
        if old is not None and node_epoch <= old.node_epoch:
            raise StaleNodeEpochError(f"node {node_id} registered with epoch {node_epoch}, not newer than its "
                                      f"current epoch {old.node_epoch}")
        self._leases[node_id] = _Lease(node_epoch, now + self.session_timeout_ms)

    def heartbeat(self, node_id: int, node_epoch: int) -> None:
        """Renew the node's lease; StaleNodeEpochError unless it holds one for exactly this epoch."""
        now = self._now()
        lease = self._leases.get(node_id)
        if lease is None or lease.node_epoch != node_epoch or now > lease.expires_ms:
            raise StaleNodeEpochError(
                f"node {node_id} with node epoch {node_epoch} is not registered with this controller (a newer "
                "registration fenced it, or its session timed out); register the node again")
        self._leases[node_id] = replace(lease, expires_ms=now + self.session_timeout_ms)

    def release(self, node_id: int, node_epoch: int) -> None:
        """End the node's lease now (its controlled shutdown); StaleNodeEpochError unless it holds one for exactly
        this epoch."""
        self.heartbeat(node_id, node_epoch)
        del self._leases[node_id]

    def expire(self) -> list[int]:
        """The nodes whose lease lapsed, sorted; each is reported once and is dead until it registers again."""
        now = self._now()
        dead = sorted(node_id for node_id, lease in self._leases.items() if now > lease.expires_ms)
        for node_id in dead:
            log.warning("node %d: no heartbeat for %d ms; declared dead", node_id, self.session_timeout_ms)
            del self._leases[node_id]
        return dead

    def next_lapse_ms(self) -> int | None:
        """The monotonic time (ms) after which the first lease lapses if not renewed (None: no lease), for a
        timer that expires leases then rather than up to a check interval later."""
        return min((lease.expires_ms for lease in self._leases.values()), default=None)

    def is_alive(self, node_id: int) -> bool:
        now = self._now()
        lease = self._leases.get(node_id)
        return lease is not None and now <= lease.expires_ms

    def alive(self) -> set[int]:
        now = self._now()
        return {node_id for node_id, lease in self._leases.items() if now <= lease.expires_ms}
