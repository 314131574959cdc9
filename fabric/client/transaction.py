"""A transactional producer's state (Kafka's TransactionManager): which call is allowed when, the transaction in
progress (its sequence and the group offsets sent to it) and what a commit's outcome makes of the producer.

A transactional id's transactions are `<transactional id>:<sequence>`, and the coordinator keeps the highest
sequence committed per id (coordinator/transactions.py). init_transactions() reads it: this producer's next
transaction is that + 1. commit_transaction() publishes the buffered records and offsets under that
transaction id in one Cluster.publish_transaction, whose commit point is the coordinator's commit of it (on a
cluster with data nodes, a transaction on the partition leaders: fabric.client.leader_transactions). A
publish that finds the id's sequence committed already lost to another producer with the same transactional id
(a zombie, or a second instance): this one is fenced (ProducerFencedError), and stays so.

States (TxnState); a call in any other state raises IllegalStateError naming the call to make instead:

    UNINITIALIZED --init_transactions--> READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING --> READY (the next sequence)
                                                      --> ABORTABLE (refused, nothing committed: abort_transaction)
                                                      --> FENCED (another producer committed the sequence first)
                                                      --> FATAL (the outcome could not be learnt)
    IN_TRANSACTION or ABORTABLE --abort_transaction--> ABORTING --> READY
"""
from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from fabric.client import leader_transactions, partition_args
from fabric.client.cluster import Cluster
from fabric.client.membership import GroupMetadata
from fabric.common import checks
from fabric.common.config import LONG_MAX
from fabric.common.errors import (
    FabricError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidConfigError,
    ProducerFencedError,
)
from fabric.common.kafka_codes import ErrorText
from fabric.common.names import validate_group
from fabric.common.types import TopicPartition, TransactionalOffsets
from fabric.coordinator.validation import MAX_TRANSACTION_ID

log = logging.getLogger(__name__)
Bases = dict[TopicPartition, list[int]]  # the base offset of each batch published to the partition


class TxnState(str, enum.Enum):
    """Where a transactional producer is (module docstring)."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE = "abortable error"
    FENCED = "fenced"
    FATAL = "fatal error"


_ALLOWED: dict[str, frozenset[TxnState]] = {
    "init_transactions": frozenset({TxnState.UNINITIALIZED}),
    "begin_transaction": frozenset({TxnState.READY}),
    "send": frozenset({TxnState.IN_TRANSACTION}),
    "send_offsets_to_transaction": frozenset({TxnState.IN_TRANSACTION}),
    "commit_transaction": frozenset({TxnState.IN_TRANSACTION}),
    "abort_transaction": frozenset({TxnState.IN_TRANSACTION, TxnState.ABORTABLE}),
}
_WHAT_NEXT = {
    TxnState.UNINITIALIZED: "call init_transactions() first",
    TxnState.READY: "no transaction is in progress: call begin_transaction() first",
    TxnState.IN_TRANSACTION: "a transaction is in progress: end it with commit_transaction() or abort_transaction()",
    TxnState.COMMITTING: "another thread is committing this producer's transaction; wait for it",
    TxnState.ABORTING: "another thread is aborting this producer's transaction; wait for it",
    TxnState.ABORTABLE: "the last commit_transaction() failed and wrote nothing: call abort_transaction()",
}


def check_transactional_id(value: Any) -> str:
    """The producer's transactional_id, checked: a string of 1 to MAX_TRANSACTION_ID characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TRANSACTION_ID:
        raise InvalidConfigError(f"producer config transactional_id must be a string of 1 to {MAX_TRANSACTION_ID} "
                                 f"characters, got {value!r:.80}")
    return value


class TransactionManager:
    """The transactions of one producer with `transactional_id` on `cluster` (module docstring)."""

    def __init__(self, cluster: Cluster, transactional_id: str) -> None:
        self.cluster = cluster
        self.transactional_id = check_transactional_id(transactional_id)
        self.state = TxnState.UNINITIALIZED
        self.sequence = -1
        self.offsets: TransactionalOffsets | None = None
        self._final: FabricError | None = None  # what every call raises once FENCED or FATAL

    @property
    def txn(self) -> str:
        """The id of the transaction in progress (or the next one)."""
        return f"{self.transactional_id}:{self.sequence}"

    def require(self, call: str) -> None:
        """IllegalStateError (or the fencing error) unless `call` may be made in the current state."""
        if self._final is not None:
            raise self._final
        if self.state not in _ALLOWED[call]:
            raise IllegalStateError(f"{call}() is not allowed while transactional producer {self.transactional_id!r} "
                                    f"is {self.state.value}: {_WHAT_NEXT[self.state]}")

    def init(self) -> None:
        """Read the transactional id's committed sequence: the next transaction is the one after it. On a
        cluster with data nodes, a transaction of this id left open on the leaders is aborted first."""
        self.require("init_transactions")
        if self.cluster.describe_cluster().nodes:
            leader_transactions.abandon_open(self.cluster, self.transactional_id)
        record = self.cluster.coordinator.transaction_record(self.transactional_id)
        self.sequence = record.committed_sequence + 1
        self.state = TxnState.READY
        log.info("transactional producer %s: next transaction %s", self.transactional_id, self.txn)

    def begin(self) -> None:
        self.require("begin_transaction")
        self.state, self.offsets = TxnState.IN_TRANSACTION, None

    def add_offsets(self, offsets: Any, group_metadata: Any) -> None:
        """Commit `offsets` for the group of `group_metadata` with this transaction (merged into earlier ones)."""
        self.require("send_offsets_to_transaction")
        given = _transactional_offsets(offsets, group_metadata)
        if self.offsets is not None and self.offsets.group != given.group:
            raise InvalidArgumentError(
                f"transaction {self.txn} already commits offsets of group {self.offsets.group!r}; a transaction "
                f"commits one group's offsets here (got group {given.group!r}): commit it in its own transaction")
        if self.offsets is not None:  # a partition sent again takes its new offset and metadata
            kept = {tp: note for tp, note in _notes(self.offsets).items() if tp not in given.offsets}
            given = TransactionalOffsets(given.group, {**self.offsets.offsets, **given.offsets},
                                         {**kept, **_notes(given)} or "", given.generation, given.member_id)
        self.offsets = given

    def commit(self, publish: Callable[[str, TransactionalOffsets | None], Bases | None]) -> Bases:
        """Run `publish(txn, offsets)`, the commit; its base offsets. On a refusal that committed nothing the
        producer is ABORTABLE (the error is raised); if the sequence was committed by another producer, FENCED."""
        self.require("commit_transaction")
        self.state = TxnState.COMMITTING
        try:
            bases = publish(self.txn, self.offsets)
        except BaseException as exc:
            self._failed(exc)
            raise
        if bases is None:
            self._final = ProducerFencedError(
                f"transactional producer {self.transactional_id!r} was fenced: another producer with the same "
                f"transactional_id committed transaction {self.txn} first; nothing of this one was written. Close "
                "this producer (a new one's init_transactions() reads the committed sequence)")
            self.state = TxnState.FENCED
            raise self._final
        self.sequence += 1
        self.state, self.offsets = TxnState.READY, None
        return bases

    def _failed(self, exc: BaseException) -> None:
        """After a failed commit: ABORTABLE if the transaction is known not to have committed, else FATAL."""
        try:
            committed = self.cluster.coordinator.transaction_committed(self.txn)
        except FabricError as check:
            log.warning("transaction %s: its commit failed (%s) and its outcome cannot be read (%s)", self.txn, exc,
                        check)
            committed = True
        if not committed:
            log.warning("transaction %s was not committed (%s): nothing of it is visible", self.txn, exc)
            self.state = TxnState.ABORTABLE
            if exc.args and isinstance(exc.args[0], ErrorText):
                exc.args[0].abortable = True  # (confluent-kafka's txn_requires_abort())
            return
        self._final = FabricError(
            f"the outcome of transaction {self.txn} is unknown: its commit failed ({exc}), and the transaction is "
            "committed, by this producer or by another with the same transactional_id, or could not be checked. "
            "Close this producer; a new one's init_transactions() continues after the committed sequence")
        self.state = TxnState.FATAL

    def begin_abort(self) -> None:
        self.require("abort_transaction")
        self.state = TxnState.ABORTING

    def aborted(self) -> None:
        self.state, self.offsets = TxnState.READY, None


def _transactional_offsets(offsets: Any, group_metadata: Any) -> TransactionalOffsets:
    """send_offsets_to_transaction's arguments as TransactionalOffsets: `offsets` a mapping of (topic, partition)
    to the next offset (or to an object with .offset, kafka-python's OffsetAndMetadata), or an iterable of
    objects with .topic, .partition and .offset (confluent-kafka's TopicPartition list); `group_metadata` the
    consumer's consumer_group_metadata(), or a group id (a simple commit, for a group without live members)."""
    if isinstance(group_metadata, GroupMetadata):
        group, generation, member_id = group_metadata.group_id, group_metadata.generation, group_metadata.member_id
    elif isinstance(group_metadata, str):
        group, generation, member_id = group_metadata, -1, ""
    else:
        raise InvalidArgumentError(f"send_offsets_to_transaction needs the consumer's consumer_group_metadata() or "
                                   f"a group id, got {type(group_metadata).__name__}")
    validate_group(group)
    if isinstance(offsets, Mapping):
        given = offsets
    elif isinstance(offsets, Iterable) and not isinstance(offsets, (str, bytes)):
        given = {_pair(tp): tp for tp in offsets}  # a TopicPartition's offset and metadata, as split_metadata reads
    else:
        raise InvalidArgumentError(f"send_offsets_to_transaction takes a mapping of TopicPartition to the next "
                                   f"offset to read, got {type(offsets).__name__}")
    plain, notes = partition_args.split_metadata(given, "send_offsets_to_transaction")
    out: dict[TopicPartition, int] = {}
    for tp, offset in plain.items():
        if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and checks.is_integer(tp[1])):
            raise InvalidArgumentError(f"send_offsets_to_transaction: {tp!r:.80} is not a (topic, partition) pair")
        out[(tp[0], int(tp[1]))] = checks.integer(offset, f"the offset sent for {tp[0]}-{tp[1]}", 0, LONG_MAX)
    metadata = {(tp[0], int(tp[1])): note for tp, note in notes.items()}
    return TransactionalOffsets(group, out, metadata or "", generation, member_id)


def _pair(tp: Any) -> Any:
    """A TopicPartition object's (topic, partition), the key its offset is sent for."""
    return getattr(tp, "topic", None), getattr(tp, "partition", None)


def _notes(offsets: TransactionalOffsets) -> dict[TopicPartition, str]:
    """The metadata of each partition of `offsets` that has any."""
    notes = offsets.metadata
    if isinstance(notes, str):
        return {tp: notes for tp in offsets.offsets} if notes else {}
    return dict(notes)
