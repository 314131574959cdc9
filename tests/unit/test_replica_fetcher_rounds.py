"""A follower's replica fetcher (fabric.server.node.fetcher) goes on after a round that failed with an unexpected
error: every partition it copies is named to the leader again, not only those the failed round had left
unsettled, so none is left out of its fetch session until something else changes."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fabric.common.waiting import wait_for
from fabric.server.node.fetcher import FetchSettings, ReplicaFetcher
from fabric.server.peer_calls import PeerCalls
from fabric.server.replicated_offsets import node_connection


def test_a_round_that_fails_part_way_has_every_partition_named_again(monkeypatch) -> None:
    fetcher = ReplicaFetcher(2, 1, "leader-1", lambda address, call: None, PeerCalls(node_connection(False, None)),
                             lambda: None, FetchSettings(), lambda tp, doing: None)
    for p in (0, 1):  # (a round reads a partition's replica only through the calls replaced below)
        replica: Any = SimpleNamespace(name=f"t-{p}", tp=("t", p))
        fetcher.add(replica, 0, "")
    fetcher._session.positions[("t", 0)] = (5, 0, "")  # held in the leader's session
    rounds: list[set] = []

    def round_that_fails() -> None:
        rounds.append(set(fetcher._unsettled))
        fetcher._unsettled.clear()  # taken to be looked at, as a round does first
        if len(rounds) == 2:
            fetcher.stop()
            return
        raise RuntimeError("a bug in the round")
    monkeypatch.setattr(fetcher, "_round", round_that_fails)
    fetcher.start()
    wait_for(lambda: len(rounds) == 2, 30, "the round after the failed one")
    assert rounds == [{("t", 0), ("t", 1)}] * 2  # before the fix the second round looked at none
    assert not fetcher._session.positions  # a new session, which names every partition
