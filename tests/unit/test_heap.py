"""A server's collector (fabric/server/heap.py): the objects a process holds are frozen out of the cyclic
collector's full passes, the ones made later too, and a full collection of everything, frozen objects included,
still reclaims the cycles that became garbage among them."""
from __future__ import annotations

import gc
import weakref

import pytest

from fabric.common.waiting import wait_for
from fabric.server.heap import QuietCollector


class Node:
    """A cycle: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


def frozen(obj: object) -> bool:
    """Whether the collector tracks `obj` in none of its generations: frozen (gc.get_objects leaves those out)."""
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


@pytest.fixture()
def unfrozen():
    """Whatever a test freezes goes back to the collector after it (the test process is pytest's)."""
    yield
    gc.unfreeze()


def test_objects_held_now_and_made_later_are_frozen_and_a_periodic_full_collection_reclaims_cycles(unfrozen) -> None:
    collector = QuietCollector(freeze_s=0.01, full_s=0.2).start()
    try:
        # what the process held at the start (waited for: a loaded machine may let the collector's own full
        # collection, 0.2 s on, begin first, and the objects are unfrozen while it runs)
        wait_for(lambda: gc.get_freeze_count() > 0 and frozen(Node), 30, "what the process held to be frozen")
        kept = [Node() for _ in range(1000)]
        wait_for(lambda: frozen(kept[-1]), 30, "objects made later to be frozen")
        cycle = Node()
        dropped = weakref.ref(cycle)
        wait_for(lambda: frozen(dropped()), 30, "the cycle to be frozen")
        del cycle
        gc.collect()  # a full collection of the unfrozen objects does not reach a frozen cycle...
        wait_for(lambda: dropped() is None, 30, "the periodic collection of everything to reclaim it")
        assert all(node.me is node for node in kept)  # what is still referred to stays
    finally:
        collector.stop()


def test_collect_all_reclaims_a_frozen_cycle(unfrozen) -> None:
    cycle = Node()
    dropped = weakref.ref(cycle)
    gc.freeze()
    assert frozen(cycle)
    del cycle
    gc.collect()
    assert dropped() is not None  # frozen: out of the collector's reach
    QuietCollector.collect_all()
    assert dropped() is None
    assert gc.get_freeze_count() > 0  # the survivors are frozen again


def test_the_freeze_interval_is_checked() -> None:
    with pytest.raises(ValueError, match="freeze_s must be above 0 and at most full_s"):
        QuietCollector(freeze_s=0, full_s=1)
    with pytest.raises(ValueError, match="at most full_s"):
        QuietCollector(freeze_s=5, full_s=1)
