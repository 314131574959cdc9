"""Kafka's consumer group admin calls in the shapes of kafka-python's KafkaAdminClient and confluent-kafka's
AdminClient, over the fabric's own (Fabric.list_groups, describe_consumer_group, delete_group, the group's
committed offsets, a commit of chosen offsets):

- kafka-python answers at once: `list_consumer_groups()` a list of (group id, protocol type: "consumer" for a
  group whose members joined with the consumer protocol, "" for one with committed offsets only),
  `describe_consumer_groups(ids)` a list of GroupInformation, `list_consumer_group_offsets(id)`
  {TopicPartition: OffsetAndMetadata}, `delete_consumer_groups(ids)` a list of (group id, its error or None);
- confluent-kafka answers futures, already done: `list_consumer_groups(states=...)` one of a
  ListConsumerGroupsResult, and one per group of `describe_consumer_groups(ids)` (a ConsumerGroupDescription),
  `list_consumer_group_offsets([ConsumerGroupTopicPartitions(id)])` and `alter_consumer_group_offsets(...)` (the
  group's ConsumerGroupTopicPartitions with offsets) and `delete_consumer_groups(ids)` (None).

Offsets are altered as Kafka alters them: a commit outside any generation, which the coordinator refuses while the
group has live members, and which is checked as every commit is (an offset past the log of a partition the fabric
keeps in its own directory is refused; a replicated partition's is taken, as Kafka takes it).
"""
from __future__ import annotations

import enum
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, cast

from fabric.client.kafka_admin import done_future, listed
from fabric.client.topic_partition import TopicPartition
from fabric.common import checks
from fabric.common.errors import FabricError, InvalidArgumentError
from fabric.common.names import validate_group
from fabric.common.types import GroupDescription as LiveGroup
from fabric.common.types import GroupStatus, MemberDescription

if TYPE_CHECKING:
    from fabric.client.admin import Fabric

CONSUMER_PROTOCOL = "consumer"
NO_OFFSET = -1  # an offset a group has not committed, as both clients answer it


# -- kafka-python's shapes -------------------------------------------------------------------------------------
class OffsetAndMetadata(NamedTuple):
    """A committed offset (kafka-python's): the next offset to read, its metadata, and the leader epoch (-1)."""

    offset: int
    metadata: str
    leader_epoch: int = -1


class MemberAssignment(NamedTuple):
    """kafka-python's ConsumerProtocolMemberAssignment: [(topic, [partitions])] a member owns."""

    version: int
    assignment: list[tuple[str, list[int]]]
    user_data: bytes = b""

    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for topic, numbers in self.assignment for p in numbers]


class MemberInformation(NamedTuple):
    """One member, as kafka-python's describe_consumer_groups names it (no host or subscription is kept)."""

    member_id: str
    client_id: str
    client_host: str
    member_metadata: Any
    member_assignment: MemberAssignment


class GroupInformation(NamedTuple):
    """One group, as kafka-python's describe_consumer_groups answers it (error_code 0: described)."""

    error_code: int
    group: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberInformation]
    authorized_operations: Any = None


def python_list_groups(fab: Fabric) -> list[tuple[str, str]]:
    """kafka-python's list_consumer_groups: (group id, protocol type) of every group."""
    return [(group, _protocol_type(_live(fab, group))) for group in fab.list_groups()]


def python_describe_groups(fab: Fabric, group_ids: Iterable[str]) -> list[GroupInformation]:
    """kafka-python's describe_consumer_groups: each group's state, assignor and members."""
    out = []
    for group in listed(group_ids, str, "describe_consumer_groups", "['billing']"):
        described = _live(fab, group)
        members = [MemberInformation(m.member_id, m.client_id, "", None, MemberAssignment(0, _by_topic(m)))
                   for m in described.members]
        out.append(GroupInformation(0, group, GroupStatus(described.state).value, _protocol_type(described),
                                    described.protocol, members))
    return out


def python_group_offsets(fab: Fabric, group_id: str, partitions: Iterable[Any] | None = None
                         ) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets; of `partitions` only, where given (-1 for one without a commit)."""
    committed = fab.cluster.coordinator.committed(validate_group(group_id))
    wanted = sorted(committed) if partitions is None else checks.topic_partitions(partitions, "partitions")
    return {TopicPartition(*tp): OffsetAndMetadata(c.offset, c.metadata) if c is not None
            else OffsetAndMetadata(NO_OFFSET, "") for tp in wanted for c in (committed.get(tp),)}


def python_delete_groups(fab: Fabric, group_ids: Iterable[str]) -> list[tuple[str, FabricError | None]]:
    """kafka-python's delete_consumer_groups: each group deleted, or the error that kept it (the others go on)."""
    deleted = [(group, done_future(fab.delete_group, group).exception())
               for group in listed(group_ids, str, "delete_consumer_groups", "['billing']")]
    return cast("list[tuple[str, FabricError | None]]", deleted)  # (done_future keeps FabricErrors only)


# -- confluent-kafka's shapes ----------------------------------------------------------------------------------
class ConsumerGroupState(enum.Enum):
    """confluent-kafka's names of a group's states."""

    UNKNOWN = 0
    PREPARING_REBALANCING = 1
    COMPLETING_REBALANCING = 2
    STABLE = 3
    DEAD = 4
    EMPTY = 5


STATES = {GroupStatus.EMPTY: ConsumerGroupState.EMPTY, GroupStatus.STABLE: ConsumerGroupState.STABLE,
          GroupStatus.PREPARING_REBALANCE: ConsumerGroupState.PREPARING_REBALANCING,
          GroupStatus.COMPLETING_REBALANCE: ConsumerGroupState.COMPLETING_REBALANCING,
          GroupStatus.DEAD: ConsumerGroupState.DEAD}


class ConsumerGroupTopicPartitions:
    """A group and partitions of it (confluent-kafka's): what list_consumer_group_offsets and
    alter_consumer_group_offsets take (None: every partition it committed) and answer, with offsets."""

    def __init__(self, group_id: str, topic_partitions: list[TopicPartition] | None = None) -> None:
        self.group_id, self.topic_partitions = group_id, topic_partitions

    def __repr__(self) -> str:
        return f"ConsumerGroupTopicPartitions({self.group_id!r}, {self.topic_partitions!r})"


@dataclass(frozen=True)
class ConsumerGroupListing:
    group_id: str
    is_simple_consumer_group: bool
    state: ConsumerGroupState


@dataclass(frozen=True)
class ListConsumerGroupsResult:
    valid: list[ConsumerGroupListing] = field(default_factory=list)
    errors: list[FabricError] = field(default_factory=list)


@dataclass(frozen=True)
class MemberTopicPartitions:
    """confluent-kafka's MemberAssignment: the partitions a member owns."""

    topic_partitions: list[TopicPartition]


@dataclass(frozen=True)
class GroupMember:
    """confluent-kafka's MemberDescription (no host is kept)."""

    member_id: str
    client_id: str
    host: str
    assignment: MemberTopicPartitions
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupDescription:
    """confluent-kafka's ConsumerGroupDescription (the coordinator is the fabric's, which is no broker: None)."""

    group_id: str
    is_simple_consumer_group: bool
    members: list[GroupMember]
    partition_assignor: str
    state: ConsumerGroupState
    coordinator: Any = None


def confluent_list_groups(fab: Fabric, states: Iterable[ConsumerGroupState] | None = None) -> Future:
    """confluent-kafka's list_consumer_groups: a future of every group's listing (of those in `states`, if given)."""
    wanted = None if states is None else set(states)

    def listing() -> ListConsumerGroupsResult:
        valid = []
        for group in fab.list_groups():
            described = _live(fab, group)
            state = _state(described)
            if wanted is None or state in wanted:
                valid.append(ConsumerGroupListing(group, not _protocol_type(described), state))
        return ListConsumerGroupsResult(valid)
    return done_future(listing)


def confluent_describe_groups(fab: Fabric, group_ids: Iterable[str]) -> dict[str, Future]:
    """confluent-kafka's describe_consumer_groups: a future of each group's description."""
    def describe(group: str) -> GroupDescription:
        described = _live(fab, group)
        members = [GroupMember(m.member_id, m.client_id, "", MemberTopicPartitions(
            [TopicPartition(*tp) for tp in m.assignment]), m.group_instance_id or None) for m in described.members]
        return GroupDescription(group, not _protocol_type(described), members, described.protocol,
                                _state(described))
    return {group: done_future(describe, group)
            for group in listed(group_ids, str, "describe_consumer_groups", "['billing']")}


def confluent_group_offsets(fab: Fabric, requests: Iterable[ConsumerGroupTopicPartitions]) -> dict[str, Future]:
    """confluent-kafka's list_consumer_group_offsets: a future of each group's committed offsets."""
    def offsets(request: ConsumerGroupTopicPartitions) -> ConsumerGroupTopicPartitions:
        found = python_group_offsets(fab, request.group_id, request.topic_partitions)
        return ConsumerGroupTopicPartitions(request.group_id, [TopicPartition(tp.topic, tp.partition, o.offset)
                                                               for tp, o in found.items()])
    return {request.group_id: done_future(offsets, request) for request in _requests(requests, "list")}


def confluent_alter_offsets(fab: Fabric, requests: Iterable[ConsumerGroupTopicPartitions]) -> dict[str, Future]:
    """confluent-kafka's alter_consumer_group_offsets: each group's offsets committed outside any generation."""
    def alter(request: ConsumerGroupTopicPartitions) -> ConsumerGroupTopicPartitions:
        chosen = {}
        for tp in request.topic_partitions or []:
            topic, partition = checks.topic_partition(tp, "alter_consumer_group_offsets")
            offset = getattr(tp, "offset", None)
            if offset is None:
                raise InvalidArgumentError(f"alter_consumer_group_offsets takes each partition with its offset, "
                                           f"e.g. TopicPartition({topic!r}, {partition}, 42); {topic}-{partition} "
                                           "has none")
            chosen[(topic, partition)] = checks.offset(offset, f"the offset of {topic}-{partition}")
        if not chosen:
            raise InvalidArgumentError("alter_consumer_group_offsets takes the partitions to move with their offsets: "
                                       "ConsumerGroupTopicPartitions('billing', [TopicPartition('orders', 0, 42)])")
        fab.cluster.commit_offsets(validate_group(request.group_id), chosen)
        return ConsumerGroupTopicPartitions(request.group_id, [TopicPartition(t, p, o) for (t, p), o in chosen.items()])
    return {request.group_id: done_future(alter, request) for request in _requests(requests, "alter")}


def confluent_delete_offsets(fab: Fabric, requests: Iterable[ConsumerGroupTopicPartitions]) -> dict[str, Future]:
    """confluent-kafka's delete_consumer_group_offsets: a future of each group's named partitions once their
    committed offsets are deleted (refused while a live member subscribes to one of their topics)."""
    def delete(request: ConsumerGroupTopicPartitions) -> ConsumerGroupTopicPartitions:
        named = [TopicPartition(*checks.topic_partition(tp, "delete_consumer_group_offsets"))
                 for tp in request.topic_partitions or []]
        if not named:
            raise InvalidArgumentError("delete_consumer_group_offsets takes the partitions whose offsets to delete: "
                                       "ConsumerGroupTopicPartitions('billing', [TopicPartition('orders', 0)])")
        fab.delete_offsets(request.group_id, named)
        return ConsumerGroupTopicPartitions(request.group_id, named)
    return {request.group_id: done_future(delete, request) for request in _requests(requests, "delete")}


def confluent_delete_groups(fab: Fabric, group_ids: Iterable[str]) -> dict[str, Future]:
    """confluent-kafka's delete_consumer_groups: a future of each group's deletion."""
    return {group: done_future(fab.delete_group, group)
            for group in listed(group_ids, str, "delete_consumer_groups", "['billing']")}


# -- shared ----------------------------------------------------------------------------------------------------
def _live(fab: Fabric, group: str) -> LiveGroup:
    """The group's state, assignor and members as its coordinator has them (no offsets read)."""
    return fab.cluster.coordinator.describe_group(validate_group(group))


def _state(described: LiveGroup) -> ConsumerGroupState:
    """The group's state by confluent-kafka's name."""
    return STATES.get(GroupStatus(described.state), ConsumerGroupState.UNKNOWN)


def _protocol_type(described: LiveGroup) -> str:
    """"consumer" for a group whose members joined (or join) with an assignor; "" for one with offsets only."""
    return CONSUMER_PROTOCOL if described.protocol or described.members else ""


def _by_topic(member: MemberDescription) -> list[tuple[str, list[int]]]:
    """A member's partitions as kafka-python's assignment lists them: [(topic, [partitions])]."""
    topics: dict[str, list[int]] = {}
    for topic, partition in member.assignment:
        topics.setdefault(topic, []).append(partition)
    return sorted(topics.items())


def _requests(requests: Iterable[ConsumerGroupTopicPartitions], verb: str) -> list[ConsumerGroupTopicPartitions]:
    """An offsets call's requests: a list of ConsumerGroupTopicPartitions."""
    return listed(requests, ConsumerGroupTopicPartitions, f"{verb}_consumer_group_offsets",
                  "[ConsumerGroupTopicPartitions('billing')]")
