"""confluent-kafka's cluster metadata (`list_topics()` of its AdminClient, Producer and Consumer): a ClusterMetadata
of the fabric's data nodes as brokers and its topics with their partitions' leaders, replicas and in-sync
replicas, from one describe_cluster and one topic read per topic listed.

A topic the fabric keeps in its own directory (a fabric without data nodes, or a topic created without a
replication factor) has partitions no broker leads: their leader is -1 and their replicas and ISR are empty,
with no error (they are readable and writable, through the fabric's coordinator). A replicated partition without
a leader (every replica in its ISR down) has leader -1 too, and its replicas and ISR as registered.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fabric.common.errors import FabricError, UnknownTopicError
from fabric.common.names import INTERNAL_TOPICS, validate_topic
from fabric.common.redaction import redact_url

if TYPE_CHECKING:
    from fabric.client.cluster import Cluster

NO_LEADER = -1  # confluent-kafka's leader of a partition no broker leads


@dataclass
class BrokerMetadata:
    """A data node as confluent-kafka names a broker: its id, host and port."""

    id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


@dataclass
class PartitionMetadata:
    """One partition: its id, leader (-1: none), replicas and in-sync replicas (node ids), and error (None)."""

    id: int
    leader: int = NO_LEADER
    replicas: list[int] = field(default_factory=list)
    isrs: list[int] = field(default_factory=list)
    error: FabricError | None = None


@dataclass
class TopicMetadata:
    """One topic: its name, its partitions by id, and the error that kept it from being read (None)."""

    topic: str
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)
    error: FabricError | None = None


@dataclass
class ClusterMetadata:
    """confluent-kafka's ClusterMetadata: the brokers by id, the topics by name, the controller (-1: the fabric's
    coordinator, which is no broker) and the cluster id (the fabric's URL, without credentials)."""

    cluster_id: str
    controller_id: int = NO_LEADER
    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    orig_broker_id: int = NO_LEADER
    orig_broker_name: str = ""


def cluster_metadata(cluster: Cluster, topic: str | None = None) -> ClusterMetadata:
    """The metadata of `topic`, or of every topic but the internal ones (an unknown `topic` is listed with its
    UnknownTopicError, as confluent-kafka lists it with its error)."""
    described = cluster.describe_cluster(refresh=True)
    brokers = {}
    for node in described.nodes:
        host, _, port = node.address.rpartition(":")
        brokers[node.id] = BrokerMetadata(node.id, host, int(port) if port.isdigit() else 0)
    names = [validate_topic(topic)] if topic is not None else \
        [t for t in cluster.coordinator.list_topics() if t not in INTERNAL_TOPICS]
    topics = {}
    for name in names:
        try:
            count = cluster.coordinator.topic(name).partitions
        except UnknownTopicError as exc:
            if topic is None:
                continue  # deleted since it was listed
            topics[name] = TopicMetadata(name, error=exc)
            continue
        partitions = {}
        for p in range(count):
            registered = described.partitions.get((name, p))
            if registered is None:
                partitions[p] = PartitionMetadata(p)
                continue
            leader = registered.state.leader
            partitions[p] = PartitionMetadata(p, NO_LEADER if leader is None else leader,
                                              list(registered.assignment.replicas), list(registered.state.isr))
        topics[name] = TopicMetadata(name, partitions)
    return ClusterMetadata(redact_url(cluster.url), brokers=brokers, topics=topics)
