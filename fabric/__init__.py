"""Spark Fabric: a Kafka-class message fabric stored as Arrow segments, native to Spark.

    import fabric
    fab = fabric.connect("file:///tmp/fabric")   # or a path, or $FABRIC_URL, default ./fabric-data

The package is layered; each layer imports only the ones below it (import-linter checks this):
    fabric.sources, fabric.sinks   Spark source and sinks (from the repository's sources/ and sinks/)
    fabric.spark                   what Spark jobs, sources, sinks and notebooks share: options, session
    fabric.cli                     the `fabric` command
    fabric.kafka                   kafka-python's and confluent-kafka's client classes, over the client layer
    fabric.client, fabric.errors   clusters (embedded, remote), producer, consumer, admin; the error types
    fabric.server                  the coordinator service and its wire format
    fabric.coordinator             metadata stores, groups, assignors, election (the repository's coordinator/)
    fabric.storage                 the log: segments, indexes, frames, watermark
    fabric.common                  errors, names, value types, configs, the record layout
"""
from __future__ import annotations

from importlib.metadata import version as _version

from fabric.client.admin import Fabric
from fabric.client.kafka_admin import NewPartitions, NewTopic, OffsetSpec
from fabric.client.topic_partition import TopicPartition
from fabric.client.url import open_cluster
from fabric.common.errors import *  # noqa: F401,F403  (the exception types are part of the public API)

__all__ = ["connect", "Fabric", "NewPartitions", "NewTopic", "OffsetSpec", "TopicPartition", "__version__"]
__version__ = _version("spark-fabric")  # the installed distribution's, as kafka.__version__


def connect(url: str | None = None) -> Fabric:
    """Connect to the fabric at `url` (file:///dir, a path, or fabric://host:port)."""
    return Fabric(open_cluster(url))
