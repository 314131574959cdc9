"""The `coordinators` fixture: coordinator.launcher's CoordinatorProcess instances started on demand, each
stopped after the test.
"""
from __future__ import annotations

from typing import Callable, Iterator

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
