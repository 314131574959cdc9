"""Delayed acks (Kafka's delayed produce) of one partition: each acks=all write is answered by the state that
decides it, in append order, and only once."""
from __future__ import annotations

import pytest

from fabric.common.errors import NotEnoughReplicasAfterAppendError, NotLeaderError, RequestTimedOutError
from fabric.server.node.delayed_acks import DelayedAcks
from fabric.server.node.leader import LeaderState


def leadership(epoch: int = 1, isr: tuple[int, ...] = (1, 2, 3)) -> LeaderState:
    return LeaderState("t-0", 1, epoch, (1, 2, 3), isr, 1, 0, 0, 0.0)


def test_writes_are_answered_in_order_as_the_high_watermark_passes_each() -> None:
    acks, leader = DelayedAcks("t-0", 1), leadership()
    first, second = acks.add(leader, 2, 0, 2), acks.add(leader, 2, 2, 5)
    acks.settle(leader, 1)
    assert not first.future.done() and not second.future.done()
    acks.settle(leader, 2)
    assert first.future.result(0) == 0 and not second.future.done()
    acks.settle(leader, 5)
    assert second.future.result(0) == 2
    acks.settle(None, 5)  # answered once: a later change touches nothing
    assert second.future.result(0) == 2


def test_a_lost_leadership_or_a_short_isr_fails_the_waiting_writes() -> None:
    acks, leader = DelayedAcks("t-0", 1), leadership()
    moved = acks.add(leader, 2, 0, 1)
    acks.settle(leadership(epoch=2), 0)
    with pytest.raises(NotLeaderError, match="stopped leading t-0 before offsets 0..0 were replicated"):
        moved.future.result(0)
    shrunk = leadership(isr=(1,))
    short = acks.add(shrunk, 2, 1, 3)
    acks.settle(shrunk, 1)
    with pytest.raises(NotEnoughReplicasAfterAppendError, match=r"ISR \[1\] fell below min.insync.replicas 2"):
        short.future.result(0)


def test_an_expired_write_times_out_unless_it_was_answered() -> None:
    acks, leader = DelayedAcks("t-0", 1), leadership()
    slow, answered = acks.add(leader, 2, 0, 1), acks.add(leader, 2, 1, 2)
    acks.expire(slow.future, 2.0)
    with pytest.raises(RequestTimedOutError, match=r"offsets 0..0 of t-0 were not replicated .* within 2.0 s"):
        slow.future.result(0)
    acks.settle(leader, 2)
    acks.expire(answered.future, 2.0)
    assert answered.future.result(0) == 1
