"""The coordinator interface: what clients may ask of the metadata and group store, whoever serves it."""
from __future__ import annotations

from abc import ABC, abstractmethod

import pyarrow as pa

from fabric.common.types import (
    CommittedOffset,
    GroupDescription,
    JoinRequest,
    JoinResult,
    SyncResult,
    TopicInfo,
    TopicPartition,
)


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

    def check_commit(self, group: str, member_id: str = "", generation: int = -1) -> None:  # noqa: B027
        """Raise the MembershipError an offset commit by this member would get now, so a fenced member hears it
        must rejoin before anything else is checked (a hint: commit_offsets decides atomically). Stores without
        group state keep this no-op."""

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
    def commit_transaction(self, txn: str) -> None:
        """Record that transaction `txn` (`<transactional id>:<sequence>`) committed (idempotent): its publish
        is then rolled forward. Only the highest sequence of each transactional id is kept."""

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

    def close(self) -> None:  # noqa: B027 (optional: stores without connections keep this)
        """Release connections."""
