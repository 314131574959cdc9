"""`Fabric`: the handle `fabric.connect()` returns: topic admin, group admin, producers and consumers."""
from __future__ import annotations

import logging
import re
import time
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Iterable, Mapping, Sequence, cast, overload

import pyarrow as pa

from fabric.client import hanging_transactions, kafka_admin
from fabric.client.cluster import Cluster
from fabric.client.consumer import Consumer
from fabric.client.hanging_transactions import HangingTransaction
from fabric.client.kafka_admin import NewPartitions, NewTopic, OffsetSpec
from fabric.client.producer import Producer
from fabric.client.topic_partition import TopicPartition as NamedPartition
from fabric.common import checks
from fabric.common.config import (
    INT_MAX,
    LONG_MAX,
    merged_client_config,
    validate_topic_config,
    validate_topic_config_changes,
)
from fabric.common.errors import (
    GroupIdNotFoundError,
    InvalidArgumentError,
    InvalidConfigError,
    RequestTimedOutError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from fabric.common.names import INTERNAL_TOPICS, validate_group, validate_new_topic, validate_topic
from fabric.common.records import validate_value_schema
from fabric.common.types import (
    LeaderAndIsr,
    MemberDescription,
    NodeInfo,
    PartitionRegistration,
    PartitionState,
    ProducerState,
    TopicInfo,
    TopicPartition,
    TopicRecovery,
    TransactionRecord,
)
from fabric.coordinator.transaction_timeouts import MAX_TIMEOUT_MS
from fabric.storage.cleaner import CleanReport

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class TopicDescription:
    """What `describe_topic` returns: per-partition offsets and sizes, effective config, value schema."""

    name: str
    partitions: list[PartitionState]
    config: dict[str, str]
    overrides: dict[str, str]
    value_schema: pa.Schema | None


@dataclass(frozen=True)
class GroupOffset:
    """One row of `describe_group`: a partition's committed offset, end offset (-1 while the partition is
    offline) and lag (None while unknown), and the live member that owns it in the group's current generation
    (None if no member does)."""

    topic: str
    partition: int
    committed: int | None
    end_offset: int
    lag: int | None
    member_id: str | None = None
    client_id: str | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """What `describe_consumer_group` returns (Kafka's ConsumerGroupDescription plus the offsets): the group's
    state, generation, assignor (protocol), live members with their assignments, and the per-partition rows."""

    group: str
    state: str
    generation: int
    protocol: str
    members: tuple[MemberDescription, ...]
    offsets: list[GroupOffset]


class OffsetResetPlan(dict[TopicPartition, int]):
    """What `reset_offsets` returns: the new offset of each partition (keys are fabric.TopicPartition).
    `clamped` maps each partition whose requested offset was outside [log start, log end] (and so was moved to
    the nearer one, as Kafka's tool does) to the offset requested."""

    def __init__(self) -> None:
        super().__init__()
        self.clamped: dict[TopicPartition, int] = {}


# Java's Duration.parse format, as kafka-consumer-groups --by-duration takes it: PnDTnHnMn.nS.
DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:[.,]\d{1,9})?)S)?)?", re.IGNORECASE)


class Fabric:
    """A connection to one fabric (embedded directory or remote service)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @property
    def url(self) -> str:
        return self.cluster.url

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None,
                     schema: pa.Schema | None = None, replication_factor: int | None = None,
                     exist_ok: bool = False) -> TopicInfo:
        """Create a topic; `schema` makes it a typed topic whose values are stored as Arrow columns;
        `replication_factor` places its partitions on data nodes (a cluster with nodes only), without it each
        partition lives in the fabric's one directory. With `exist_ok` (kafka-topics --if-not-exists) an existing
        topic of that name is returned as it is instead of TopicExistsError; where it differs from what was asked
        (partition count, configs, schema) it is left unchanged, as Kafka's tools skip it, and the differences
        are logged at WARNING."""
        partitions, config, factor = self.check_new_topic(name, partitions, config, schema, replication_factor)
        try:
            if factor is None:
                return self.cluster.create_topic(name, partitions, config, schema)
            return self.cluster.create_replicated_topic(name, partitions, factor, config, schema)
        except TopicExistsError:
            if not exist_ok or name not in self.topic_names():
                raise  # (a directory without metadata is no topic to return: its error says how to recover it)
        existing = self.cluster.coordinator.topic(name)
        differences = _differences(existing, partitions, config, schema)
        if differences:
            log.warning("topic %s already exists and differs from what was asked (%s); it is left as it is "
                        "(exist_ok): change it with alter_topic_config / create_partitions", name,
                        "; ".join(differences))
        return existing

    @staticmethod
    def check_new_topic(name: str, partitions: int = 1, config: Mapping[str, Any] | None = None,
                        schema: pa.Schema | None = None, replication_factor: int | None = None
                        ) -> tuple[int, dict[str, str], int | None]:
        """The checks create_topic makes before it asks anything of the fabric (a Kafka validate_only create):
        the partition count, configs and replication factor checked, else the error naming the problem."""
        validate_new_topic(name)
        if schema is not None:
            validate_value_schema(schema)
        factor = None if replication_factor is None else checks.integer(replication_factor, "replication_factor", 1,
                                                                        INT_MAX)
        return checks.partition_count(partitions), validate_topic_config(config), factor

    def create_topics(self, new_topics: Iterable[NewTopic], timeout_ms: int | None = None, validate_only: bool = False,
                      operation_timeout: float | None = None, request_timeout: float | None = None
                      ) -> dict[str, Future]:
        """Kafka's createTopics as kafka-python and confluent-kafka take it: `[NewTopic("orders", 3, 1)]`; a dict
        of a done future per topic (fabric.client.kafka_admin)."""
        return kafka_admin.create_topics(self, new_topics, validate_only)

    def list_offsets(self, topic_partition_offsets: Mapping[tuple[str, int], OffsetSpec],
                     request_timeout: float | None = None) -> dict[NamedPartition, Future]:
        """Kafka's listOffsets as confluent-kafka takes it: `{TopicPartition("orders", 0): OffsetSpec.latest()}`;
        a dict of a done future per partition, of a ListOffsetsResultInfo (fabric.client.kafka_admin)."""
        return kafka_admin.list_offsets(self, topic_partition_offsets)

    def delete_topics(self, topics: Iterable[str], timeout_ms: int | None = None,
                      operation_timeout: float | None = None, request_timeout: float | None = None
                      ) -> dict[str, Future]:
        """Kafka's deleteTopics as kafka-python and confluent-kafka take it: a list of names; a dict of a done
        future per topic (fabric.client.kafka_admin)."""
        return kafka_admin.delete_topics(self, topics)

    def delete_topic(self, name: str) -> None:
        self.cluster.delete_topic(validate_topic(name))

    def list_topics(self) -> list[str]:
        """The topics, without the fabric's internal ones (Kafka's listTopics; describe_topic shows those)."""
        return self.topic_names()

    def topic_names(self) -> list[str]:
        """What list_topics answers here, by a name that confluent-kafka's AdminClient, whose list_topics answers
        cluster metadata, keeps meaning this."""
        return [t for t in self.cluster.coordinator.list_topics() if t not in INTERNAL_TOPICS]

    @overload
    def describe_topic(self, name: str) -> TopicDescription: ...

    @overload
    def describe_topic(self, name: None = None) -> dict[str, TopicDescription]: ...

    def describe_topic(self, name: str | None = None) -> TopicDescription | dict[str, TopicDescription]:
        """One topic's description; without a name, every topic list_topics lists (the internal ones left out), by
        name in its order (a dict, as Kafka's Admin.describeTopics(...).allTopicNames() answers; a topic deleted
        meanwhile is left out)."""
        if name is None:
            described = {}
            for topic in self.topic_names():
                try:
                    described[topic] = self._describe(topic)
                except UnknownTopicError:
                    continue
            return described
        return self._describe(validate_topic(name))

    def _describe(self, name: str) -> TopicDescription:
        info = self.cluster.coordinator.topic(name)
        states = [self.cluster.describe_partition(name, p) for p in range(info.partitions)]
        return TopicDescription(name, states, info.settings.effective(), dict(info.config),
                                info.value_schema)

    def list_nodes(self) -> list[NodeInfo]:
        """The data nodes (id, address, rack, node epoch, alive); none outside a cluster with data nodes."""
        return self.cluster.nodes()

    def elect_leaders(self, election: str = "preferred", partitions: Sequence[TopicPartition] | None = None
                      ) -> dict[TopicPartition, LeaderAndIsr]:
        """Kafka's leader election: "preferred" moves leadership back to each partition's first replica where it
        is alive and in sync; "unclean" elects an out-of-sync replica for offline partitions of topics with
        unclean.leader.election.enable=true (records may be lost). Of `partitions`, or every replicated one;
        returns the new state of each partition whose leader changed."""
        chosen = checks.topic_partitions(partitions, "partitions") if partitions is not None else []
        return self.cluster.elect_leaders(election, chosen)

    def reassign_partition(self, topic: str, partition: int, replicas: Sequence[int]) -> PartitionRegistration:
        """Move a replicated partition to the nodes `replicas` (the first its preferred leader), as Kafka's
        kafka-reassign-partitions --execute: the new replicas copy the log and join the ISR, then the old ones
        leave (and delete their copy). Returns the partition's registration once started; its assignment's
        `target` is set until the move is done (`partition_assignment` shows it)."""
        nodes = [checks.integer(r, "replicas[]", 0, INT_MAX) for r in replicas]
        return self.cluster.reassign_partition(validate_topic(topic), checks.integer(partition, "partition", 0,
                                                                                      INT_MAX), nodes)

    def partition_assignment(self, topic: str, partition: int) -> PartitionRegistration | None:
        """The controller's assignment and state of a replicated partition (None for one that is not)."""
        return self.cluster.describe_cluster(refresh=True).partitions.get((validate_topic(topic), partition))

    def alter_topic_config(self, name: str, config: Mapping[str, Any]) -> TopicInfo:
        """Set config overrides; a value of None removes the override (back to the default)."""
        changes = validate_topic_config_changes(config)
        return self.cluster.coordinator.alter_topic_config(validate_topic(name), changes)

    @overload
    def create_partitions(self, name: str, total: int) -> TopicInfo: ...

    @overload
    def create_partitions(self, name: Mapping[str, NewPartitions] | Iterable[NewPartitions], total: None = None,
                          timeout_ms: int | None = None, operation_timeout: float | None = None,
                          request_timeout: float | None = None, validate_only: bool = False
                          ) -> dict[str, Future]: ...

    def create_partitions(self, name: str | Mapping[str, NewPartitions] | Iterable[NewPartitions],
                          total: int | None = None, timeout_ms: int | None = None,
                          operation_timeout: float | None = None, request_timeout: float | None = None,
                          validate_only: bool = False) -> TopicInfo | dict[str, Future]:
        """Grow topic `name` to `total` partitions (never shrinks; existing data stays put). Kafka's forms too:
        `{"orders": NewPartitions(6)}` (kafka-python) or `[NewPartitions("orders", 6)]` (confluent-kafka), answered
        with a dict of a done future per topic (fabric.client.kafka_admin), `validate_only` checking only."""
        if not isinstance(name, str):
            return kafka_admin.create_partitions(self, name, validate_only)
        return self.cluster.create_partitions(validate_topic(name), checks.partition_count(total))

    def recover_topics(self, *names: str) -> list[TopicRecovery]:
        """Register topic directories the metadata does not know (e.g. after `__fabric/metadata.db` was lost)
        from their data: partition count and value schema; configs were lost and are back to the defaults.
        Without names, every such directory. Returns what was done with each (`fabric topics recover`)."""
        return self.cluster.recover_topics([validate_topic(n) for n in names] if names else None)

    def enforce_retention(self, name: str) -> int:
        """Apply the topic's retention now (`fabric topics retain`); returns how many segments were deleted."""
        return self.cluster.enforce_retention(validate_topic(name))

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Kafka's Admin.deleteRecords (`fabric topics delete-records`): delete the records of the partition
        below `before_offset` (-1: the high watermark, every record). Its log start offset moves there at once,
        so readers get OffsetOutOfRangeError below it (a consumer resets by auto.offset.reset), and the whole
        segments below it are deleted. Returns the new log start offset (the low watermark); an offset at or
        below the current start changes nothing. OffsetOutOfRangeError past the high watermark;
        InvalidConfigError on a topic with cleanup.policy=compact (as Kafka: allow it with compact,delete);
        InvalidRequestError for a replicated topic (not built yet)."""
        return self.cluster.delete_records(validate_topic(topic), checks.integer(partition, "partition", 0, INT_MAX),
                                           checks.integer(before_offset, "before_offset", -1, LONG_MAX))

    def compact_topic(self, name: str) -> list[CleanReport]:
        """Compact a topic now (`fabric topics compact`): roll each partition's active segment and clean every
        closed segment the cleaner may (below the high watermark, open transactions and min.compaction.lag.ms),
        whatever min.cleanable.dirty.ratio says. Returns a report per partition: segments and bytes before and
        after, records and tombstones removed, or why nothing was cleaned. A replicated topic is cleaned at each
        partition's leader node, below its high watermark; the followers clean their own copies in the
        background. InvalidConfigError, naming the fix, for a topic that is not compacted (cleanup.policy=delete)."""
        return self.cluster.compact_topic(validate_topic(name))

    # -- clients -----------------------------------------------------------------------------------
    def producer(self, conf: Mapping[str, Any] | None = None, **config: Any) -> Producer:
        """A producer; its config as keywords (`linger_ms=5`) or, as confluent-kafka takes it, a dict of Kafka's
        names (`{"linger.ms": 5}`), or both."""
        return Producer(self.cluster, **merged_client_config("producer", conf, config))

    def consumer(self, *topics: str | Mapping[str, Any], group_id: str | None = None, **config: Any) -> Consumer:
        """A consumer of `topics` (or none: subscribe or assign later); its config as keywords or, first of
        all, as confluent-kafka takes it, a dict of Kafka's names (`{"group.id": "g", "auto.offset.reset":
        "earliest"}`)."""
        conf = topics[0] if topics and isinstance(topics[0], Mapping) else None
        names = cast("tuple[str, ...]", topics[1:] if conf is not None else topics)  # (the consumer checks each)
        return Consumer(self.cluster, *names, group_id=group_id, **merged_client_config("consumer", conf, config))

    # -- groups ------------------------------------------------------------------------------------
    def list_groups(self) -> list[str]:
        return self.cluster.coordinator.list_groups()

    def describe_group(self, group: str) -> list[GroupOffset]:
        """Per partition of every topic the group committed in or is assigned: committed offset, end offset,
        lag and owning member (describe_consumer_group adds the group's state and members)."""
        return self.describe_consumer_group(group).offsets

    def describe_consumer_group(self, group: str) -> ConsumerGroupDescription:
        """The group's state, generation, assignor and members, and a GroupOffset row per partition of every
        topic it committed in or its members are assigned (what `fabric groups describe` prints)."""
        coordinator = self.cluster.coordinator
        live = coordinator.describe_group(validate_group(group))
        committed = coordinator.committed(group)
        owners = {tp: m for m in live.members for tp in m.assignment}
        rows = []
        for topic in sorted({t for t, _ in committed} | {t for t, _ in owners}):
            try:
                partitions = coordinator.topic(topic).partitions
            except UnknownTopicError:
                continue  # deleted since: nothing to show
            for p in range(partitions):
                end = self.cluster.describe_partition(topic, p).end_offset  # -1 while offline
                c, m = committed.get((topic, p)), owners.get((topic, p))
                rows.append(GroupOffset(topic, p, c.offset if c else None, end,
                                        end - c.offset if c and end >= 0 else None,
                                        m.member_id if m else None, m.client_id if m else None,
                                        (m.group_instance_id or None) if m else None))
        return ConsumerGroupDescription(group, live.state, live.generation, live.protocol, live.members, rows)

    def delete_group(self, group: str) -> None:
        """Delete a consumer group, its committed offsets and state (Kafka's deleteConsumerGroups):
        GroupNotEmptyError while it has live members, GroupIdNotFoundError if there is no such group."""
        if validate_group(group) not in self.list_groups():
            raise GroupIdNotFoundError(f"consumer group {group!r} does not exist (no committed offsets and no live "
                                       "members); `fabric groups list` or list_groups() names the groups")
        self.cluster.coordinator.delete_group(group)

    def delete_offsets(self, group: str, topics: str | Sequence[str | TopicPartition]) -> list[TopicPartition]:
        """Delete a group's committed offsets of `topics` (a topic name, or a list of topic names, every partition,
        and (topic, partition) pairs), as kafka-consumer-groups --delete-offsets and Kafka's
        deleteConsumerGroupOffsets (KIP-496): GroupIdNotFoundError for an unknown group, GroupSubscribedToTopicError
        while a live member subscribes to one of the topics (nothing deleted). The partitions whose offsets were
        deleted: those the group had committed."""
        return self.cluster.coordinator.delete_offsets(validate_group(group), self._named_partitions(topics))

    # -- transactions (kafka-transactions) ----------------------------------------------------------
    def list_transactions(self) -> list[TransactionRecord]:
        """The record of every transactional id (its latest transaction's `state`, writers and decision)."""
        return [self.describe_transaction(t) for t in self.cluster.coordinator.list_transactions()]

    def describe_transaction(self, transactional_id: str) -> TransactionRecord:
        return self.cluster.coordinator.transaction_record(transactional_id)

    def abort_transaction(self, transactional_id: str, timeout_s: float = 60.0) -> TransactionRecord:
        """Abort the writers of the id's open transaction now, as its transaction.timeout.ms would, and wait up to
        `timeout_s` until the coordinator has written their abort markers (so read_committed readers move on);
        the record then. The transaction stays undecided: a Spark batch replayed still commits it.
        RequestTimedOutError if the markers are not written in time (the coordinator keeps retrying them)."""
        record = self.cluster.coordinator.abort_transaction_writers(transactional_id)
        deadline = time.monotonic() + timeout_s
        while record.aborted:
            if time.monotonic() > deadline:
                raise RequestTimedOutError(
                    f"the abort markers of transactional id {transactional_id}'s writers are not all written after "
                    f"{timeout_s:g} s (a partition without a leader?); the coordinator keeps writing them: "
                    "`fabric transactions describe` shows when they are")
            time.sleep(0.1)
            record = self.describe_transaction(transactional_id)
        return record

    def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        """kafka-transactions describe-producers and Kafka's describeProducers: the idempotent and transactional
        producers of a replicated partition, at its leader, each with its epoch, last sequence and last timestamp,
        and where its open transaction starts (-1: none). Needs read on the topic."""
        tp = checks.topic_partition((topic, partition), "describe_producers")
        self._check_partitions([tp])
        return self.cluster.describe_producers(*tp)

    def find_hanging_transactions(self, node_id: int | None = None, topic: str | None = None,
                                  partition: int | None = None, max_timeout_ms: int = MAX_TIMEOUT_MS
                                  ) -> list[HangingTransaction]:
        """kafka-transactions find-hanging: the transactions open on the partitions node `node_id` leads, or on
        `topic` (its `partition` only, if given), or on every replicated partition, that the coordinator does not
        know or decided more than `max_timeout_ms` ago (fabric.client.hanging_transactions). Needs read on the
        topics and describe on every transactional id."""
        if topic is not None:
            self.cluster.coordinator.topic(topic)  # UnknownTopicError for a topic that does not exist
        partitions = sorted(tp for tp, registration in self.cluster.describe_cluster(refresh=True).partitions.items()
                            if node_id in (None, registration.state.leader) and topic in (None, tp[0])
                            and partition in (None, tp[1]))
        return hanging_transactions.find_hanging(self.cluster, partitions, max_timeout_ms)

    def abort_hanging_transaction(self, topic: str, partition: int, start_offset: int) -> HangingTransaction:
        """kafka-transactions abort --start-offset: an abort marker for the transaction open on `topic`-`partition`
        from `start_offset`, if it hangs (fabric.client.hanging_transactions); needs cluster_action on the
        cluster."""
        return hanging_transactions.abort_hanging(self.cluster, topic, partition, start_offset)

    def reset_offsets(self, group: str, topics: str | Sequence[str | TopicPartition] | None = None, *,
                      to_earliest: bool = False, to_latest: bool = False, to_offset: int | None = None,
                      to_datetime: datetime | str | None = None, to_current: bool = False,
                      shift_by: int | None = None, by_duration: timedelta | str | None = None,
                      to_offsets: Mapping[TopicPartition, int] | None = None,
                      execute: bool = False) -> OffsetResetPlan:
        """Compute (and with execute=True, commit) new offsets for a group, as kafka-consumer-groups
        --reset-offsets does, of `topics`: a topic name, or a list of topic names (every partition) and
        (topic, partition) pairs; None is every partition the group has committed offsets for (--all-topics).
        Exactly one target: to_earliest, to_latest, to_offset, to_datetime, to_current (the committed offset,
        else the log end), shift_by (the committed offset plus N), by_duration (the first record at or after
        now minus an ISO 8601 duration such as "P1DT2H" or a timedelta) or to_offsets ({(topic, partition):
        offset}, its partitions the ones reset; `topics` then stays None). Offsets outside [log start, log end]
        are clamped to it (listed in the plan's `clamped`)."""
        chosen = [to_earliest, to_latest, to_offset is not None, to_datetime is not None, to_current,
                  shift_by is not None, by_duration is not None, to_offsets is not None]
        if sum(chosen) != 1:
            raise InvalidConfigError("choose exactly one of to_earliest, to_latest, to_offset, to_datetime, "
                                     "to_current, shift_by, by_duration, to_offsets")
        validate_group(group)
        if to_offset is not None:
            to_offset = checks.offset(to_offset, "to_offset")
        if shift_by is not None:
            shift_by = checks.integer(shift_by, "shift_by", -checks.LONG_MAX, checks.LONG_MAX)
        if by_duration is not None:
            try:
                to_datetime = datetime.now().astimezone() - _duration(by_duration)
            except OverflowError:  # longer ago than datetime reaches: before the first record
                to_datetime = datetime.fromtimestamp(0).astimezone()
        since_us = None if to_datetime is None else _epoch_us(to_datetime)
        committed = {tp: c.offset for tp, c in self.cluster.coordinator.committed(group).items()}
        if to_offsets is not None:
            if topics is not None:
                raise InvalidConfigError("to_offsets names the partitions to reset; leave topics out")
            requested = checks.by_partition(to_offsets, "to_offsets", checks.offset)
            self._check_partitions(requested)
        else:
            requested = {tp: 0 for tp in self._reset_partitions(group, topics, committed)}
        plan = OffsetResetPlan()
        for tp in sorted(requested):
            state = self.cluster.partition_state(*tp)
            if to_earliest:
                target = state.start_offset
            elif to_latest:
                target = state.end_offset
            elif to_offset is not None:
                target = to_offset
            elif to_current:
                target = committed.get(tp, state.end_offset)
            elif shift_by is not None:
                if tp not in committed:
                    raise InvalidConfigError(f"cannot shift {tp[0]}-{tp[1]}: group {group!r} has no committed "
                                             "offset there; reset it another way first (e.g. to the earliest offset)")
                target = committed[tp] + shift_by
            elif since_us is not None:
                found = self.cluster.offset_for_time(*tp, since_us)
                target = state.end_offset if found is None else found
            else:
                target = requested[tp]
            named = NamedPartition(*tp)
            plan[named] = min(max(target, state.start_offset), state.end_offset)
            if plan[named] != target:
                plan.clamped[named] = target
        if execute:
            self.cluster.commit_offsets(group, dict(plan))
        return plan

    def _reset_partitions(self, group: str, topics: str | Sequence[str | TopicPartition] | None,
                          committed: Mapping[TopicPartition, int]) -> list[TopicPartition]:
        """The partitions reset_offsets moves: every partition of each named topic, each named pair, or (None)
        every partition the group has committed offsets for."""
        if topics is None:
            if not committed:
                raise InvalidConfigError(f"group {group!r} has no committed offsets, so there are no topics of "
                                         "its own to reset; name the topics")
            return sorted(committed)
        return self._named_partitions(topics)

    def _named_partitions(self, topics: str | Sequence[str | TopicPartition]) -> list[TopicPartition]:
        """Every partition of each topic named in `topics`, and each (topic, partition) pair in it, checked to
        exist."""
        out: list[TopicPartition] = []
        for item in [topics] if isinstance(topics, str) else topics:
            if isinstance(item, str):
                out += [(item, p) for p in range(self.cluster.coordinator.topic(validate_topic(item)).partitions)]
            else:
                out.append(checks.topic_partition(item, "topics[]"))
        self._check_partitions(out)
        return out

    def _check_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for topic, p in partitions:
            count = self.cluster.coordinator.topic(topic).partitions
            if not 0 <= p < count:
                raise UnknownPartitionError(f"topic {topic!r} has partitions 0..{count - 1}; there is no "
                                            f"partition {p}")

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _epoch_us(when: datetime | str) -> int:
    """reset_offsets' to_datetime (a datetime, or ISO 8601 text; no zone means local time) in µs since the
    epoch; an instant before 1970 is 0 (the earliest record)."""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            raise InvalidConfigError(
                f"--to-datetime {when!r} is not ISO 8601; use e.g. 2026-01-31T12:00:00+00:00") from None
    if not isinstance(when, datetime):
        raise InvalidArgumentError(
            f"to_datetime must be a datetime or ISO 8601 text, got {type(when).__name__}; "
            "e.g. '2026-01-31T12:00:00+00:00'")
    try:
        return max(int(when.timestamp() * 1_000_000), 0)
    except (OverflowError, ValueError, OSError):
        raise InvalidArgumentError(
            f"to_datetime {when.isoformat()} is out of range; use a date from 1970 on") from None


def _differences(existing: TopicInfo, partitions: int, config: Mapping[str, str], schema: pa.Schema | None
                 ) -> list[str]:
    """How an existing topic differs from the one create_topic was asked for (empty: it is the same)."""
    out = []
    if existing.partitions != partitions:
        out.append(f"{existing.partitions} partitions, not {partitions}")
    changed = sorted(k for k in set(config) | set(existing.config) if config.get(k) != existing.config.get(k))
    if changed:
        out.append(f"config overrides {', '.join(changed)} differ")
    if (schema is None) != (existing.value_schema is None) or (
            schema is not None and existing.value_schema is not None and not schema.equals(existing.value_schema)):
        out.append("its value schema differs")
    return out


def _duration(duration: timedelta | str) -> timedelta:
    """reset_offsets' by_duration: a timedelta, or ISO 8601 text as Java's Duration.parse takes it (PnDTnHnMn.nS,
    as kafka-consumer-groups --by-duration)."""
    if isinstance(duration, timedelta):
        return duration
    match = DURATION.fullmatch(duration.strip()) if isinstance(duration, str) else None
    if match is None or not any(match.groups()):
        raise InvalidConfigError(f"--by-duration {duration!r} is not an ISO 8601 duration PnDTnHnMnS; use e.g. "
                                 "PT30M (30 minutes), PT1H30M or P2DT12H")
    days, hours, minutes, seconds = (float((g or "0").replace(",", ".")) for g in match.groups())
    try:
        return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        return timedelta.max
