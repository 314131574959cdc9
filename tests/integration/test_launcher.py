"""The launcher of server processes (fabric/server/launcher.py): a server whose drawn port another process took
before it could bind it (a server of another test run on the machine: a CI run failed on it) is not taken for
the one listening there, and starts on another port."""
from __future__ import annotations

import socket

import pytest

from fabric.common import ports
from fabric.server import launcher
from fabric.server.launcher import CoordinatorProcess, NodeProcess


@pytest.mark.parametrize("kind", ["coordinator", "node"])
def test_a_server_whose_drawn_port_was_taken_starts_on_another(coordinators, tmp_path, monkeypatch, kind) -> None:
    first = coordinators()
    drawn = iter([first.port])
    monkeypatch.setattr(launcher, "free_port", lambda: next(drawn, None) or ports.free_port())
    second = (CoordinatorProcess(str(tmp_path / "second")) if kind == "coordinator"
              else NodeProcess(1, str(tmp_path / "node"), first.url()))
    assert second.port == first.port
    try:
        second.start()
        assert second.port != first.port
        status = second.status()
        pid = status["pid"] if kind == "node" else status.pid
        assert pid == second.process.pid and pid != first.process.pid
        assert first.status().pid == first.process.pid  # the first one serves on, untouched
    finally:
        second.stop()


def test_a_restarted_node_whose_port_was_taken_meanwhile_starts_on_another(coordinators, tmp_path) -> None:
    """While a killed node is down, a server of another test run may draw its port (a CI run failed on it): the
    restarted node registers on another port; a node given its port keeps failing loudly on it."""
    coordinator = coordinators()
    node = NodeProcess(1, str(tmp_path / "node"), coordinator.url()).start()
    old = node.port
    node.kill()
    with socket.socket() as squatter:  # another process's server, listening there now
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", old))
        squatter.listen()
        again = node.restarted()
        try:
            assert again.port != old and again.status()["node_epoch"] > 1
        finally:
            again.stop()
        pinned = NodeProcess(1, str(tmp_path / "node"), coordinator.url(), port=old)
        with pytest.raises(RuntimeError, match="Address already in use"):
            pinned.restarted()
