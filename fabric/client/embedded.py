"""The embedded fabric: a Broker in the client's own process, over a local directory; no server.

Every process that opens the directory (Spark executors, notebooks, the CLI) shares it safely.
"""
from __future__ import annotations

import sqlite3

from fabric.client.cluster import Cluster
from fabric.common.errors import InvalidConfigError
from fabric.coordinator.interface import Coordinator
from fabric.server.broker import Broker


class EmbeddedCluster(Broker, Cluster):
    """A fabric living in directory `root` (file:///root); metadata in root's own SQLite database unless a
    `coordinator` is given; at most `max_partitions` partitions per topic (default: $FABRIC_MAX_PARTITIONS,
    else 10,000)."""

    def __init__(self, root: str, coordinator: Coordinator | None = None, max_partitions: int | None = None) -> None:
        try:
            super().__init__(root, coordinator, max_partitions)
        except (OSError, sqlite3.Error) as exc:  # a path that is no directory (a full disk is a StorageError)
            raise InvalidConfigError(
                f"cannot open an embedded fabric in {root!r} ({exc}); give a directory this process can create "
                "and write (file:///dir or a path)") from None
        self.url = f"file://{self.root}"
