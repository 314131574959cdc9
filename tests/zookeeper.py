"""Real ZooKeeper fixtures for tests, on coordinator.zk_server's ZooKeeperServer (a JVM from pyspark's jars).

Fixtures: `zookeeper_server` (session-scoped server), `zookeeper` (its connect string) and `zk_url` (a fresh
zk:// URL with its own chroot per test).
"""
from __future__ import annotations

import uuid

import pytest

from coordinator.zk_server import ZooKeeperServer


@pytest.fixture(scope="session")
def zookeeper_server():
    """One real ZooKeeper server for the whole test run."""
    server = ZooKeeperServer().start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def zookeeper(zookeeper_server: ZooKeeperServer) -> str:
    """The connect string ("127.0.0.1:port") of the session's ZooKeeper server."""
    return zookeeper_server.hosts


@pytest.fixture
def zk_url(zookeeper_server: ZooKeeperServer) -> str:
    """A zk:// URL with a fresh chroot, so each test sees an empty namespace."""
    return zookeeper_server.url(f"/test-{uuid.uuid4().hex[:12]}")
