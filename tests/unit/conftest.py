"""The unit tier: fast tests in this process only. No Spark, no ZooKeeper, no coordinator service, no child
processes (those tests live in tests/integration). Both rules are enforced here, so a test that needs more
fails naming the tier it belongs to."""
from __future__ import annotations

import socket
import subprocess
from typing import Iterator

import pytest

from fabric.common.clock import Clock

INTEGRATION_MARKERS = ("spark", "zookeeper", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced = [f"{item.nodeid} ({marker})" for item in items for marker in INTEGRATION_MARKERS
                 if item.get_closest_marker(marker) and "tests/unit/" in item.nodeid]
    if misplaced:
        raise pytest.UsageError("tests marked spark, zookeeper or slow belong in tests/integration: "
                                + ", ".join(misplaced))


@pytest.fixture(autouse=True)
def _no_child_processes(monkeypatch) -> None:
    """Unit tests start no processes (servers, CLIs, crash children): those belong in tests/integration."""
    def refuse(self, args, *rest, **kwargs):
        raise AssertionError(f"a unit test started a process ({args!r}); move the test to tests/integration")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


class ManualClock(Clock):
    """A clock that moves only when the test sets `ms` (milliseconds since the epoch; the monotonic clock moves
    with it)."""

    def __init__(self) -> None:
        self.ms = 1_000_000

    def now_us(self) -> int:
        return self.ms * 1000

    def monotonic_ms(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> ManualClock:
    """A ManualClock for code that takes a Clock: the test moves time with `clock.ms += ...`."""
    return ManualClock()


@pytest.fixture
def store(tmp_path):
    """A SqliteCoordinator in tmp_path/m.db, closed after the test (the controller's store)."""
    from fabric.coordinator.sqlite_store import SqliteCoordinator

    sqlite = SqliteCoordinator(str(tmp_path / "m.db"))
    yield sqlite
    sqlite.close()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another socket is listening on, for tests of servers refusing a port in use."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield busy.getsockname()[1]
