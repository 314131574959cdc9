"""The `coordinators` fixture: coordinator.launcher's CoordinatorProcess instances started on demand, each
stopped after the test.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from coordinator.launcher import CoordinatorProcess


@pytest.fixture
def coordinators(tmp_path) -> Iterator[Callable[..., CoordinatorProcess]]:
    """start(**kwargs) → a started CoordinatorProcess (data dir defaults to tmp_path/data); all stopped after."""
    started: list[CoordinatorProcess] = []

    def start(data_dir: str | None = None, **kwargs) -> CoordinatorProcess:
        instance = CoordinatorProcess(data_dir or str(tmp_path / "data"), **kwargs)
        started.append(instance)
        return instance.start()

    yield start
    for instance in started:
        instance.stop()


def zookeeper_instances(coordinators: Callable[..., CoordinatorProcess], zk_url: str, tmp_path,
                        session_ms: int, count: int = 3) -> tuple[dict[str, CoordinatorProcess], str]:
    """`count` instances sharing tmp_path/data with their metadata in ZooKeeper (one is elected active):
    the instances by address, and the fabric:// URL listing them all."""
    config = tmp_path / "ha.properties"
    config.write_text(f"coordinator.store={zk_url}\nzookeeper.session.timeout.ms={session_ms}\n")
    instances = {i.address: i for i in (coordinators(str(tmp_path / "data"), extra=("--config", str(config)))
                                        for _ in range(count))}
    return instances, "fabric://" + ",".join(instances)


def the_active(fab) -> Any:
    """The status of the one active instance of fab's URL, or None while there is not exactly one."""
    active = [s for s in fab.cluster.statuses().values() if not isinstance(s, Exception) and s.active]
    return active[0] if len(active) == 1 else None
