"""Exceptions raised by the fabric: each names the problem and, where there is one, the fix.

`retriable` says whether the same request may succeed if made again after a backoff (a coordinator failing
over, a group rebalancing), as Kafka's RetriableException does; clients' retry loops consult it, never lists
of types. Everything else needs a change by the caller first.
"""
from __future__ import annotations

from typing import ClassVar

from fabric.common.kafka_codes import CODES, ErrorText


class FabricError(Exception):
    """Base class of every error the fabric raises on purpose. Its message is an ErrorText, so a program written for
    a Kafka client finds the Kafka error code of the same meaning where it looks: `e.args[0].code()`
    (confluent-kafka), `e.errno` and `e.message`, the code's name (kafka-python)."""

    retriable: ClassVar[bool] = False
    fatal: ClassVar[bool] = False  # the client cannot go on (confluent-kafka's fatal(): a fenced producer)
    errno: ClassVar[int] = -1  # Kafka's code (the table at the end of this module); -1: UNKNOWN
    message: ClassVar[str] = "UNKNOWN"

    def __init__(self, *args: object) -> None:
        if args and type(args[0]) is str:
            args = (ErrorText(args[0], type(self)), *args[1:])
        super().__init__(*args)


class InvalidTopicError(FabricError):
    """A topic name breaks the naming rules."""


class InvalidGroupError(FabricError):
    """A consumer-group id breaks the naming rules."""


class UnknownTopicOrPartitionError(FabricError):
    """The topic or partition does not exist (Kafka's UNKNOWN_TOPIC_OR_PARTITION): the base of the two errors that
    say which."""


class UnknownTopicError(UnknownTopicOrPartitionError):
    """The topic does not exist."""


class TopicExistsError(FabricError):
    """create_topic was called for a topic that already exists."""

    @classmethod
    def of(cls, name: str) -> TopicExistsError:
        """The error for topic `name`, naming the ways on."""
        return cls(f"topic {name!r} already exists; choose another name, delete it first, or keep it as it is "
                   "(create_topic(exist_ok=True), `fabric topics create --if-not-exists`)")


class UnknownPartitionError(UnknownTopicOrPartitionError):
    """The partition number is outside the topic's partition range."""


class InvalidConfigError(FabricError):
    """A config key is unknown or its value is out of range."""


class InvalidSessionTimeoutError(InvalidConfigError):
    """A member asked for a session timeout the group coordinator does not allow (over its
    group.max.session.timeout.ms, or under its group.min.session.timeout.ms)."""


class GroupMaxSizeReachedError(FabricError):
    """A new member would take a group past the coordinator's group.max.size (Kafka's GROUP_MAX_SIZE_REACHED):
    it is refused; the members the group has keep their places."""


class InvalidArgumentError(FabricError):
    """An argument of a client call has the wrong type or is out of range (a negative offset, a timeout that
    is not a number); the message names the argument and what it takes."""


class InvalidRecordError(InvalidArgumentError):
    """A record given to send() or send_batch() is malformed: its key, value, headers, partition or timestamp
    has the wrong type or is out of range. Only that record (or batch) is refused; nothing is written."""


class InvalidPartitionsError(FabricError):
    """A partition count is invalid (e.g. shrinking a topic)."""


class RecordTooLargeError(FabricError):
    """A record or batch is larger than max.message.bytes."""


class SchemaMismatchError(FabricError):
    """Produced data does not match the typed topic's value schema."""


class OffsetOutOfRangeError(FabricError):
    """A fetch asked for an offset outside [log start, log end]."""


class OffsetNotAvailableError(FabricError):
    """An offset below what a reader was told the partition holds is not readable yet: a new leader has not
    learned its high watermark from its followers (Kafka's OFFSET_NOT_AVAILABLE). Retriable."""

    retriable = True


class NoOffsetForPartitionError(FabricError):
    """auto_offset_reset=none and the group has no committed offset for a partition."""


class CorruptRecordError(FabricError):
    """Stored records are damaged or missing (a failed CRC check, a broken frame header, a gap in the offsets);
    they are never served, and the message names the offsets to seek past."""


class MembershipError(FabricError):
    """A group member's view of its group is out of date: it must rejoin before it commits or fetches its
    assignment again (the subclasses say whether it keeps its member id)."""


class IllegalGenerationError(MembershipError):
    """An offset commit or heartbeat came from a stale group generation; the member rejoins under its member
    id."""


class UnknownMemberError(MembershipError):
    """The group coordinator does not know this member id."""


class RebalanceInProgressError(MembershipError):
    """The group is rebalancing; the member must rejoin (keeping its member id), then retry."""

    retriable = True


class UnstableOffsetCommitError(FabricError):
    """A producer transaction is committing the group's offsets right now (Kafka's UNSTABLE_OFFSET_COMMIT): read
    them again once it has."""

    retriable = True


class AuthorizationError(FabricError):
    """The caller is not allowed to do this."""


class AuthenticationError(FabricError):
    """The caller presented no valid credentials."""


class CoordinatorUnavailableError(FabricError):
    """No coordinator instance answered (or this one is not the active one): retry, maybe at another."""

    retriable = True


class TooManyConnectionsError(FabricError):
    """A server refused a new connection: the client's address, or the server, holds as many as it allows
    (max.connections.per.ip, max.connections); retry once some close, or raise the limit."""

    retriable = True


class InconsistentGroupProtocolError(FabricError):
    """A member's assignors or request do not fit the group (no assignor every member supports)."""


class GroupNotEmptyError(FabricError):
    """The group still has live members, so it cannot be deleted."""


class GroupIdNotFoundError(FabricError):
    """No such consumer group: it has neither committed offsets nor live members."""


class GroupSubscribedToTopicError(FabricError):
    """A group's offsets of a topic its live members subscribe to cannot be deleted (Kafka's
    GROUP_SUBSCRIBED_TO_TOPIC): they would commit them again, or start over from auto.offset.reset."""


class CommitFailedError(FabricError):
    """An offset commit was rejected because this consumer's group generation is stale."""


class StorageError(FabricError):
    """A disk the fabric writes to failed (full, read-only, an I/O error, a directory of another user), as Kafka's
    KafkaStorageException: the message names the file and the fix; nothing was changed and reads keep working
    where they can, so the call may be repeated once the disk is fixed."""


class InvalidRequestError(FabricError):
    """A request to the coordinator service is malformed: not JSON, or an argument is missing, unknown or of the
    wrong type (usually a client of another version, or a hand-made call)."""


class UnsupportedVersionError(FabricError):
    """Client and server speak different versions of the fabric protocol (Kafka's UNSUPPORTED_VERSION): the
    message names the version each speaks; upgrade the older side."""


# -- the replicated cluster (docs/replication.md) -------------------------------------------------------------
class NotLeaderError(FabricError):
    """The request went to a node that does not lead the partition (Kafka's NOT_LEADER_OR_FOLLOWER): refresh
    the metadata and retry against the leader."""

    retriable = True


class InconsistentTopicIdError(NotLeaderError):
    """The request names a topic by an id other than the one the node serves under that name: the topic was
    deleted and created again, and the client or the node has not learned it yet (Kafka's
    INCONSISTENT_TOPIC_ID); refresh the metadata and retry."""


class KafkaStorageError(NotLeaderError, StorageError):
    """A data node cannot serve its replica of the partition: its storage failed (a full or read-only disk, an I/O
    error, the replica's directory gone), as Kafka's KAFKA_STORAGE_ERROR. The node reports the replica offline and
    the controller moves the leadership to an in-sync replica: refresh the metadata and retry."""


class FencedLeaderEpochError(FabricError):
    """The request quoted a leader epoch older than the partition's current one: the sender's view of the
    leadership is stale; refresh the metadata and retry."""

    retriable = True


class LeaderNotAvailableError(FabricError):
    """The partition has no live leader (offline: no in-sync replica is alive), or its leader is not known yet
    (Kafka's LEADER_NOT_AVAILABLE): retry once a replica is back."""

    retriable = True


class NotEnoughReplicasError(FabricError):
    """Fewer in-sync replicas than the topic's min.insync.replicas: an acks=all write is refused (retry once
    replicas are back, or write with acks=1)."""

    retriable = True


class NotEnoughReplicasAfterAppendError(NotEnoughReplicasError):
    """An acks=all write was appended by the leader, but its in-sync replicas fell below min.insync.replicas
    before it was replicated: it may or may not be kept (retry, as Kafka's producer does)."""


class RequestTimedOutError(FabricError):
    """The request was not done within its timeout (an acks=all write not yet replicated): it may still be
    done, so a retry without idempotence may write it twice."""

    retriable = True


class ClientTimeoutError(RequestTimedOutError, TimeoutError):  # type: ignore[misc]  # errno: Kafka's, not the OS's
    """A client call did not finish within its timeout (Kafka's TimeoutException): a send within
    delivery_timeout_ms, a flush() or close() within the timeout given, a future's result() within its own. The
    message says what was still pending; it may still happen. Also a built-in TimeoutError."""


class OutOfOrderSequenceError(FabricError):
    """An idempotent producer's batch does not follow the last sequence the leader stored: records were lost
    in between, so the producer must fail rather than write them out of order."""


class UnknownProducerIdError(FabricError):
    """The leader holds no state for this producer id (expired or never assigned): initialise the producer
    again."""


class InvalidProducerEpochError(FabricError):
    """An idempotent producer's epoch is older than the latest its id wrote with: a newer producer with the
    same id fenced it (Kafka's INVALID_PRODUCER_EPOCH)."""


class ProducerFencedError(FabricError):
    """A transactional write by a producer whose transaction on the partition already ended (a marker
    committed or aborted it): the writer is a zombie, an attempt its transaction's owner gave up on (Kafka's
    PRODUCER_FENCED). Nothing was written."""


class TransactionAbortedError(FabricError):
    """A record sent in a producer transaction that was aborted (abort_transaction, or a commit that failed
    before its commit point): nothing of the transaction was written (Kafka's TRANSACTION_ABORTED)."""


class PurgedError(FabricError):
    """A record dropped from the producer's buffer by purge() before any append took it: it was not written
    (confluent-kafka reports it as a KafkaError with code _PURGE_QUEUE)."""


class IllegalStateError(FabricError):
    """A transactional producer's call made in the wrong state, e.g. send() before begin_transaction() (Kafka's
    IllegalStateException); the message names the call to make first."""


class InvalidTxnStateError(FabricError):
    """A transaction request that does not fit the transactional id's state: a writer joining a transaction
    that already committed or that a newer one replaced, or markers for a transaction that is not the one the
    coordinator holds (Kafka's INVALID_TXN_STATE). The message names both."""


class ConcurrentTransactionsError(FabricError):
    """A transactional append met the writing of markers on its partition while the leader verified it: nothing
    was written; retry (Kafka's CONCURRENT_TRANSACTIONS)."""

    retriable = True


class StaleNodeEpochError(FabricError):
    """A data node quoted a node epoch other than its latest registration's: a newer process of the same node
    id registered since (KIP-380), so this one is fenced and must register again."""


class DuplicateNodeRegistrationError(FabricError):
    """A node registered an id whose lease a process on another data directory holds (Kafka's
    DUPLICATE_BROKER_REGISTRATION): two processes of one id would fence each other in turn. Refused, changing
    nothing; the message names the id and the live process's address."""


class InvalidReplicationFactorError(FabricError):
    """A replication factor the live nodes cannot hold (larger than their number, or below 1)."""


class IneligibleReplicaError(FabricError):
    """An ISR change the controller refuses: a member that is not a replica or not alive, or a leader leaving
    its own ISR (Kafka's INELIGIBLE_REPLICA)."""


class ElectionNotNeededError(FabricError):
    """A leader election named a partition that needs none (Kafka's ELECTION_NOT_NEEDED): its preferred replica
    leads it already (preferred), or it has a leader (unclean). Nothing changed."""


class PreferredLeaderNotAvailableError(FabricError):
    """A preferred leader election could not move a partition to its preferred replica (Kafka's
    PREFERRED_LEADER_NOT_AVAILABLE): that replica is down or out of sync; retry once it has caught up."""

    retriable = True


class EligibleLeadersNotAvailableError(FabricError):
    """An unclean leader election found no live replica to lead an offline partition (Kafka's
    ELIGIBLE_LEADERS_NOT_AVAILABLE); retry once one of its replicas is back."""

    retriable = True


class InvalidUpdateVersionError(FabricError):
    """An ISR change quoted a partition epoch other than the current one (Kafka's INVALID_UPDATE_VERSION):
    the partition changed since the leader last read it; it must learn the new state first."""


class StaleControllerEpochError(CoordinatorUnavailableError):
    """A write decided under an older controller epoch: a newer controller was elected, so the deposed one
    may change nothing (retry against the current controller)."""


class InvalidFramesError(FabricError):
    """Raw frames given to a replica (copied from its leader) are not whole, valid frames that continue its
    log: a bad magic or version, a torn frame, a failed CRC check, a schema frame, or leader epochs that go
    backwards. Nothing of the batch was written; fetch it again."""


class UnexpectedOffsetError(InvalidFramesError):
    """Raw frames given to a replica do not start at its log end offset, or do not follow one another; the
    message names the offset expected and the one found. Nothing was written: fetch from the log end offset."""


class InvalidLeaderEpochError(FabricError):
    """A leader epoch, or the offset it starts at, would go backwards in a partition's leader-epoch cache
    (both only increase, as Kafka's LeaderEpochFileCache requires); the message names both values."""


class FetchSessionError(FabricError):
    """A follower's fetch session (KIP-227) that its leader no longer holds as the follower knows it: an unknown
    session id (the leader restarted, or the session was replaced or evicted: FetchSessionIdNotFoundError) or an
    epoch other than the next one (an answer was lost: InvalidFetchSessionEpochError). The follower starts a new
    session with a full fetch."""

    retriable = True


class FetchSessionIdNotFoundError(FetchSessionError):
    """A fetch quoted a session id its leader does not hold (Kafka's FETCH_SESSION_ID_NOT_FOUND)."""


class InvalidFetchSessionEpochError(FetchSessionError):
    """A fetch quoted a session epoch other than the one its leader expects next (Kafka's
    INVALID_FETCH_SESSION_EPOCH)."""


class IgnoredConfigWarning(UserWarning):
    """A Kafka client config the fabric accepts but does not use; the message names what does its job here."""


# Kafka's error code of each error's meaning, by librdkafka's name (a subclass not named has its base's)
_KAFKA_CODES = {
    InvalidTopicError: "TOPIC_EXCEPTION", InvalidGroupError: "INVALID_GROUP_ID",
    UnknownTopicOrPartitionError: "UNKNOWN_TOPIC_OR_PART", TopicExistsError: "TOPIC_ALREADY_EXISTS",
    InvalidConfigError: "INVALID_CONFIG", InvalidSessionTimeoutError: "INVALID_SESSION_TIMEOUT",
    GroupMaxSizeReachedError: "GROUP_MAX_SIZE_REACHED", InvalidArgumentError: "_INVALID_ARG",
    InvalidRecordError: "INVALID_RECORD", InvalidPartitionsError: "INVALID_PARTITIONS",
    RecordTooLargeError: "MSG_SIZE_TOO_LARGE", SchemaMismatchError: "INVALID_RECORD",
    OffsetOutOfRangeError: "OFFSET_OUT_OF_RANGE", OffsetNotAvailableError: "OFFSET_NOT_AVAILABLE",
    NoOffsetForPartitionError: "_NO_OFFSET", CorruptRecordError: "INVALID_MSG",
    IllegalGenerationError: "ILLEGAL_GENERATION", UnknownMemberError: "UNKNOWN_MEMBER_ID",
    RebalanceInProgressError: "REBALANCE_IN_PROGRESS", UnstableOffsetCommitError: "UNSTABLE_OFFSET_COMMIT",
    AuthorizationError: "TOPIC_AUTHORIZATION_FAILED", AuthenticationError: "SASL_AUTHENTICATION_FAILED",
    CoordinatorUnavailableError: "COORDINATOR_NOT_AVAILABLE", InconsistentGroupProtocolError:
    "INCONSISTENT_GROUP_PROTOCOL", GroupNotEmptyError: "NON_EMPTY_GROUP", GroupIdNotFoundError: "GROUP_ID_NOT_FOUND",
    GroupSubscribedToTopicError: "GROUP_SUBSCRIBED_TO_TOPIC", StorageError: "KAFKA_STORAGE_ERROR",
    InvalidRequestError: "INVALID_REQUEST", UnsupportedVersionError: "UNSUPPORTED_VERSION",
    NotLeaderError: "NOT_LEADER_FOR_PARTITION", InconsistentTopicIdError: "INCONSISTENT_TOPIC_ID",
    KafkaStorageError: "KAFKA_STORAGE_ERROR", FencedLeaderEpochError: "FENCED_LEADER_EPOCH",
    LeaderNotAvailableError: "LEADER_NOT_AVAILABLE", NotEnoughReplicasError: "NOT_ENOUGH_REPLICAS",
    NotEnoughReplicasAfterAppendError: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", RequestTimedOutError: "REQUEST_TIMED_OUT",
    ClientTimeoutError: "_TIMED_OUT", OutOfOrderSequenceError: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    UnknownProducerIdError: "UNKNOWN_PRODUCER_ID", InvalidProducerEpochError: "INVALID_PRODUCER_EPOCH",
    ProducerFencedError: "PRODUCER_FENCED", PurgedError: "_PURGE_QUEUE", IllegalStateError: "_STATE",
    InvalidTxnStateError: "INVALID_TXN_STATE", ConcurrentTransactionsError: "CONCURRENT_TRANSACTIONS",
    StaleNodeEpochError: "STALE_BROKER_EPOCH", DuplicateNodeRegistrationError: "DUPLICATE_BROKER_REGISTRATION",
    InvalidReplicationFactorError: "INVALID_REPLICATION_FACTOR", ElectionNotNeededError: "ELECTION_NOT_NEEDED",
    PreferredLeaderNotAvailableError: "PREFERRED_LEADER_NOT_AVAILABLE",
    EligibleLeadersNotAvailableError: "ELIGIBLE_LEADERS_NOT_AVAILABLE", InvalidUpdateVersionError:
    "INVALID_UPDATE_VERSION", StaleControllerEpochError: "STALE_CTRL_EPOCH",
    FetchSessionIdNotFoundError: "FETCH_SESSION_ID_NOT_FOUND", InvalidFetchSessionEpochError:
    "INVALID_FETCH_SESSION_EPOCH",
}
for _kind, _name in _KAFKA_CODES.items():
    _kind.errno, _kind.message = CODES[_name], _name
ProducerFencedError.fatal = True
del _kind, _name
