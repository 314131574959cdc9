"""Partition assignors (Kafka's range, roundrobin and cooperative-sticky), computed by the coordinator.

An assignor maps {member_id: Subscription} and {topic: partition count} to {member_id: [(topic, p)]}.
Cooperative assignors are sticky: `withhold_moving` then keeps a partition that changes owner out of the
assignment for one generation, so no partition is ever owned by two members at once (KIP-429).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from fabric.common.errors import InconsistentGroupProtocolError
from fabric.common.types import TopicPartition

Assignment = dict[str, list[TopicPartition]]


@dataclass(frozen=True)
class Subscription:
    """What one member asks for: its topics, and (cooperative protocols) the partitions it owns now."""

    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class Assignor:
    """A named assignment strategy; `cooperative` ones let members keep partitions across a rebalance."""

    name: str
    assign: Callable[[Mapping[str, Subscription], Mapping[str, int]], Assignment]
    cooperative: bool = False


def _subscribers(members: Mapping[str, Subscription], topic: str) -> list[str]:
    return sorted(m for m, sub in members.items() if topic in sub.topics)


def _topics(members: Mapping[str, Subscription]) -> list[str]:
    return sorted({t for sub in members.values() for t in sub.topics})


def range_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    """Per topic: sorted partitions over sorted subscribers, the first P % M members take one extra."""
    out: Assignment = {m: [] for m in members}
    for topic in _topics(members):
        subs, count = _subscribers(members, topic), partitions.get(topic, 0)
        share, extra = divmod(count, len(subs))
        start = 0
        for i, member in enumerate(subs):
            n = share + (1 if i < extra else 0)
            out[member].extend((topic, p) for p in range(start, start + n))
            start += n
    return out


def roundrobin_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    """All partitions sorted, dealt to sorted members in turn, skipping members not subscribed to the topic."""
    out: Assignment = {m: [] for m in members}
    order, turn = sorted(members), 0
    for topic in _topics(members):
        for p in range(partitions.get(topic, 0)):
            while topic not in members[order[turn % len(order)]].topics:
                turn += 1
            out[order[turn % len(order)]].append((topic, p))
            turn += 1
    return out


def sticky_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    """Keep every valid owned partition, hand out the rest to the least loaded subscribers, then move
    only as many partitions as balance needs (newly handed-out ones first, then owned ones)."""
    out: Assignment = {m: [] for m in members}
    owner: dict[TopicPartition, str] = {}
    for member in sorted(members):
        for tp in sorted(set(members[member].owned)):
            topic, p = tp
            if topic in members[member].topics and 0 <= p < partitions.get(topic, 0) and tp not in owner:
                owner[tp] = member
                out[member].append(tp)
    eligible = {topic: _subscribers(members, topic) for topic in _topics(members)}
    for topic in sorted(eligible):
        for p in range(partitions.get(topic, 0)):
            if (topic, p) not in owner:
                out[min(eligible[topic], key=lambda m: (len(out[m]), m))].append((topic, p))
    kept = set(owner.items())
    while True:  # every move lowers the sum of squared loads, so this ends
        move = _best_move(out, eligible, kept)
        if move is None:
            return {m: sorted(tps) for m, tps in out.items()}
        tp, src, dst = move
        out[src].remove(tp)
        out[dst].append(tp)


def _best_move(out: Assignment, eligible: Mapping[str, list[str]],
               kept: set[tuple[TopicPartition, str]]) -> tuple[TopicPartition, str, str] | None:
    """One partition move from the most loaded member that reduces imbalance; not-kept partitions first."""
    for src in sorted(out, key=lambda m: (-len(out[m]), m)):
        for tp in sorted(out[src], key=lambda tp: ((tp, src) in kept, tp)):
            dst = min(eligible[tp[0]], key=lambda m: (len(out[m]), m))
            if len(out[dst]) < len(out[src]) - 1:
                return tp, src, dst
    return None


def withhold_moving(target: Assignment, members: Mapping[str, Subscription]) -> tuple[Assignment, bool]:
    """The first cooperative round: drop from `target` every partition another member still owns.

    Returns the assignment to hand out now and whether partitions were withheld (then a follow-up
    rebalance gives them to their new owners once the old owners have revoked them)."""
    owned_by = {tp: m for m in sorted(members) for tp in members[m].owned}
    now = {m: [tp for tp in tps if owned_by.get(tp, m) == m] for m, tps in target.items()}
    return now, any(len(now[m]) != len(target[m]) for m in target)


ASSIGNORS: dict[str, Assignor] = {
    a.name: a for a in (Assignor("range", range_assign), Assignor("roundrobin", roundrobin_assign),
                        Assignor("cooperative-sticky", sticky_assign, cooperative=True))
}


def assignor(name: str) -> Assignor:
    """The assignor called `name`; InconsistentGroupProtocolError names the known ones."""
    found = ASSIGNORS.get(name)
    if found is None:
        raise InconsistentGroupProtocolError(
            f"unknown partition assignment strategy {name!r}; use one of {', '.join(ASSIGNORS)}")
    return found
