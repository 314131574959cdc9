"""Replica placement for new topics and added partitions: Kafka's round-robin assignment (AdminUtils).

The live nodes are sorted by id (rack-aware: interleaved rack by rack, so neighbours sit on different racks).
Partition p's first replica is node (p + start) mod n; the others follow at a shift that grows every n
partitions, so the leaders spread evenly and the followers of one node spread over the others. With racks,
a replica goes to a rack holding none of the partition's replicas yet while there is one (Kafka's rack-aware
placement), so a partition survives the loss of a whole rack when it has replicas on two or more.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from fabric.common.errors import InvalidConfigError, InvalidReplicationFactorError
from fabric.common.types import NodeInfo, PartitionAssignment

log = logging.getLogger(__name__)


def _check(nodes: Sequence[NodeInfo], replication_factor: int) -> None:
    live = sorted(n.id for n in nodes if n.alive)
    if replication_factor < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {replication_factor}")
    if replication_factor > len(live):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {len(live)} live node(s) {live}; start "
            f"more nodes or use a replication factor of at most {len(live)}")
    racked = [n.id for n in nodes if n.alive and n.rack is not None]
    if racked and len(racked) != len(live):
        raise InvalidConfigError(f"nodes {racked} have a rack and nodes {sorted(set(live) - set(racked))} have "
                                 "none; give every node a rack (--rack) or none")


def rack_alternated(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """The nodes sorted by id and interleaved by rack (racks in name order): a1, b1, c1, a2, b2, ..."""
    by_rack: dict[str, list[NodeInfo]] = {}
    for n in sorted(nodes, key=lambda n: n.id):
        by_rack.setdefault(n.rack or "", []).append(n)
    columns = [by_rack[r] for r in sorted(by_rack)]
    return [column[i] for i in range(max(map(len, columns), default=0)) for column in columns if i < len(column)]


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def assign(nodes: Sequence[NodeInfo], partitions: range, replication_factor: int,
           start: int) -> dict[int, PartitionAssignment]:
    """Replicas of `partitions` over the alive `nodes`; `start` offsets the first replicas (a new topic picks
    it at random so topics do not all lead on the same node). InvalidReplicationFactorError if the factor is
    larger than the live nodes."""
    _check(nodes, replication_factor)
    arranged = rack_alternated([n for n in nodes if n.alive])
    n, racks = len(arranged), len({node.rack for node in arranged})
    shift = start % n
    out: dict[int, PartitionAssignment] = {}
    for p in partitions:
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        chosen = [arranged[first]]
        k = 0
        while len(chosen) < replication_factor:
            candidate = arranged[_follower_index(first, shift * racks, k, n)]
            k += 1
            rack_free = candidate.rack not in {c.rack for c in chosen} or len({c.rack for c in chosen}) == racks
            if candidate not in chosen and rack_free:
                chosen.append(candidate)
        out[p] = PartitionAssignment(tuple(c.id for c in chosen))
    log.debug("placed partitions %s on %s", list(partitions), {p: a.replicas for p, a in out.items()})
    return out


def assign_added(nodes: Sequence[NodeInfo], existing: Mapping[int, PartitionAssignment],
                 total: int) -> dict[int, PartitionAssignment]:
    """Replicas of partitions len(existing) .. total-1 of a topic, with its replication factor, continuing
    from where partition 0's preferred leader sits among the live nodes (as Kafka adds partitions)."""
    first = existing[0]
    arranged = rack_alternated([n for n in nodes if n.alive])
    start = next((i for i, n in enumerate(arranged) if n.id == first.preferred_leader), 0)
    return assign(nodes, range(len(existing), total), len(first.replicas), start)
