"""ZooKeeper addresses: zk:// URLs with their chroots, and the error when no server answers (no server runs
here; the store against a real one: tests/integration/test_zk_store.py)."""
from __future__ import annotations

import socket
import threading

import pytest

from fabric.common.errors import CoordinatorUnavailableError, InvalidConfigError
from fabric.common.ports import free_port
from fabric.coordinator import zk_layout as layout


def test_url_parsing_and_unreachable_server():
    assert layout.parse_url("zk://a:1,b/x/y/") == layout.ZkAddress("a:1,b:2181", "/x/y")
    assert layout.parse_url("zk://h:2") == layout.ZkAddress("h:2", "")
    for bad in ("http://h:1", "zk:///x", "zk://h:port", "zk://h:1/a//b", "zk://h:1/a/../b"):
        with pytest.raises(InvalidConfigError, match="zk://|chroot|host"):
            layout.parse_url(bad)
    with pytest.raises(CoordinatorUnavailableError, match="start ZooKeeper"):
        layout.connect(f"zk://127.0.0.1:{free_port()}", timeout=1.0)


def test_one_server_is_listed_three_times_so_a_hung_handshake_costs_a_third_of_the_session():
    """ZooKeeper 3.9 leaves a connection made while it starts unanswered and open; kazoo waits for a handshake's
    answer session timeout / number of hosts. A listener that accepts and never answers stands for that server:
    within a start timeout shorter than the session, the client gives up a hung handshake and tries again."""
    assert layout.kazoo_hosts("a:1") == "a:1,a:1,a:1"
    assert layout.kazoo_hosts("a:1,b:2") == "a:1,b:2,a:1,b:2"
    assert layout.kazoo_hosts("a:1,b:2,c:3") == "a:1,b:2,c:3"
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:  # closed at the end
                return

    threading.Thread(target=accept, daemon=True).start()
    session_s, start_s = 12.0, 10.0  # a handshake given up after 4 s, not 12: one try more at least, within 10 s
    try:
        with pytest.raises(CoordinatorUnavailableError, match="start ZooKeeper"):
            layout.connect(f"zk://127.0.0.1:{listener.getsockname()[1]}", timeout=start_s,
                           session_timeout=session_s)
        assert len(accepted) >= 2, f"{len(accepted)} handshake(s) within {start_s} s of a {session_s} s session"
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


@pytest.mark.parametrize("name", ["plain", "a/b", "50%", ".", "..", "with space", "ümlaut"])
def test_a_watched_znodes_path_names_its_topic_or_group(name):
    """What a watch event's path maps back to (coordinator.zk_watched_cache forgets that key)."""
    assert layout.topic_of(layout.topic(name)) == name
    assert layout.group_of_state(layout.group_state(name)) == name
