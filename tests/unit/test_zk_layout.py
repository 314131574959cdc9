"""ZooKeeper addresses: zk:// URLs with their chroots, and the error when no server answers (no server runs
here; the store against a real one: tests/integration/test_zk_store.py)."""
from __future__ import annotations

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


@pytest.mark.parametrize("name", ["plain", "a/b", "50%", ".", "..", "with space", "ümlaut"])
def test_a_watched_znodes_path_names_its_topic_or_group(name):
    """What a watch event's path maps back to (coordinator.zk_watched_cache forgets that key)."""
    assert layout.topic_of(layout.topic(name)) == name
    assert layout.group_of_state(layout.group_state(name)) == name
