"""Kafka's error codes, by librdkafka's names, and an error's message as a value that answers for its code.

Programs written for Kafka's Python clients look at an error's code: confluent-kafka's `e.args[0].code()` (its
KafkaException carries a KafkaError value) and kafka-python's `e.errno`. A fabric error's first argument is an
ErrorText: its message, as a str, that also answers code(), name(), str(), retriable() and fatal() from the
error's type (fabric.common.errors gives each its Kafka code).
"""
from __future__ import annotations

import builtins
from typing import Any

# librdkafka's own errors, in its order from -199
LOCAL = ("_BAD_MSG _BAD_COMPRESSION _DESTROY _FAIL _TRANSPORT _CRIT_SYS_RESOURCE _RESOLVE _MSG_TIMED_OUT "
         "_PARTITION_EOF _UNKNOWN_PARTITION _FS _UNKNOWN_TOPIC _ALL_BROKERS_DOWN _INVALID_ARG _TIMED_OUT "
         "_QUEUE_FULL _ISR_INSUFF _NODE_UPDATE _SSL _WAIT_COORD _UNKNOWN_GROUP _IN_PROGRESS _PREV_IN_PROGRESS "
         "_EXISTING_SUBSCRIPTION _ASSIGN_PARTITIONS _REVOKE_PARTITIONS _CONFLICT _STATE _UNKNOWN_PROTOCOL "
         "_NOT_IMPLEMENTED _AUTHENTICATION _NO_OFFSET _OUTDATED _TIMED_OUT_QUEUE _UNSUPPORTED_FEATURE _WAIT_CACHE "
         "_INTR _KEY_SERIALIZATION _VALUE_SERIALIZATION _KEY_DESERIALIZATION _VALUE_DESERIALIZATION _PARTIAL "
         "_READ_ONLY _NOENT _UNDERFLOW _INVALID_TYPE _RETRY _PURGE_QUEUE _PURGE_INFLIGHT _FATAL _INCONSISTENT "
         "_GAPLESS_GUARANTEE _MAX_POLL_EXCEEDED _UNKNOWN_BROKER _NOT_CONFIGURED _FENCED _APPLICATION "
         "_ASSIGNMENT_LOST _NOOP _AUTO_OFFSET_RESET _LOG_TRUNCATION").split()
# Kafka's protocol errors a client meets, by code (librdkafka's names)
BROKER = {
    -1: "UNKNOWN", 0: "NO_ERROR", 1: "OFFSET_OUT_OF_RANGE", 2: "INVALID_MSG", 3: "UNKNOWN_TOPIC_OR_PART",
    4: "INVALID_MSG_SIZE", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_FOR_PARTITION", 7: "REQUEST_TIMED_OUT",
    8: "BROKER_NOT_AVAILABLE", 9: "REPLICA_NOT_AVAILABLE", 10: "MSG_SIZE_TOO_LARGE", 11: "STALE_CTRL_EPOCH",
    12: "OFFSET_METADATA_TOO_LARGE", 13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 17: "TOPIC_EXCEPTION", 18: "RECORD_LIST_TOO_LARGE",
    19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 21: "INVALID_REQUIRED_ACKS",
    22: "ILLEGAL_GENERATION", 23: "INCONSISTENT_GROUP_PROTOCOL", 24: "INVALID_GROUP_ID", 25: "UNKNOWN_MEMBER_ID",
    26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS", 28: "INVALID_COMMIT_OFFSET_SIZE",
    29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED",
    32: "INVALID_TIMESTAMP", 35: "UNSUPPORTED_VERSION", 36: "TOPIC_ALREADY_EXISTS", 37: "INVALID_PARTITIONS",
    38: "INVALID_REPLICATION_FACTOR", 40: "INVALID_CONFIG", 41: "NOT_CONTROLLER", 42: "INVALID_REQUEST",
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE", 49: "INVALID_PRODUCER_ID_MAPPING", 50: "INVALID_TRANSACTION_TIMEOUT",
    51: "CONCURRENT_TRANSACTIONS", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 56: "KAFKA_STORAGE_ERROR",
    58: "SASL_AUTHENTICATION_FAILED", 59: "UNKNOWN_PRODUCER_ID", 68: "NON_EMPTY_GROUP", 69: "GROUP_ID_NOT_FOUND",
    70: "FETCH_SESSION_ID_NOT_FOUND", 71: "INVALID_FETCH_SESSION_EPOCH", 74: "FENCED_LEADER_EPOCH",
    77: "STALE_BROKER_EPOCH", 78: "OFFSET_NOT_AVAILABLE", 80: "PREFERRED_LEADER_NOT_AVAILABLE",
    81: "GROUP_MAX_SIZE_REACHED", 82: "FENCED_INSTANCE_ID", 83: "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    84: "ELECTION_NOT_NEEDED", 86: "GROUP_SUBSCRIBED_TO_TOPIC", 87: "INVALID_RECORD", 88: "UNSTABLE_OFFSET_COMMIT",
    90: "PRODUCER_FENCED", 95: "INVALID_UPDATE_VERSION", 101: "DUPLICATE_BROKER_REGISTRATION",
    103: "INCONSISTENT_TOPIC_ID",
}
NAMES = {**BROKER, **{-199 + i: name for i, name in enumerate(LOCAL)}}
CODES = {name: code for code, name in NAMES.items()}


class ErrorText(str):
    """An error's message (a str: printed, compared and sent as the message is) that answers confluent-kafka's
    KafkaError methods from the error's type `kind`: `except KafkaException as e: e.args[0].code()`."""

    kind: Any
    abortable = False  # set on the error ending a transactional commit that committed nothing

    def __new__(cls, text: builtins.str, kind: Any) -> ErrorText:
        self = super().__new__(cls, text)
        self.kind = kind
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return ErrorText, (builtins.str(self), self.kind)

    def code(self) -> int:
        return int(self.kind.errno)

    def name(self) -> builtins.str:
        return NAMES.get(self.code(), f"ERR_{self.code()}")

    def str(self) -> builtins.str:
        """The message (confluent-kafka's human-readable string)."""
        return builtins.str.__str__(self)

    def retriable(self) -> bool:
        return bool(self.kind.retriable)

    def fatal(self) -> bool:
        return bool(self.kind.fatal)

    def txn_requires_abort(self) -> bool:
        """Whether the transaction must be aborted (an error ending a transactional producer's commit, which
        committed nothing: abort_transaction() readies the producer again)."""
        return self.abortable
