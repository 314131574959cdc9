"""Value types every layer speaks: topics and partitions, committed offsets, group membership messages, and
what a fetch or a describe returns. Plain frozen dataclasses, so they cross processes (pickle) and the
service's wire format unchanged."""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from fabric.common.config import TopicConfig
from fabric.common.records import storage_schema

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TopicInfo:
    """A topic's metadata: partition count, config overrides, typed value schema (if any), and the id it was
    given when created (Kafka's topic id: a topic deleted and created again under its name is another topic;
    "" for topics stored before ids existed)."""

    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    value_schema: pa.Schema | None = None
    topic_id: str = ""

    @functools.cached_property
    def settings(self) -> TopicConfig:
        """The effective config (the overrides over Kafka's defaults), checked and parsed once per TopicInfo: a
        server keeps one per topic until its metadata changes, and reads a setting on every append."""
        return TopicConfig(self.config)

    @functools.cached_property
    def stored_schema(self) -> pa.Schema:
        """The schema its batches are stored with (records.storage_schema), built once per TopicInfo: an append
        checks its rows against it, and a typed topic's is a new nested schema each time it is built."""
        return storage_schema(self.value_schema)


@dataclass(frozen=True)
class CommittedOffset:
    """A group's committed position in one partition (the next offset to read)."""

    offset: int
    metadata: str = ""
    commit_ms: int = 0


class GroupStatus(str, enum.Enum):
    """The state of a consumer group, as Kafka's group coordinator names it.

    - EMPTY: no members (offsets may remain). -> PREPARING_REBALANCE when a member joins; -> DEAD when deleted.
    - PREPARING_REBALANCE: members must (re)join before the rebalance deadline. -> COMPLETING_REBALANCE once
      every member rejoined (or the deadline removed the rest); -> EMPTY when the last member left.
    - COMPLETING_REBALANCE: the generation and assignment are computed; members fetch them (sync).
      -> STABLE when all synced; -> PREPARING_REBALANCE when membership changes again (or a cooperative
      follow-up round is due).
    - STABLE: every member has its assignment. -> PREPARING_REBALANCE on any membership or metadata change.
    - DEAD: deleted; terminal (a store forgets a dead group).

    A str enum: it compares equal to, and serialises as, Kafka's state name ("Stable", ...).
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class JoinRequest:
    """A member asking to join (or rejoin) a group; member_id "" means a new member."""

    group: str
    member_id: str
    topics: tuple[str, ...]
    assignors: tuple[str, ...] = ("range",)
    group_instance_id: str = ""
    client_id: str = ""
    session_timeout_ms: int = 45000
    rebalance_timeout_ms: int = 300000
    owned: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class JoinResult:
    """The answer to a join: `ready` is False while the rebalance still waits for other members
    (the member asks again); once ready, the member syncs with `generation`."""

    member_id: str
    generation: int
    ready: bool
    leader: str = ""
    protocol: str = ""
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class SyncResult:
    """The member's assignment for the generation; `ready` is False until it is computed."""

    assignment: tuple[TopicPartition, ...]
    ready: bool = True


@dataclass(frozen=True)
class MemberDescription:
    """One live member of a group and the partitions it owns in the current generation."""

    member_id: str
    group_instance_id: str
    client_id: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class GroupDescription:
    """A group's state for `fabric groups describe`."""

    group: str
    state: GroupStatus
    generation: int
    protocol: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True)
class PartitionState:
    """What describe shows for one partition. A replicated partition also names its leader (None while
    offline: its offsets, segments and bytes are then -1, unknown), replicas, ISR and leader epoch; a partition
    of a single-directory topic has no replicas and leader epoch -1."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    segments: int
    size_bytes: int
    leader: int | None = None
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    leader_epoch: int = -1


@dataclass(frozen=True)
class Fetched:
    """A run of committed records: stored rows starting at `offset`. `message`: the uncompressed Arrow IPC message
    `batch` was decoded from, where the run is that stored frame's whole batch (a server sends it as it is stored
    instead of encoding the batch again)."""

    offset: int
    batch: pa.RecordBatch
    timestamp_type: int
    message: pa.Buffer | None = None


UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True)
class EpochEndOffset:
    """The answer to OffsetsForLeaderEpoch (KIP-101, KIP-279): the largest leader epoch a replica knows that is
    at most the one asked for, and the offset where that epoch's records end (a follower truncates to it).
    Both are UNDEFINED (-1) when the replica cannot answer (no epoch asked for, or none known)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True)
class ProducerBatch:
    """The producer fields of an idempotent append (KIP-98): the producer id and epoch the coordinator handed
    out, and the sequence of the batch's first record in its partition."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    # a transactional batch's check that its transaction was verified (KIP-890), run under the partition's lock
    # after the producer checks, before the batch is written (fabric.server.node.transaction_verification)
    verification: Callable[[], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ProducerIdentity:
    """What init_producer_id hands an idempotent producer: a producer id unique in the cluster, and its epoch."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class TopicRecovery:
    """What `recover_topics` did with one topic directory. `outcome`: "recovered" (registered from its data
    now, with `partitions` partitions, typed or not), "known" (registered already) or "skipped" (left alone);
    `detail` says what was lost, or why the directory was left alone."""

    topic: str
    outcome: str
    partitions: int = 0
    typed: bool = False
    detail: str = ""


@dataclass(frozen=True)
class NodeInfo:
    """A data node as the controller knows it. `node_epoch` grows by one on every registration of the id, so a
    zombie process of an older registration is fenced (KIP-380); `alive` is the controller's lease, never
    stored. `directory_id` is the data directory the registration came from (Kafka's meta.properties
    directory.id): while the lease is alive only a process on that directory may register the id again.
    Invariants: id >= 0, node_epoch >= 1 once registered, rack None or non-empty."""

    id: int
    address: str
    rack: str | None = None
    node_epoch: int = 0
    alive: bool = False
    directory_id: str = ""

    def __post_init__(self) -> None:
        if self.id < 0 or self.node_epoch < 0 or self.rack == "":
            raise ValueError(f"invalid node {self!r}: id and node_epoch must be >= 0, rack None or non-empty")


@dataclass(frozen=True)
class PartitionAssignment:
    """Where one partition's replicas live: node ids in preference order, the first the preferred leader; while
    it is being reassigned (KIP-455), `target` is where it goes, and `replicas` the target followed by the old
    replicas that leave once the target's new ones are in sync. Invariant: at least one replica, no node twice,
    the target (if any) a subset of the replicas."""

    replicas: tuple[int, ...]
    target: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.replicas or len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"replicas {list(self.replicas)} must be distinct node ids, at least one")
        if len(set(self.target)) != len(self.target) or not set(self.target) <= set(self.replicas):
            raise ValueError(f"reassignment target {list(self.target)} must be distinct replicas of "
                             f"{list(self.replicas)}")

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]


@dataclass(frozen=True)
class LeaderAndIsr:
    """One replicated partition's leadership (Kafka's partition state): the leader (None while the partition is
    offline), the leader epoch every new leader bumps, the in-sync replicas, the partition epoch every change
    bumps (the compare-and-set token of an ISR change) and the epoch of the controller that wrote it.

    Invariants: the ISR is never empty (the last in-sync replica stays in it while down, so the partition can
    come back without losing data); the leader, if any, is in the ISR; every epoch is >= 0."""

    leader: int | None
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    controller_epoch: int

    def __post_init__(self) -> None:
        if not self.isr or len(set(self.isr)) != len(self.isr):
            raise ValueError(f"ISR {list(self.isr)} must be distinct node ids, at least one")
        if self.leader is not None and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} is not in the ISR {list(self.isr)}")
        if min(self.leader_epoch, self.partition_epoch, self.controller_epoch) < 0:
            raise ValueError(f"epochs must be >= 0 in {self!r}")


@dataclass(frozen=True)
class PartitionRegistration:
    """A replicated partition's assignment and state together (KRaft's PartitionRegistration), as the stores
    keep it. Invariant: the ISR is a subset of the replicas."""

    assignment: PartitionAssignment
    state: LeaderAndIsr

    def __post_init__(self) -> None:
        if not set(self.state.isr) <= set(self.assignment.replicas):
            raise ValueError(f"ISR {list(self.state.isr)} is not a subset of the replicas "
                             f"{list(self.assignment.replicas)}")


@dataclass(frozen=True)
class ClusterDescription:
    """What describe_cluster answers (Kafka's metadata): the controller epoch, the registered data nodes with
    their liveness, and every replicated partition's assignment and state, by which clients route to leaders."""

    controller_epoch: int
    nodes: tuple[NodeInfo, ...]
    partitions: dict[TopicPartition, PartitionRegistration]
    topic_ids: dict[str, str] = field(default_factory=dict)  # of the replicated topics, which requests quote


@dataclass(frozen=True)
class NodeAssignment:
    """A data node's heartbeat answer: the controller epoch, the registrations of the partitions it is a
    replica of, their topics' metadata (what it needs to open their logs), the addresses of the registered
    nodes by id (where its followers fetch from) and, of its partitions, the replicas their nodes report offline
    (a leader does not ask to add them to the ISR)."""

    controller_epoch: int
    partitions: dict[TopicPartition, PartitionRegistration]
    topics: dict[str, TopicInfo]
    addresses: dict[int, str] = field(default_factory=dict)
    offline_replicas: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeHeartbeat:
    """The heartbeat answer to a node that names the digest of the assignment it last applied: the assignment
    only when it differs from that one (None: the node's still holds), and its digest, for the next heartbeat. So
    a node with thousands of partitions is not sent, and does not decode and apply, all of them every beat."""

    digest: str
    assignment: NodeAssignment | None = None


@dataclass(frozen=True)
class TransactionalOffsets:
    """A group's offsets committed by a producer transaction (Kafka's TxnOffsetCommit): written to the offsets
    topic by the same publish as the transaction's records, so both become visible at its commit point.
    `metadata` is one string stored with every partition's offset, or each partition's own (Kafka's
    TxnOffsetCommit carries one per partition; a partition the mapping leaves out stores ""). The generation and
    member id fence a group member's commit as commit_offsets does (-1 and "": a simple commit)."""

    group: str
    offsets: dict[TopicPartition, int]
    metadata: str | dict[TopicPartition, str] = ""
    generation: int = -1
    member_id: str = ""


@dataclass(frozen=True)
class TransactionWriter:
    """One writer of a transaction on replicated partitions (a Spark sink task attempt): its producer id and
    epoch, and the partitions it writes (registered before it writes any, as Kafka's AddPartitionsToTxn)."""

    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction open on a partition, as its leader describes it (Kafka's DescribeProducers): its producer
    id and epoch, the offset of its first record (the last stable offset stays at or below it until a marker
    ends it) and that record's timestamp (µs since the epoch)."""

    producer_id: int
    producer_epoch: int
    start_offset: int
    start_timestamp_us: int


@dataclass(frozen=True)
class ProducerState:
    """An idempotent or transactional producer of a partition, as its leader describes it (Kafka's
    DescribeProducers, `kafka-transactions describe-producers`): its id and epoch, the sequence of its last record
    (-1: none kept, as after a marker alone) and its last frame's timestamp (µs since the epoch; -1 where that frame
    cannot be read), and its open transaction's first offset and that record's timestamp (-1 for both: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_us: int
    transaction_start_offset: int = -1
    transaction_start_timestamp_us: int = -1


@dataclass(frozen=True)
class TransactionRecord:
    """A transactional id's one record in the coordinator: its highest committed sequence, and the writers of
    its latest transaction (`sequence`: the one in progress, or the one committed last). `committed_writers`
    is the coordinator's decision, the commit point: None while undecided, else the producer ids committed
    (every other writer of `sequence` is aborted). `offsets`: a committed transaction's group offsets not yet
    applied to the offsets topic (stored with the commit, cleared once applied; coordinator.transaction_offsets).
    `started_ms` and `timeout_ms`: when the first writer of `sequence` joined, and its transaction.timeout.ms
    (the largest its writers asked for); past both, the coordinator aborts the writers (coordinator.
    transaction_timeouts), or, once `sequence` is decided, writes its markers itself (kept until then:
    coordinator.transactions, "Markers owed"). `aborted`: writers the coordinator aborted that way whose abort
    markers are still to be written (of any sequence).
    """

    transactional_id: str
    committed_sequence: int = -1
    sequence: int = -1
    writers: tuple[TransactionWriter, ...] = ()
    committed_writers: tuple[int, ...] | None = None
    offsets: TransactionalOffsets | None = None
    started_ms: int = -1
    timeout_ms: int = 0
    aborted: tuple[TransactionWriter, ...] = ()

    @property
    def open(self) -> bool:
        """True while transaction `sequence` has writers and is undecided."""
        return bool(self.writers) and self.committed_sequence < self.sequence

    @property
    def state(self) -> str:
        """Kafka's name for the state of the latest transaction: Empty (none yet), Ongoing (writers joined,
        undecided), PrepareAbort (writers aborted, their markers being written), CompleteCommit (committed; a
        publish has no writers) or CompleteAbort (decided with no writers, or its writers aborted and it is
        waiting to be run again)."""
        if self.open:
            return "Ongoing"
        if self.aborted:
            return "PrepareAbort"
        if self.committed_sequence < 0 and self.sequence < 0:
            return "Empty"
        if self.committed_sequence >= self.sequence and self.committed_writers != ():
            return "CompleteCommit"
        return "CompleteAbort"

    def markers(self) -> dict[TopicPartition, tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
        """What ends transaction `sequence` on each partition: (commit, abort) lists of [producer id, epoch].
        Undecided, every writer is aborted; so is every writer in `aborted`. An abort marker carries the writer's
        epoch + 1, which fences the writer if it is a zombie still running."""
        committed = set(self.committed_writers or ())
        out: dict[TopicPartition, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
        for writer in self.writers:
            for tp in writer.partitions:
                commit, abort = out.setdefault(tp, ([], []))
                if writer.producer_id in committed:
                    commit.append((writer.producer_id, writer.producer_epoch))
                else:
                    abort.append((writer.producer_id, writer.producer_epoch + 1))
        for writer in self.aborted:
            for tp in writer.partitions:
                out.setdefault(tp, ([], []))[1].append((writer.producer_id, writer.producer_epoch + 1))
        return out


def transaction_sequence(txn: str) -> tuple[str, int]:
    """A transaction id `<transactional id>:<sequence>` split in two (an id without a numeric sequence is
    sequence 0 of itself). A transactional id commits in increasing sequence, as the Spark sink commits its
    batch ids in order and only ever replays the latest, so stores keep one record per transactional id."""
    head, sep, tail = txn.rpartition(":")
    if sep and tail.isascii() and tail.isdigit():
        return head, int(tail)
    return txn, 0
