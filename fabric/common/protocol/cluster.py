"""`describe_cluster`'s answer in the fabric protocol (docs/protocol.md): the ClusterDescription as plain JSON a
client in any language reads with a JSON parser alone, its partitions a flat list of objects (JSON has no tuple
keys)."""
from __future__ import annotations

from typing import Any

import msgspec

from fabric.common.protocol import messages
from fabric.common.types import ClusterDescription, LeaderAndIsr, NodeInfo, PartitionAssignment, PartitionRegistration


class _Partition(msgspec.Struct, forbid_unknown_fields=True):
    """One replicated partition: where it is, its assignment and its leadership."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    target: tuple[int, ...]
    leader: int | None
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    controller_epoch: int


class _Cluster(msgspec.Struct, forbid_unknown_fields=True):
    controller_epoch: int
    nodes: list[NodeInfo]
    partitions: list[_Partition]
    topic_ids: dict[str, str]


def cluster_json(description: ClusterDescription) -> dict[str, Any]:
    """The answer's JSON value: {"controller_epoch", "nodes": [NodeInfo objects], "partitions": [{"topic",
    "partition", "replicas", "target", "leader", "leader_epoch", "isr", "partition_epoch", "controller_epoch"}],
    "topic_ids": {topic: id}}, partitions in (topic, partition) order."""
    return {"controller_epoch": description.controller_epoch, "nodes": list(description.nodes),
            "partitions": [{"topic": topic, "partition": partition, "replicas": reg.assignment.replicas,
                            "target": reg.assignment.target, "leader": reg.state.leader,
                            "leader_epoch": reg.state.leader_epoch, "isr": reg.state.isr,
                            "partition_epoch": reg.state.partition_epoch,
                            "controller_epoch": reg.state.controller_epoch}
                           for (topic, partition), reg in sorted(description.partitions.items())],
            "topic_ids": dict(description.topic_ids)}


def cluster_of(result: msgspec.Raw) -> ClusterDescription:
    """The ClusterDescription an answer's result holds."""
    decoded: _Cluster = messages.decode_result(result, _Cluster)
    return ClusterDescription(decoded.controller_epoch, tuple(decoded.nodes), {
        (p.topic, p.partition): PartitionRegistration(
            PartitionAssignment(p.replicas, p.target),
            LeaderAndIsr(p.leader, p.leader_epoch, p.isr, p.partition_epoch, p.controller_epoch))
        for p in decoded.partitions}, decoded.topic_ids)
