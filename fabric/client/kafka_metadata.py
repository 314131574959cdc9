"""confluent-kafka's cluster metadata (`list_topics()` of its AdminClient, Producer and Consumer): a ClusterMetadata
of the fabric's data nodes as brokers and its topics with their partitions' leaders, replicas and in-sync
replicas, from one describe_cluster and one topic read per topic listed; and the same in the shapes of its
AdminClient's `describe_cluster()` (a future of the live nodes) and `describe_topics(TopicCollection([...]))` (a
future per topic, its partitions naming their nodes), and in kafka-python's KafkaAdminClient's, the dicts of its
`describe_cluster()` and `describe_topics()`.

A topic the fabric keeps in its own directory (a fabric without data nodes, or a topic created without a
replication factor) has partitions no broker leads: their leader is -1 and their replicas and ISR are empty,
with no error (they are readable and writable, through the fabric's coordinator). A replicated partition without
a leader (every replica in its ISR down) has leader -1 too, and its replicas and ISR as registered.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from fabric.client.kafka_admin import done_future
from fabric.common.errors import FabricError, InvalidArgumentError, UnknownTopicError
from fabric.common.names import INTERNAL_TOPICS, validate_topic
from fabric.common.redaction import redact_url

if TYPE_CHECKING:
    from fabric.client.cluster import Cluster
    from fabric.common.types import ClusterDescription

NO_LEADER = -1  # confluent-kafka's leader of a partition no broker leads
UNKNOWN_TOPIC = 3  # Kafka's error code UNKNOWN_TOPIC_OR_PARTITION, as kafka-python's describe_topics answers it


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


@dataclass(frozen=True)
class Node:
    """A data node as confluent-kafka's describe calls name a broker: id, host, port and rack."""

    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class TopicPartitionInfo:
    """A partition as describe_topics names it: its id, leader (None: none), replicas and in-sync replicas."""

    id: int
    leader: Node | None
    replicas: list[Node]
    isr: list[Node]


@dataclass(frozen=True)
class TopicDescription:
    """A topic as confluent-kafka's describe_topics answers it (a topic the fabric keeps in its own directory has
    no topic id, and partitions without leader or replicas)."""

    name: str
    topic_id: str | None
    is_internal: bool
    partitions: list[TopicPartitionInfo]
    authorized_operations: None = None


@dataclass(frozen=True)
class DescribeClusterResult:
    """confluent-kafka's describe_cluster answer: the live data nodes (the controller is the fabric's coordinator,
    which is no node: None) and the cluster id (the fabric's URL, without credentials)."""

    controller: Node | None
    nodes: list[Node]
    cluster_id: str
    authorized_operations: None = None


class TopicCollection:
    """The topics describe_topics describes (confluent-kafka's TopicCollection)."""

    def __init__(self, topic_names: Iterable[str]) -> None:
        self.topic_names = list(topic_names)


def describe_cluster(cluster: Cluster) -> Future:
    """A future of the cluster's live data nodes (DescribeClusterResult)."""
    def describe() -> DescribeClusterResult:
        return DescribeClusterResult(None, list(_nodes(cluster.describe_cluster(refresh=True)).values()),
                                     redact_url(cluster.url))
    return done_future(describe)


def describe_topics(cluster: Cluster, topics: TopicCollection) -> dict[str, Future]:
    """A future per topic of its description (UnknownTopicError for one that does not exist)."""
    if not isinstance(topics, TopicCollection):
        raise InvalidArgumentError(f"describe_topics takes TopicCollection(['orders']), got {topics!r}")
    described = cluster.describe_cluster(refresh=True)
    nodes = _nodes(described, alive_only=False)

    def node(node_id: int) -> Node:
        return nodes.get(node_id) or Node(node_id, "", 0)

    def describe(name: str) -> TopicDescription:
        count = cluster.coordinator.topic(validate_topic(name)).partitions
        partitions = [TopicPartitionInfo(p.id, None if p.leader == NO_LEADER else node(p.leader),
                                         [node(r) for r in p.replicas], [node(r) for r in p.isrs])
                      for p in _partitions(described, name, count).values()]
        return TopicDescription(name, described.topic_ids.get(name), name in INTERNAL_TOPICS, partitions)
    return {name: done_future(describe, name) for name in topics.topic_names}


def python_describe_cluster(cluster: Cluster) -> dict[str, Any]:
    """kafka-python's describe_cluster(): the live data nodes as brokers, the cluster id, no controller (-1)."""
    nodes = _nodes(cluster.describe_cluster(refresh=True)).values()
    return {"throttle_time_ms": 0, "cluster_id": redact_url(cluster.url), "controller_id": NO_LEADER,
            "brokers": [{"node_id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in nodes]}


def python_describe_topics(cluster: Cluster, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """kafka-python's describe_topics(): each topic (every one but the internal ones, if none are named) with its
    partitions' leader, replicas and ISR as node ids; an unknown topic's error code 3 (UNKNOWN_TOPIC_OR_PARTITION)."""
    metadata = _metadata(cluster, None if topics is None else list(topics))
    return [{"error_code": UNKNOWN_TOPIC if topic.error is not None else 0, "topic": name,
             "is_internal": name in INTERNAL_TOPICS,
             "partitions": [{"error_code": 0, "partition": p.id, "leader": p.leader, "replicas": p.replicas,
                             "isr": p.isrs, "offline_replicas": []} for p in topic.partitions.values()]}
            for name, topic in metadata.topics.items()]


def cluster_metadata(cluster: Cluster, topic: str | None = None) -> ClusterMetadata:
    """The metadata of `topic`, or of every topic but the internal ones (an unknown `topic` is listed with its
    UnknownTopicError, as confluent-kafka lists it with its error)."""
    return _metadata(cluster, None if topic is None else [topic])


def _metadata(cluster: Cluster, names: list[str] | None) -> ClusterMetadata:
    """The metadata of the topics `names` (an unknown one listed with its UnknownTopicError), or of every topic but
    the internal ones, from one describe_cluster."""
    described = cluster.describe_cluster(refresh=True)
    brokers = {node.id: BrokerMetadata(node.id, node.host, node.port)
               for node in _nodes(described, alive_only=False).values()}
    listed = [validate_topic(name) for name in names] if names is not None else \
        [t for t in cluster.coordinator.list_topics() if t not in INTERNAL_TOPICS]
    topics = {}
    for name in listed:
        try:
            count = cluster.coordinator.topic(name).partitions
        except UnknownTopicError as exc:
            if names is None:
                continue  # deleted since it was listed
            topics[name] = TopicMetadata(name, error=exc)
            continue
        topics[name] = TopicMetadata(name, _partitions(described, name, count))
    return ClusterMetadata(redact_url(cluster.url), brokers=brokers, topics=topics)


def _nodes(described: ClusterDescription, alive_only: bool = True) -> dict[int, Node]:
    """The registered data nodes by id (the live ones only, unless not `alive_only`)."""
    out = {}
    for info in described.nodes:
        if info.alive or not alive_only:
            host, _, port = info.address.rpartition(":")
            out[info.id] = Node(info.id, host, int(port) if port.isdigit() else 0, info.rack)
    return out


def _partitions(described: ClusterDescription, topic: str, count: int) -> dict[int, PartitionMetadata]:
    """The `count` partitions of `topic` as the cluster's registrations have them (none: kept in the fabric's own
    directory, no leader)."""
    partitions = {}
    for p in range(count):
        registered = described.partitions.get((topic, p))
        if registered is None:
            partitions[p] = PartitionMetadata(p)
            continue
        leader = registered.state.leader
        partitions[p] = PartitionMetadata(p, NO_LEADER if leader is None else leader,
                                          list(registered.assignment.replicas), list(registered.state.isr))
    return partitions
