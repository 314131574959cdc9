"""Leader elections as Kafka's two Python clients ask for them, over the fabric's own (Fabric.elect_leaders, which
answers the partitions whose leader changed), each partition answered with its outcome:

- confluent-kafka's `AdminClient.elect_leaders(ElectionType.PREFERRED, [TopicPartition("orders", 0)])`: a done
  future of {TopicPartition: None (elected) or the error that kept it}; without partitions, every replicated
  partition, listing those elected (and those that failed) but not those that needed no election, as Kafka does;
- kafka-python's `KafkaAdminClient.perform_leader_election(0, {"orders": [0]})` (0 preferred, 1 unclean; its
  partitions a {topic: [ids]} dict, a list of topics, or None for every replicated partition): an
  ElectLeadersResponse, its `replica_election_results` rows (topic, [(partition, error_code, error_message)]),
  raising a partition's error other than ElectionNotNeededError unless `raise_errors=False`, as kafka-python does.

A partition named but not elected answers ElectionNotNeededError (its preferred replica leads already; for an
unclean election, it has a leader), PreferredLeaderNotAvailableError (that replica is down or out of sync) or
EligibleLeadersNotAvailableError (no live replica). A whole request the fabric refuses (a fabric without data
nodes, a partition that is not replicated, an unclean election on a topic that does not enable it) raises, or
fails confluent-kafka's future.
"""
from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple

from fabric.client import partition_args
from fabric.client.kafka_admin import done_future
from fabric.client.kafka_python_admin import error_code
from fabric.client.topic_partition import TopicPartition
from fabric.common import checks
from fabric.common.config import INT_MAX
from fabric.common.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FabricError,
    InvalidArgumentError,
    PreferredLeaderNotAvailableError,
    UnknownPartitionError,
)
from fabric.common.names import validate_topic
from fabric.common.types import PartitionRegistration

if TYPE_CHECKING:
    from fabric.client.admin import Fabric

Outcomes = dict[TopicPartition, FabricError | None]


class ElectionType(enum.IntEnum):
    """Which replica an election makes the leader (confluent-kafka's enum; kafka-python passes the numbers):
    PREFERRED each partition's first replica, where it is alive and in sync; UNCLEAN a live replica outside the
    ISR of an offline partition whose topic enables unclean.leader.election.enable (records may be lost)."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectLeadersResponse(NamedTuple):
    """kafka-python's ElectLeadersResponse: rows (topic, [(partition, error_code, error_message)])."""

    throttle_time_ms: int
    error_code: int
    replica_election_results: list[tuple[str, list[tuple[int, int, str | None]]]]


def election_type(value: Any) -> ElectionType:
    """An election type as either client gives it: the enum, its number (0, 1) or its name."""
    try:
        if isinstance(value, str):
            return ElectionType[value.upper()]
        if not isinstance(value, bool) and isinstance(value, int):
            return ElectionType(value)
    except (KeyError, ValueError):
        pass
    raise InvalidArgumentError(f"an election type is ElectionType.PREFERRED (0) or ElectionType.UNCLEAN (1), got "
                               f"{checks.shown(value)}")


def outcomes(fab: Fabric, kind: ElectionType, partitions: list[TopicPartition] | None) -> Outcomes:
    """Each partition's election (None: every replicated one): None where its leader changed, else why not."""
    changed = fab.elect_leaders(kind.name.lower(), partitions)
    registrations = fab.cluster.describe_cluster(refresh=True).partitions
    chosen = partitions if partitions is not None else sorted({*registrations, *changed})
    return {TopicPartition(*tp): None if tp in changed else _not_elected(kind, tp, registrations.get(tp))
            for tp in chosen}


def confluent_elect_leaders(fab: Fabric, kind: Any, partitions: Iterable[Any] | None) -> Future:
    """confluent-kafka's elect_leaders, as the module says."""
    election = election_type(kind)
    chosen = None if partitions is None else partition_args.partition_list(partitions, "elect_leaders()")

    def elect() -> Outcomes:
        found = outcomes(fab, election, chosen)
        return found if chosen is not None else \
            {tp: error for tp, error in found.items() if not isinstance(error, ElectionNotNeededError)}
    return done_future(elect)


def python_perform_leader_election(fab: Fabric, kind: Any, topic_partitions: Mapping[str, Iterable[int]]
                                   | Iterable[str] | None, raise_errors: bool = True) -> ElectLeadersResponse:
    """kafka-python's perform_leader_election, as the module says."""
    election = election_type(kind)
    found = outcomes(fab, election, None if topic_partitions is None else _python_partitions(fab, topic_partitions))
    failed = [e for e in found.values() if e is not None and not isinstance(e, ElectionNotNeededError)]
    if raise_errors and failed:
        raise failed[0]
    rows: dict[str, list[tuple[int, int, str | None]]] = {}
    for tp, error in found.items():
        rows.setdefault(tp.topic, []).append((tp.partition, error_code(error), None if error is None else str(error)))
    return ElectLeadersResponse(0, 0, list(rows.items()))


def _python_partitions(fab: Fabric, given: Mapping[str, Iterable[int]] | Iterable[str]) -> list[TopicPartition]:
    """kafka-python's partitions: {topic: [partition ids]}, or a list of topics (every partition of each)."""
    if isinstance(given, Mapping):
        return [TopicPartition(validate_topic(topic), checks.integer(p, f"a partition of {topic!r}", 0, INT_MAX))
                for topic, numbers in given.items() for p in numbers]
    if isinstance(given, (str, bytes)) or not all(isinstance(t, str) for t in given):
        raise InvalidArgumentError("perform_leader_election takes its partitions as {'orders': [0, 1]}, a list of "
                                   f"topics or None (every replicated partition); got {checks.shown(given)}")
    return [TopicPartition(topic, p) for topic in given
            for p in range(fab.cluster.coordinator.topic(validate_topic(topic)).partitions)]


def _not_elected(kind: ElectionType, tp: tuple[str, int], registration: PartitionRegistration | None
                 ) -> FabricError:
    """Why a partition the election named kept its leader."""
    where = f"{tp[0]}-{tp[1]}"
    if registration is None:
        return UnknownPartitionError(f"{where} is not a replicated partition (deleted meanwhile?)")
    leader, isr = registration.state.leader, list(registration.state.isr)
    if kind is ElectionType.UNCLEAN:
        if leader is not None:
            return ElectionNotNeededError(f"{where} has a leader (node {leader}): an unclean election elects only "
                                          "offline partitions")
        return EligibleLeadersNotAvailableError(f"no live replica of {where} (replicas "
                                                f"{list(registration.assignment.replicas)}) can lead it; retry once "
                                                "one is back")
    preferred = registration.assignment.preferred_leader
    if leader == preferred:
        return ElectionNotNeededError(f"{where} is led by its preferred replica, node {preferred}, already")
    return PreferredLeaderNotAvailableError(f"the preferred replica of {where}, node {preferred}, is down or out of "
                                            f"sync (ISR {isr}); retry once it has caught up")
