"""The coordinator interface: what clients may ask of the metadata and group store, whoever serves it."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from fabric.common.errors import InvalidConfigError, InvalidRequestError
from fabric.common.types import (
    CommittedOffset,
    GroupDescription,
    JoinRequest,
    JoinResult,
    LeaderAndIsr,
    NodeInfo,
    PartitionRegistration,
    SyncResult,
    TopicInfo,
    TopicPartition,
    TransactionalOffsets,
    TransactionRecord,
)

if TYPE_CHECKING:
    from fabric.coordinator.offsets_log import OffsetsPart

# (partition epoch read, new state, or new assignment and state for a reassignment)
StateUpdates = Mapping[TopicPartition, tuple[int, LeaderAndIsr | PartitionRegistration]]


class Coordinator(ABC):
    """Metadata (topics, configs, schemas), committed group offsets and sink transactions."""

    @abstractmethod
    def create_topic(self, name: str, partitions: int, config: dict[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        """Register a topic; raises TopicExistsError if it exists."""

    @abstractmethod
    def delete_topic(self, name: str) -> None:
        """Forget a topic and every group offset in it; raises UnknownTopicError."""

    @abstractmethod
    def topic(self, name: str) -> TopicInfo:
        """The topic's metadata; raises UnknownTopicError."""

    @abstractmethod
    def list_topics(self) -> list[str]:
        """All topic names, sorted."""

    @abstractmethod
    def alter_topic_config(self, name: str, config: dict[str, str | None]) -> TopicInfo:
        """Set (or, with None, remove) config overrides."""

    @abstractmethod
    def set_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow the partition count to `total`; raises InvalidPartitionsError if it would shrink."""

    @abstractmethod
    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        """Store committed offsets atomically (all or none)."""

    def serves_locally(self) -> bool:
        """Whether commit_offsets and topic touch only this machine's files and memory (SQLite, an offsets topic
        in a local directory), never a network store or a replicated log, so a server may answer them on its
        event loop, with no worker thread; False unless a store knows it."""
        return False

    def topic_on_loop(self, name: str) -> bool:
        """Whether topic(name) reads only memory or this machine's files, so a server may answer it, and append a
        produce to the topic (kept in a directory of this machine), on its event loop; False unless a store knows
        it."""
        return self.serves_locally()

    def commits_on_loop(self, group: str, topics: Sequence[str]) -> bool:
        """Whether a commit of `group`'s offsets of `topics` may run on a server's event loop inside a commit batch
        (coordinator.commit_batch): its checks touch only this machine's files and memory, and its offsets log
        writes the queued rows without blocking the loop (a local log appends them, a replicated one sends them
        from the loop); False unless a store knows it."""
        return self.serves_locally()

    def transactional_offsets(self, group: str, offsets: dict[TopicPartition, int],
                              metadata: str | dict[TopicPartition, str] = "") -> OffsetsPart:
        """The commit as a partition of a producer transaction's publish (coordinator.offsets_log.OffsetsPart):
        only a store whose offsets topic is in a local directory has one; this refuses with the fix."""
        raise InvalidConfigError(f"{type(self).__name__} keeps no offsets topic a producer transaction can write; "
                                 "commit the offsets with the consumer after commit_transaction() instead")

    def check_commit(self, group: str, member_id: str = "", generation: int = -1,  # noqa: B027
                     transactional: bool = False) -> None:
        """Raise the MembershipError an offset commit by this member would get now (`transactional`: a producer
        transaction's), so a fenced member hears it must rejoin before anything else is checked (a hint:
        commit_offsets decides atomically). Stores without group state keep this no-op."""

    @abstractmethod
    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        """A group's committed offsets, optionally only for `topics`."""

    @abstractmethod
    def list_groups(self) -> list[str]:
        """Groups with committed offsets (or live members), sorted."""

    @abstractmethod
    def delete_group(self, group: str) -> None:
        """Forget a group's offsets."""

    @abstractmethod
    def delete_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        """Forget a group's offsets of `partitions` (Kafka's OffsetDelete, KIP-496): GroupIdNotFoundError if there
        is no such group, GroupSubscribedToTopicError while a live member subscribes to one of their topics. The
        partitions whose offsets went (those the group had committed), sorted."""

    @abstractmethod
    def commit_transaction(self, txn: str, writers: Sequence[int] | None = None,
                           offsets: TransactionalOffsets | None = None) -> None:
        """Record that transaction `txn` (`<transactional id>:<sequence>`) committed (idempotent): its publish
        is then rolled forward, or (`writers`, the producer ids whose output counts, each joined by
        add_transaction_writer) its writers' markers are decided. Only the highest sequence of each
        transactional id is kept (coordinator/transactions.py). `offsets`: a group's offsets committed with the
        transaction (a cluster with data nodes; coordinator.transaction_offsets), applied before this returns."""

    @abstractmethod
    def add_transaction_writer(self, txn: str, producer_id: int, producer_epoch: int,
                               partitions: Sequence[TopicPartition], timeout_ms: int = 60_000) -> TransactionRecord:
        """Register a writer of transaction `txn` and the replicated partitions it will write, before it writes
        (Kafka's AddPartitionsToTxn); InvalidTxnStateError if `txn` committed or a newer one began. Undecided
        `timeout_ms` (transaction.timeout.ms) after its first writer joined, the coordinator aborts its writers
        (coordinator.transaction_timeouts)."""

    @abstractmethod
    def transaction_record(self, transactional_id: str) -> TransactionRecord:
        """The transactional id's record: its latest transaction's writers and the decision about them."""

    @abstractmethod
    def list_transactions(self) -> list[str]:
        """Every transactional id the coordinator has a record of."""

    @abstractmethod
    def abort_transaction_writers(self, transactional_id: str) -> TransactionRecord:
        """Abort the writers of the id's open transaction now, as its timeout would (an operator's
        `fabric transactions abort`): the record as it is then (PrepareAbort until their markers are written)."""

    @abstractmethod
    def transaction_committed(self, txn: str) -> bool:
        """True once a transaction of the same transactional id with this or a higher sequence committed."""

    # -- group membership (Kafka's JoinGroup / SyncGroup / Heartbeat / LeaveGroup) --------------------
    @abstractmethod
    def join_group(self, request: JoinRequest) -> JoinResult:
        """Join or rejoin; may start a rebalance. Raises UnknownMemberError for a member the group forgot."""

    @abstractmethod
    def sync_group(self, group: str, member_id: str, generation: int) -> SyncResult:
        """The member's assignment for `generation`; IllegalGenerationError if stale."""

    @abstractmethod
    def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        """Keep the member alive; RebalanceInProgressError tells it to rejoin, IllegalGenerationError or
        UnknownMemberError that it was fenced."""

    @abstractmethod
    def leave_group(self, group: str, member_id: str) -> None:
        """Leave now (starts a rebalance for the rest)."""

    @abstractmethod
    def describe_group(self, group: str) -> GroupDescription:
        """State, generation, protocol, members and their assignments."""

    # -- the replicated cluster (docs/replication.md): data nodes, assignments, partition states ----------
    # Written by the active controller only; a store without them (a remote coordinator) refuses each call.
    def _no_replication(self) -> InvalidRequestError:
        return InvalidRequestError(f"{type(self).__name__} keeps no replication metadata; ask the coordinator "
                                   "store (SQLite or ZooKeeper) of the active controller")

    def claim_producer_id_block(self, block: int, principal: str) -> bool:
        """Record producer id block `block` (coordinator.producer_ids) as `principal`'s, unless someone holds it
        already: True if it was claimed now, False if it was taken (the caller tries another)."""
        raise self._no_replication()

    def producer_id_block_owner(self, block: int) -> str | None:
        """The principal producer id block `block` belongs to; None if nobody claimed it."""
        raise self._no_replication()

    def register_node(self, node_id: int, address: str, rack: str | None = None, *, directory_id: str) -> NodeInfo:
        """Register data node `node_id` (again) from the data directory `directory_id`: its node epoch becomes one
        more than its last registration's (1 for a new id), fencing every older process of the id. Returns the
        registration (alive False)."""
        raise self._no_replication()

    def registered_nodes(self) -> list[NodeInfo]:
        """Every registered data node, sorted by id (alive False: liveness is the controller's lease)."""
        raise self._no_replication()

    def controller_epoch(self) -> int:
        """The current controller epoch (0 before any election): partition states written must carry it."""
        raise self._no_replication()

    def create_replicated_topic(self, name: str, config: dict[str, str], value_schema: pa.Schema | None,
                                partitions: Mapping[int, PartitionRegistration]) -> TopicInfo:
        """create_topic for a topic whose partitions 0..n-1 have replicas and states, all in one write;
        TopicExistsError, StaleControllerEpochError if the states carry another controller epoch."""
        raise self._no_replication()

    def add_replicated_partitions(self, name: str, partitions: Mapping[int, PartitionRegistration]) -> TopicInfo:
        """Grow a replicated topic by `partitions`, numbered on from its partition count, in one write."""
        raise self._no_replication()

    def partition_registrations(self, topics: list[str] | None = None) -> dict[TopicPartition, PartitionRegistration]:
        """The replicated partitions of `topics` (default: every topic); topics created without replication
        have none."""
        raise self._no_replication()

    def replicated(self, name: str) -> bool:
        """True if topic `name` exists and has replicated partitions (its data lives on data nodes)."""
        raise self._no_replication()

    def update_partition_states(self, updates: StateUpdates) -> bool:
        """Compare-and-set: store each new state (with a PartitionRegistration, its assignment too) if its
        partition's epoch is still the one read; False (and nothing of that write stored) on a lost race, for the
        caller to re-read and decide again. Refused with StaleControllerEpochError when a state carries a
        controller epoch other than the current one."""
        raise self._no_replication()

    def close(self) -> None:  # noqa: B027 (optional: stores without connections keep this)
        """Release connections."""
