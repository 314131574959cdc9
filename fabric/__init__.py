"""Spark Fabric: a Kafka-class message fabric stored as Arrow segments, native to Spark.

    import fabric
    fab = fabric.connect("file:///tmp/fabric")   # or a path, or $FABRIC_URL, default ./fabric-data
"""
from __future__ import annotations

from fabric.client import Fabric
from fabric.errors import *  # noqa: F401,F403  (the exception types are part of the public API)
from fabric.url import open_cluster

__all__ = ["connect", "Fabric"]


def connect(url: str | None = None) -> Fabric:
    """Connect to the fabric at `url` (file:///dir, a path, or fabric://host:port)."""
    return Fabric(open_cluster(url))
