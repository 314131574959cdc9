"""Replica placement (coordinator/placement.py): Kafka's round-robin assignment, rack-aware when nodes have
racks, for new topics and added partitions, and its refusals."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fabric.common.errors import InvalidConfigError, InvalidReplicationFactorError
from fabric.common.types import NodeInfo
from fabric.coordinator.placement import assign, assign_added, rack_alternated


def nodes(*ids: int, racks: str = "", dead: tuple[int, ...] = ()) -> list[NodeInfo]:
    """Alive nodes (except `dead`), racks[i] the rack of the i-th id ("" for none)."""
    return [NodeInfo(i, f"h{i}:9092", racks[k] if racks else None, 1, i not in dead) for k, i in enumerate(ids)]


def test_round_robin_is_kafkas() -> None:
    # Kafka's AdminUtils example: 5 brokers, 10 partitions, 3 replicas, start 0
    placed = assign(nodes(0, 1, 2, 3, 4), range(10), 3, start=0)
    assert {p: a.replicas for p, a in placed.items()} == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2)}


def test_start_offsets_the_first_replicas_and_ids_are_sorted() -> None:
    placed = assign(list(reversed(nodes(10, 20, 30))), range(3), 1, start=1)
    assert [a.replicas for a in placed.values()] == [(20,), (30,), (10,)]


def test_rack_alternated_order() -> None:
    arranged = rack_alternated(nodes(1, 2, 3, 4, 5, racks="aabbc"))
    assert [n.id for n in arranged] == [1, 3, 5, 2, 4]


@pytest.mark.parametrize("racks, rf", [("aabbcc", 3), ("aaabbb", 2), ("aaabbb", 3), ("abcabc", 3)])
def test_rack_aware_spreads_each_partition_over_racks(racks: str, rf: int) -> None:
    group = nodes(1, 2, 3, 4, 5, 6, racks=racks)
    rack_of = {n.id: n.rack for n in group}
    placed = assign(group, range(12), rf, start=0)
    distinct_racks = len(set(racks))
    for a in placed.values():
        assert len(set(a.replicas)) == rf
        assert len({rack_of[r] for r in a.replicas}) == min(rf, distinct_racks)
    assert set(Counter(a.preferred_leader for a in placed.values()).values()) == {2}  # leaders spread evenly


def test_only_live_nodes_get_replicas() -> None:
    placed = assign(nodes(1, 2, 3, 4, dead=(2,)), range(6), 3, start=0)
    assert all(2 not in a.replicas for a in placed.values())


@pytest.mark.parametrize("rf", [0, 4])
def test_refuses_a_replication_factor_the_live_nodes_cannot_hold(rf: int) -> None:
    with pytest.raises(InvalidReplicationFactorError, match="replication factor"):
        assign(nodes(1, 2, 3, 4, dead=(4,)), range(1), rf, start=0)


def test_refusal_names_the_live_nodes_and_the_fix() -> None:
    with pytest.raises(InvalidReplicationFactorError,
                       match=r"replication factor 3 is larger than the 2 live node\(s\) \[1, 3\]; start more nodes "
                             r"or use a replication factor of at most 2"):
        assign(nodes(1, 2, 3, dead=(2,)), range(1), 3, start=0)


def test_refuses_nodes_with_and_without_racks() -> None:
    group = nodes(1, 2, racks="aa") + nodes(3)
    with pytest.raises(InvalidConfigError, match=r"nodes \[1, 2\] have a rack and nodes \[3\] have none"):
        assign(group, range(1), 1, start=0)


def test_added_partitions_continue_the_round_robin() -> None:
    group = nodes(0, 1, 2, 3, 4)
    whole = assign(group, range(10), 3, start=2)
    added = assign_added(group, {p: whole[p] for p in range(4)}, 10)
    assert sorted(added) == list(range(4, 10))
    assert added == {p: whole[p] for p in range(4, 10)}  # as if the topic had been created with 10


@given(st.integers(1, 7), st.integers(1, 7), st.integers(1, 30), st.integers(0, 100), st.booleans())
def test_every_partition_gets_distinct_replicas_and_leaders_spread(n: int, rf: int, count: int, start: int,
                                                                   racked: bool) -> None:
    group = nodes(*range(n), racks="abc" * 3 if racked else "")
    if rf > n:
        with pytest.raises(InvalidReplicationFactorError):
            assign(group, range(count), rf, start)
        return
    placed = assign(group, range(count), rf, start)
    assert sorted(placed) == list(range(count))
    assert all(len(a.replicas) == rf == len(set(a.replicas)) for a in placed.values())
    leaders = Counter(a.preferred_leader for a in placed.values())
    led = [leaders[i] for i in range(n)]
    assert max(led) - min(led) <= 1  # round robin: no node leads two more partitions than another
