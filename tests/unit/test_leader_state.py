"""LeaderState.isr_settled, the test ISR upkeep runs on every led partition each round before it looks closer: it
never says "settled" where wanted_isr would ask for a change, and with the whole ISR in place and nothing pending it
says exactly what wanted_isr says."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fabric.server.node.leader import LeaderState

LAG_MS, NOW_MS = 10_000.0, 1_000_000.0


@st.composite
def leaderships(draw: st.DrawFn) -> LeaderState:
    replicas = tuple(draw(st.permutations([1, 2, 3]))[:draw(st.integers(1, 3))])
    leader_id = replicas[0]
    isr = tuple(r for r in replicas if r == leader_id or draw(st.booleans()))
    state = LeaderState("t-0", leader_id, 0, replicas, isr, 0, 5, 0, 0.0)
    for progress in state.followers.values():
        progress.caught_up_ms = NOW_MS - draw(st.sampled_from([0.0, LAG_MS - 1, LAG_MS, LAG_MS + 1, 5 * LAG_MS]))
        progress.leo = draw(st.integers(-1, 10))
    if draw(st.booleans()):
        state.pending = (leader_id,)
    return state


@given(leaderships())
def test_settled_means_wanted_isr_asks_for_nothing(state: LeaderState) -> None:
    settled = state.isr_settled(LAG_MS, NOW_MS)
    wanted = state.wanted_isr(LAG_MS, NOW_MS)
    if settled:
        assert wanted is None
    if state.pending is None and state.isr == state.replicas:
        assert settled == (wanted is None)


def test_a_follower_past_the_lag_unsettles_the_whole_isr() -> None:
    state = LeaderState("t-0", 1, 0, (1, 2, 3), (1, 2, 3), 0, 5, 0, NOW_MS)
    assert state.isr_settled(LAG_MS, NOW_MS + LAG_MS)
    state.followers[3].caught_up_ms = NOW_MS - 1
    assert not state.isr_settled(LAG_MS, NOW_MS + LAG_MS)
    assert state.wanted_isr(LAG_MS, NOW_MS + LAG_MS) == (1, 2)
    assert not LeaderState("t-0", 1, 0, (1, 2, 3), (1, 2), 0, 5, 0, NOW_MS).isr_settled(LAG_MS, NOW_MS)
