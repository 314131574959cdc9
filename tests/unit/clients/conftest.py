"""Fixtures of the client unit tests: a real embedded fabric whose data calls can be made to fail."""
from __future__ import annotations

from typing import Any, Iterator

import pytest

from fabric.client.embedded import EmbeddedCluster


@pytest.fixture
def flaky(fabric_dir: str, flaky_cluster) -> Iterator[Any]:
    """A FlakyCluster over a fresh embedded fabric with one single-partition topic "t"."""
    cluster = flaky_cluster(EmbeddedCluster(fabric_dir))
    cluster.create_topic("t", 1, {}, None)
    yield cluster
    cluster.close()
