"""What a partition leader knows of its followers (Kafka's Partition on the leader): each follower's log end
offset and when it was last caught up, the in-sync replicas, and the high watermark they give.

Rules (docs/replication.md, "Replication on the nodes"):
- A follower's log end offset (LEO) is the offset it fetches from in the current leader epoch; unknown (-1)
  until its first such fetch, so a new leader counts no follower's old progress.
- A follower that leaves the ISR starts over: its LEO is unknown again until it fetches (a node restarted with
  an empty disk must never rejoin on the progress of its earlier incarnation, KIP-903).
- A follower is caught up when it fetches from the leader's LEO, or from at least the LEO the leader had at the
  follower's previous fetch (Kafka's lastCaughtUpTime: under steady writes a follower is never exactly at the
  end). One not caught up for replica.lag.time.max.ms leaves the ISR; one at the high watermark and at the
  start of the current leader epoch joins it again.
- The high watermark is the minimum LEO over the ISR, counting members the leader asked to add before the
  controller confirmed (Kafka's maximal ISR: the watermark never relies on a shrink not yet committed). It only
  advances while the confirmed ISR holds min.insync.replicas members (KIP-966), and it never moves back.

Invariant: hw <= the leader's LEO, and hw never decreases under one LeaderState.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)
UNKNOWN = -1


@dataclass
class FollowerProgress:
    """One follower as its fetches show it (times in ms of the leader's monotonic clock)."""

    leo: int = UNKNOWN
    caught_up_ms: float = 0.0  # when it was last caught up (the leadership's start, before any fetch)
    fetch_ms: float = 0.0  # its previous fetch
    leader_leo_at_fetch: int = UNKNOWN  # the leader's LEO at its previous fetch
    # the follower's last answer read from the log (PartitionReplica.serve_follower): the partition's change count
    # then, when, and the log start it gave
    answered_changes: int = UNKNOWN
    answered_ms: float = 0.0
    answered_start: int = UNKNOWN
    answered_hw: int = UNKNOWN  # the high watermark its last answer (from the log or from memory) gave


class LeaderState:
    """The replication state of partition `name` led by `leader_id` under `leader_epoch`; not thread-safe (its
    PartitionReplica holds its lock around every call)."""

    def __init__(self, name: str, leader_id: int, leader_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...],
                 partition_epoch: int, hw: int, epoch_start: int, now_ms: float) -> None:
        self.name, self.leader_id, self.leader_epoch = name, leader_id, leader_epoch
        self.replicas, self.isr, self.partition_epoch = replicas, isr, partition_epoch
        self.hw = hw
        self.epoch_start = epoch_start  # the offset this leader epoch's records start at
        self.pending: tuple[int, ...] | None = None  # an ISR asked for and not yet confirmed
        self.followers = {r: FollowerProgress(caught_up_ms=now_ms) for r in replicas if r != leader_id}

    def isr_confirmed(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The controller's ISR (after an AlterPartition, or a dead node removed); older states are ignored."""
        if partition_epoch < self.partition_epoch:
            return
        if isr != self.isr:
            log.info("partition %s: ISR %s -> %s (partition epoch %d)", self.name, list(self.isr), list(isr),
                     partition_epoch)
        for r in set(self.isr) - set(isr) - {self.leader_id}:
            # out of the ISR (lagging, or dead and perhaps back with an empty disk): only its next fetches count
            # towards rejoining, never the progress of its earlier incarnation (KIP-903)
            self.followers[r] = FollowerProgress()
        self.isr, self.partition_epoch, self.pending = isr, partition_epoch, None

    def replicas_changed(self, replicas: tuple[int, ...], now_ms: float) -> None:
        """The partition's replicas changed under this leadership (a reassignment): track the new followers from
        now, forget the ones that left."""
        if replicas == self.replicas:
            return
        self.followers = {r: self.followers.get(r) or FollowerProgress(caught_up_ms=now_ms) for r in replicas
                          if r != self.leader_id}
        self.replicas = replicas

    def follower_fetched(self, follower: int, offset: int, leader_leo: int, now_ms: float) -> None:
        """A follower fetches from `offset`: it holds every record below it."""
        progress = self.followers[follower]
        if offset >= leader_leo:
            progress.caught_up_ms = now_ms
        elif offset >= progress.leader_leo_at_fetch >= 0:
            progress.caught_up_ms = max(progress.caught_up_ms, progress.fetch_ms)
        progress.leo, progress.fetch_ms, progress.leader_leo_at_fetch = offset, now_ms, leader_leo

    def _maximal_isr(self) -> set[int]:
        return set(self.isr) | set(self.pending or ())

    def advance_hw(self, leader_leo: int, min_isr: int) -> bool:
        """Move the high watermark to the minimum LEO over the ISR if that is higher; True if it moved."""
        if len(self.isr) < min_isr:
            return False
        leos = [leader_leo if r == self.leader_id else self.followers[r].leo for r in self._maximal_isr()]
        if UNKNOWN in leos:
            return False
        candidate = min(leos)
        if candidate <= self.hw:
            return False
        self.hw = candidate
        return True

    def isr_settled(self, lag_ms: float, now_ms: float) -> bool:
        """Whether wanted_isr would ask for nothing, in a test cheap enough to run on every led partition each
        round: no change pending, every replica in the ISR (in the replicas' order, as wanted_isr builds it) and
        every follower caught up within `lag_ms`."""
        if self.pending is not None or self.isr != self.replicas:
            return False
        since = now_ms - lag_ms
        for progress in self.followers.values():  # (a loop, not all() over a generator: a third of the cost)
            if progress.caught_up_ms < since:
                return False
        return True

    def wanted_isr(self, lag_ms: float, now_ms: float, offline: tuple[int, ...] = ()
                   ) -> tuple[int, ...] | None:
        """The ISR the leader should ask the controller for (laggards out, caught-up followers in, unless their
        nodes report them `offline`), or None when the current one is right or a change is already pending."""
        if self.pending is not None:
            return None
        keep = {r for r in self.isr if r == self.leader_id or now_ms - self.followers[r].caught_up_ms <= lag_ms}
        join = {r for r, p in self.followers.items()
                if r not in self.isr and r not in offline and p.leo >= max(self.hw, self.epoch_start) and p.leo >= 0
                and now_ms - p.caught_up_ms <= lag_ms}
        wanted = tuple(r for r in self.replicas if r in keep | join)
        return None if wanted == self.isr else wanted
