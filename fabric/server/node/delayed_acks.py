"""acks=all writes waiting for their partition's high watermark (Kafka's delayed produce): one `DelayedAcks` per
partition replica, settled under the replica's lock wherever the high watermark moves, the leadership ends or the
ISR changes, so a waiting write holds no thread.

A write of offsets base..end-1 appended under leadership L with min.insync.replicas M is answered:
- base, once the high watermark covers end while L still holds;
- NotLeaderError, once L has ended (the rows may or may not be kept);
- NotEnoughReplicasAfterAppendError, once L's ISR is below M (the same);
- RequestTimedOutError, when its waiter gives up (`expire`).

A future is settled on the thread that changes the partition, with the replica's lock held: its callbacks must
never take that lock. They hand the answer to their event loop, or write it at once when they run on that loop's
thread (a follower's fetch, served there, moved the high watermark: loop_handoff.run_on).
"""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass, field

from fabric.common.errors import NotEnoughReplicasAfterAppendError, NotLeaderError, RequestTimedOutError
from fabric.server.node.leader import LeaderState


@dataclass
class DelayedAck:
    """One acks=all write of offsets base..end-1 under `leader`, waiting; `future` gets base or the error."""

    leader: LeaderState
    min_isr: int
    base: int
    end: int
    future: concurrent.futures.Future[int] = field(default_factory=concurrent.futures.Future)


class DelayedAcks:
    """The acks=all writes of partition `name` waiting for its high watermark, in the order they were appended
    (so they are answered in that order)."""

    def __init__(self, name: str, node_id: int) -> None:
        self.name, self.node_id = name, node_id
        self._waiting: list[DelayedAck] = []

    def add(self, leader: LeaderState, min_isr: int, base: int, end: int) -> DelayedAck:
        """A write to wait for (the replica's lock held); `settle` may answer it at once."""
        ack = DelayedAck(leader, min_isr, base, end)
        self._waiting.append(ack)
        return ack

    def settle(self, leader: LeaderState | None, hw: int) -> None:
        """Answer every waiting write the partition's state now decides (its lock held): `leader` is its
        leadership now (None: it leads no more), `hw` its high watermark."""
        if not self._waiting:
            return
        still = []
        for ack in self._waiting:
            if ack.leader is leader and hw >= ack.end:
                ack.future.set_result(ack.base)
            elif ack.leader is not leader:
                ack.future.set_exception(NotLeaderError(
                    f"node {self.node_id} stopped leading {self.name} before offsets {ack.base}..{ack.end - 1} were "
                    "replicated: they may or may not be kept; refresh the metadata and retry"))
            elif len(ack.leader.isr) < ack.min_isr:
                ack.future.set_exception(NotEnoughReplicasAfterAppendError(
                    f"{self.name}'s ISR {list(ack.leader.isr)} fell below min.insync.replicas {ack.min_isr} before "
                    f"offsets {ack.base}..{ack.end - 1} were replicated: they may or may not be kept; retry"))
            else:
                still.append(ack)
        self._waiting = still

    def expire(self, answer: concurrent.futures.Future[int], timeout_s: float) -> None:
        """Give up on the write whose future is `answer` after `timeout_s` (the replica's lock held):
        RequestTimedOutError, unless it was answered meanwhile."""
        ack = next((ack for ack in self._waiting if ack.future is answer), None)
        if ack is None:
            return
        self._waiting.remove(ack)
        ack.future.set_exception(RequestTimedOutError(
            f"offsets {ack.base}..{ack.end - 1} of {self.name} were not replicated to the ISR "
            f"{list(ack.leader.isr)} within {timeout_s:.1f} s: they may or may not be kept"))
