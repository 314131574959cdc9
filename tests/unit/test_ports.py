"""fabric.common.ports.free_port: a port it hands out is not handed out again by the same process, even before the
server it was meant for binds it (two nodes of one test cluster once drew the same port, and the second could not
listen)."""
from __future__ import annotations

import random

from fabric.common import ports


def test_a_port_handed_out_is_not_handed_out_again_before_its_server_binds_it(monkeypatch) -> None:
    # no ports recorded by this process's earlier tests: the draw replayed below skips only what is busy (a port
    # handed out earlier and skipped in the first draw, its server gone since, was taken in the replay)
    monkeypatch.setattr(ports, "_handed_out", set())
    state = random.getstate()
    first = ports.free_port()
    random.setstate(state)  # the same draw again: the same candidates come first
    second = ports.free_port()
    assert first != second
    assert {first, second} <= ports._handed_out
    monkeypatch.setattr(ports, "_handed_out", set())
    random.setstate(state)
    assert ports.free_port() == first  # (without the record, the draw gives the same port)
