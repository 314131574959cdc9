"""Every error the fabric raises, and the names Kafka's Python clients give the same errors, so that code written
for kafka-python or confluent-kafka catches what it always caught:

    from fabric.errors import KafkaError, CommitFailedError, NoBrokersAvailable

Each alias below is the fabric error with the same meaning (`KafkaError is FabricError`); a Kafka error with no
fabric error of the same meaning has no alias. The fabric raises one AuthorizationError whatever the resource,
so kafka-python's per-resource authorization errors all name it.
"""
from __future__ import annotations

from fabric.common.errors import *  # noqa: F401,F403  (every error type of the fabric)
from fabric.common.errors import (
    AuthenticationError,
    AuthorizationError,
    ClientTimeoutError,
    CoordinatorUnavailableError,
    CorruptRecordError,
    DuplicateNodeRegistrationError,
    FabricError,
    GroupNotEmptyError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidGroupError,
    NotLeaderError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    StaleNodeEpochError,
    TopicExistsError,
    UnknownMemberError,
    UnsupportedVersionError,
)

# The base class: kafka-python's KafkaError, confluent-kafka's KafkaException.
KafkaError = KafkaException = FabricError

# kafka-python's names of the client's own errors.
NoBrokersAvailable = CoordinatorUnavailableError  # nothing at the URL answered
KafkaConnectionError = NodeNotReadyError = KafkaUnavailableError = CoordinatorUnavailableError  # (the same: a server
# that did not answer, after the client's retries)
BrokerResponseError = FabricError  # the base of the errors a server answers
IncompatibleBrokerVersion = UnsupportedVersionError
KafkaTimeoutError = ClientTimeoutError  # a send, flush, close or future not done within its timeout
IllegalArgumentError = InvalidArgumentError
KafkaConfigurationError = InvalidConfigError

# kafka-python's names of Kafka's error codes (the fabric's error of the same meaning).
CoordinatorNotAvailableError = NotCoordinatorError = GroupCoordinatorNotAvailableError = CoordinatorUnavailableError
NotLeaderForPartitionError = NotLeaderOrFollowerError = NotLeaderError
MessageSizeTooLargeError = RecordTooLargeError
CorruptRecordException = CorruptRecordError
InvalidConfigurationError = InvalidConfigError
InvalidGroupIdError = InvalidGroupError
UnknownMemberIdError = UnknownMemberError
TopicAlreadyExistsError = TopicExistsError
NonEmptyGroupError = GroupNotEmptyError
OutOfOrderSequenceNumberError = OutOfOrderSequenceError
StaleBrokerEpochError = StaleNodeEpochError
DuplicateBrokerRegistrationError = DuplicateNodeRegistrationError
SaslAuthenticationFailedError = AuthenticationError
TopicAuthorizationFailedError = GroupAuthorizationFailedError = AuthorizationError
ClusterAuthorizationFailedError = TransactionalIdAuthorizationFailedError = AuthorizationError
