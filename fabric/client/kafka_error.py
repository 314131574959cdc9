"""confluent-kafka's KafkaError: an error as a value (its code, name and reason), with the codes a confluent-kafka
program compares `msg.error().code()` and `err.args[0].code()` against, librdkafka's own (negative, from
`_BAD_MSG` to `_LOG_TRUNCATION`) and Kafka's protocol errors. The fabric raises its errors as exceptions
(fabric.errors: KafkaException is the base of all of them); this class makes a program that imports and compares
these names run."""
from __future__ import annotations

import builtins
from typing import Any

# librdkafka's own errors, in its order from -199
_LOCAL = ("_BAD_MSG _BAD_COMPRESSION _DESTROY _FAIL _TRANSPORT _CRIT_SYS_RESOURCE _RESOLVE _MSG_TIMED_OUT "
          "_PARTITION_EOF _UNKNOWN_PARTITION _FS _UNKNOWN_TOPIC _ALL_BROKERS_DOWN _INVALID_ARG _TIMED_OUT "
          "_QUEUE_FULL _ISR_INSUFF _NODE_UPDATE _SSL _WAIT_COORD _UNKNOWN_GROUP _IN_PROGRESS _PREV_IN_PROGRESS "
          "_EXISTING_SUBSCRIPTION _ASSIGN_PARTITIONS _REVOKE_PARTITIONS _CONFLICT _STATE _UNKNOWN_PROTOCOL "
          "_NOT_IMPLEMENTED _AUTHENTICATION _NO_OFFSET _OUTDATED _TIMED_OUT_QUEUE _UNSUPPORTED_FEATURE _WAIT_CACHE "
          "_INTR _KEY_SERIALIZATION _VALUE_SERIALIZATION _KEY_DESERIALIZATION _VALUE_DESERIALIZATION _PARTIAL "
          "_READ_ONLY _NOENT _UNDERFLOW _INVALID_TYPE _RETRY _PURGE_QUEUE _PURGE_INFLIGHT _FATAL _INCONSISTENT "
          "_GAPLESS_GUARANTEE _MAX_POLL_EXCEEDED _UNKNOWN_BROKER _NOT_CONFIGURED _FENCED _APPLICATION "
          "_ASSIGNMENT_LOST _NOOP _AUTO_OFFSET_RESET _LOG_TRUNCATION").split()
# Kafka's protocol errors a client meets, by code (librdkafka's names)
_BROKER = {
    -1: "UNKNOWN", 0: "NO_ERROR", 1: "OFFSET_OUT_OF_RANGE", 2: "INVALID_MSG", 3: "UNKNOWN_TOPIC_OR_PART",
    4: "INVALID_MSG_SIZE", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_FOR_PARTITION", 7: "REQUEST_TIMED_OUT",
    8: "BROKER_NOT_AVAILABLE", 9: "REPLICA_NOT_AVAILABLE", 10: "MSG_SIZE_TOO_LARGE", 12: "OFFSET_METADATA_TOO_LARGE",
    13: "NETWORK_EXCEPTION", 14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR", 17: "TOPIC_EXCEPTION", 18: "RECORD_LIST_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS",
    20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND", 21: "INVALID_REQUIRED_ACKS", 22: "ILLEGAL_GENERATION",
    23: "INCONSISTENT_GROUP_PROTOCOL", 24: "INVALID_GROUP_ID", 25: "UNKNOWN_MEMBER_ID",
    26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS", 28: "INVALID_COMMIT_OFFSET_SIZE",
    29: "TOPIC_AUTHORIZATION_FAILED", 30: "GROUP_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED",
    32: "INVALID_TIMESTAMP", 35: "UNSUPPORTED_VERSION", 36: "TOPIC_ALREADY_EXISTS", 37: "INVALID_PARTITIONS",
    38: "INVALID_REPLICATION_FACTOR", 40: "INVALID_CONFIG", 41: "NOT_CONTROLLER", 42: "INVALID_REQUEST",
    45: "OUT_OF_ORDER_SEQUENCE_NUMBER", 46: "DUPLICATE_SEQUENCE_NUMBER", 47: "INVALID_PRODUCER_EPOCH",
    48: "INVALID_TXN_STATE", 49: "INVALID_PRODUCER_ID_MAPPING", 50: "INVALID_TRANSACTION_TIMEOUT",
    51: "CONCURRENT_TRANSACTIONS", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 56: "KAFKA_STORAGE_ERROR",
    58: "SASL_AUTHENTICATION_FAILED", 59: "UNKNOWN_PRODUCER_ID", 69: "GROUP_ID_NOT_FOUND", 74: "FENCED_LEADER_EPOCH",
    81: "GROUP_MAX_SIZE_REACHED", 82: "FENCED_INSTANCE_ID", 86: "GROUP_SUBSCRIBED_TO_TOPIC", 90: "PRODUCER_FENCED",
}
_NAMES = {**_BROKER, **{-199 + i: name for i, name in enumerate(_LOCAL)}}


class KafkaError:
    """An error as confluent-kafka gives it to a program: `KafkaError(code, reason)`, with code(), name(), str(),
    fatal(), retriable() and txn_requires_abort(); equal to another of the same code and to the code itself."""

    def __init__(self, error: int, reason: str | None = None, fatal: bool = False, retriable: bool = False,
                 txn_requires_abort: bool = False) -> None:
        self._code, self._reason = int(error), reason
        self._fatal, self._retriable, self._abort = fatal, retriable, txn_requires_abort

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _NAMES.get(self._code, f"ERR_{self._code}")

    def str(self) -> str:
        """The reason, else the code's name (confluent-kafka's human-readable string)."""
        return self._reason or self.name()

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._abort

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        return isinstance(other, int) and self._code == other

    def __hash__(self) -> int:
        return hash(self._code)

    def __str__(self) -> builtins.str:  # (`str` is the method above within the class)
        return self.str()

    def __repr__(self) -> builtins.str:
        return f"KafkaError{{code={self.name()},val={self._code},str=\"{self.str()}\"}}"


for _code, _name in _NAMES.items():
    setattr(KafkaError, _name, _code)
