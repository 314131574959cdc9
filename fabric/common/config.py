"""Topic and client configuration: Kafka's names, Kafka's defaults, validated with clear errors."""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from fabric.common.codecs import CODEC_NAMES, unsupported
from fabric.common.errors import IgnoredConfigWarning, InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1  # partition numbers are 32-bit, as Kafka's (a cluster caps a topic far lower)


@dataclass(frozen=True)
class Setting:
    """One config key: its default and a parser that returns the typed value or raises ValueError. `text`: the
    value must be given as a str (an id: str() of bytes or a list would make one up)."""

    default: Any
    parse: Callable[[str], Any]
    doc: str
    text: bool = False


def _long(lo: int, hi: int = LONG_MAX) -> Callable[[str], int]:
    def parse(text: str) -> int:
        wanted = f"must be an integer from {lo} to {hi}"
        try:
            value = int(str(text).strip())
        except ValueError:
            raise ValueError(wanted) from None
        if not lo <= value <= hi:
            raise ValueError(wanted)
        return value
    return parse


def _ms_or_forever(text: str) -> float:
    """Milliseconds from 0, or inf (kafka-python's float('inf')): forever."""
    if str(text).strip().lower() in ("inf", "infinity"):
        return float("inf")
    try:
        return float(_long(0, LONG_MAX)(text))
    except ValueError:
        raise ValueError(f"must be an integer from 0 to {LONG_MAX}, or float('inf') for forever") from None


def _bool(text: str) -> bool:
    """true or false, any case (Kafka's boolean configs)."""
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise ValueError("must be true or false")
    return value == "true"


def _choice(*options: str, aliases: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """One of `options`, or one of the `aliases` of one (librdkafka's names for the same choice)."""
    def parse(text: str) -> str:
        value = str(text).strip()
        value = (aliases or {}).get(value, value)
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value
    return parse


def _preferred(*options: str) -> Callable[[str], str]:
    """One of `options`, or a comma-separated list of them in order of preference (librdkafka's form, e.g. its
    default "range,roundrobin"): the first is used."""
    choose = _choice(*options)

    def parse(text: str) -> str:
        return choose(str(text).split(",")[0])
    return parse


def _codec(*options: str) -> Callable[[str], str]:
    """A choice of codecs (compression.type), explaining Kafka's gzip and snappy."""
    choose = _choice(*options)

    def parse(text: str) -> str:
        why = unsupported(str(text))
        if why is not None:
            raise ValueError(f"must be one of {', '.join(options)}: {why}")
        return choose(text)
    return parse


def _identifier(unset: str) -> Callable[[str], str]:
    """A non-empty id (Kafka refuses an empty transactional.id or group.instance.id); left out (or None) it is
    unset (""), meaning `unset`."""
    def parse(text: str) -> str:
        if not text:
            raise ValueError(f"must not be empty; leave it out (or None) for {unset}")
        return text
    return parse


def _ratio(text: str) -> float:
    """A number from 0 to 1 (min.cleanable.dirty.ratio)."""
    wanted = "must be a number from 0 to 1"
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(wanted) from None
    if not 0 <= value <= 1:
        raise ValueError(wanted)
    return value


def _policy(text: str) -> str:
    """Kafka's cleanup.policy: delete, compact, or both (a comma-separated list, in either order)."""
    parts = sorted({part.strip() for part in str(text).split(",")})
    if not parts or any(part not in ("compact", "delete") for part in parts):
        raise ValueError("must be delete, compact, or compact,delete")
    return ",".join(parts)


TOPIC_SETTINGS: dict[str, Setting] = {
    "cleanup.policy": Setting("delete", _policy, "delete: time/size retention; compact: keep the latest record "
                              "of each key (null-valued records are tombstones); compact,delete: both"),
    "min.cleanable.dirty.ratio": Setting(0.5, _ratio, "compact once this share of the closed segments' bytes "
                                         "has not been cleaned yet"),
    "min.compaction.lag.ms": Setting(0, _long(0), "a record stays uncompacted for at least this long"),
    "max.compaction.lag.ms": Setting(LONG_MAX, _long(1), "a record is compacted within about this long, whatever "
                                     "the dirty ratio"),
    "delete.retention.ms": Setting(24 * 3600 * 1000, _long(0), "how long a tombstone is kept once its segment "
                                   "is cleaned (readers have this long to see the delete)"),
    "segment.bytes": Setting(1 << 30, _long(1024, INT_MAX), "roll a new segment past this size"),
    "segment.ms": Setting(7 * 24 * 3600 * 1000, _long(1), "roll a new segment once its records span this long, "
                                                    "or (maintenance) its first is this old"),
    "retention.ms": Setting(7 * 24 * 3600 * 1000, _long(-1), "delete segments older than this; -1 keeps all"),
    "retention.bytes": Setting(-1, _long(-1), "delete old segments past this partition size; -1 keeps all"),
    "max.message.bytes": Setting(1048588, _long(0, INT_MAX), "largest record batch (one append) accepted: "
                                  "the bytes of its records' keys, values and headers"),
    "index.interval.bytes": Setting(4096, _long(0, INT_MAX), "bytes between offset-index entries"),
    "flush.messages": Setting(LONG_MAX, _long(1), "fsync after this many messages"),
    "flush.ms": Setting(LONG_MAX, _long(0), "fsync after this many milliseconds"),
    "message.timestamp.type": Setting("CreateTime", _choice("CreateTime", "LogAppendTime"),
                                      "record timestamps: the producer's, or the log's at append"),
    "min.insync.replicas": Setting(1, _long(1), "fewest in-sync replicas for an acks=all write and for the high "
                                   "watermark to advance (a replicated topic's; the embedded fabric has one replica)"),
    "unclean.leader.election.enable": Setting(False, _bool, "elect an out-of-sync replica when no in-sync one is "
                                              "alive (available again, but records may be lost)"),
    "compression.type": Setting("producer", _codec("producer", "uncompressed", *CODEC_NAMES[1:]),
                                "codec stored on disk; 'producer' keeps the producer's ('uncompressed': none)"),
}


def _text(value: Any) -> str:
    """A parsed config value as a store keeps it: Kafka's spelling ("true", not "True") for booleans."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _error(kind: str, key: str, value: object, why: str, table: Mapping[str, Setting]) -> InvalidConfigError:
    if key not in table and key.replace(".", "_") not in table:  # (a client's key may be given with '.' for '_')
        return InvalidConfigError(
            f"unknown {kind} config {key!r}; known keys: {', '.join(sorted(table))}")
    return InvalidConfigError(f"invalid value {value!r} for {kind} config {key!r}: {why}")


def _mapping(config: object, what: str) -> Mapping[str, object]:
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidConfigError(
            f"{what} must be a dict of Kafka config names to values, got {type(config).__name__}; "
            "e.g. {'retention.ms': 86400000}")
    return config


def validate_topic_config(config: Mapping[str, object] | None) -> dict[str, str]:
    """Check a partial topic config (Kafka dotted keys) and return it normalised to strings."""
    out: dict[str, str] = {}
    for key, value in _mapping(config, "a topic config").items():
        setting = TOPIC_SETTINGS.get(key)
        if setting is None:
            raise _error("topic", key, value, "", TOPIC_SETTINGS)
        try:
            out[key] = _text(setting.parse(str(value)))
        except ValueError as exc:
            raise _error("topic", key, value, str(exc), TOPIC_SETTINGS) from None
    return out


def validate_topic_config_changes(changes: Mapping[str, object]) -> dict[str, str | None]:
    """Check an alter request: a value sets an override (checked as validate_topic_config does), None removes
    one, which must name a known key (removing an override that is not set changes nothing, as in Kafka)."""
    out: dict[str, str | None] = {}
    for key, value in _mapping(changes, "a topic config change").items():
        if value is not None:
            out.update(validate_topic_config({key: value}))
        elif key in TOPIC_SETTINGS:
            out[key] = None
        else:
            raise _error("topic", key, value, "", TOPIC_SETTINGS)
    return out


class TopicConfig:
    """A topic's effective config: overrides on top of Kafka's defaults, typed attribute access."""

    def __init__(self, overrides: Mapping[str, object] | None = None) -> None:
        self.overrides = validate_topic_config(overrides)
        self._values: dict[str, Any] = {}  # each key's value, parsed once (every append reads a few)

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            setting = TOPIC_SETTINGS[key]
            raw = self.overrides.get(key)
            value = self._values[key] = setting.default if raw is None else setting.parse(raw)
            return value

    def effective(self) -> dict[str, str]:
        """Every key with its effective value, as Kafka's describe --all shows."""
        return {key: _text(self[key]) for key in sorted(TOPIC_SETTINGS)}


PRODUCER_SETTINGS: dict[str, Setting] = {
    "acks": Setting("all", _choice("0", "1", "all", "-1"), "0, 1 or all (-1): when a send counts as done"),
    "linger_ms": Setting(5, _long(0, INT_MAX), "wait up to this long to fill a batch"),
    "batch_size": Setting(1 << 20, _long(1, INT_MAX), "bytes of records per batch before it is sent"),
    "compression_type": Setting("none", _codec(*CODEC_NAMES), "Arrow IPC buffer compression"),
    "client_id": Setting("", str, "a name for logs"),
    "max_request_size": Setting(1048576 * 64, _long(1, INT_MAX), "largest record send() accepts, in bytes"),
    "enable_idempotence": Setting(True, _bool, "with acks=all, a retried batch is never written twice"),
    "max_in_flight_requests_per_connection": Setting(5, _long(1, INT_MAX), "batches of one partition in flight "
                                                     "at once (at most 5 for idempotence; without it, a retry "
                                                     "may reorder the batches)"),
    "retries": Setting(INT_MAX, _long(0, INT_MAX), "how often a send retries a retriable error"),
    "retry_backoff_ms": Setting(100, _long(0, INT_MAX), "wait between retries"),
    "delivery_timeout_ms": Setting(120000, _long(1, INT_MAX), "a send fails or succeeds within this long of its "
                                   "batch's creation, retries included; at least linger_ms + request_timeout_ms"),
    "request_timeout_ms": Setting(30000, _long(1, INT_MAX), "the longest one request of a send may take (an append "
                                  "and its acks=all replication, a metadata refresh); then it is retried"),
    "transactional_id": Setting("", _identifier("a producer without transactions"),
                                "send in transactions (init_transactions, begin_transaction, "
                                "commit_transaction): records and offsets are published together or not at all",
                                text=True),
    "transaction_timeout_ms": Setting(60000, _long(1, INT_MAX), "on a cluster with data nodes, the coordinator "
                                      "aborts a transaction still undecided this long after it began"),
}

CONSUMER_SETTINGS: dict[str, Setting] = {
    "auto_offset_reset": Setting("latest", _choice("earliest", "latest", "none", aliases={
                                     "smallest": "earliest", "beginning": "earliest", "largest": "latest",
                                     "end": "latest", "error": "none"}),
                                 "where to start without a committed offset (librdkafka's smallest/beginning, "
                                 "largest/end and error too)"),
    "enable_auto_commit": Setting(True, _bool, "commit positions periodically in poll"),
    "enable_auto_offset_store": Setting(True, _bool, "store the position of each record poll() returns for the "
                                        "next commit; false: only what store_offsets() stores (confluent-kafka's "
                                        "at-least-once pattern)"),
    "auto_commit_interval_ms": Setting(5000, _long(0, INT_MAX), "auto-commit period"),
    "max_poll_records": Setting(500, _long(1, INT_MAX), "most records one poll() returns"),
    "fetch_max_bytes": Setting(52428800, _long(1, INT_MAX), "most bytes one poll_batch() reads"),
    "client_rack": Setting("", str, "the consumer's rack: it reads a replicated partition from an in-sync "
                           "replica in this rack when there is one (KIP-392), else from the leader"),
    "fetch_max_wait_ms": Setting(500, _long(0, INT_MAX), "how long the server holds a fetch at a partition's end "
                                 "for records to arrive (long polling)"),
    "client_id": Setting("", str, "a name for logs"),
    "session_timeout_ms": Setting(45000, _long(1, INT_MAX), "group member is dead without heartbeats this long"),
    "heartbeat_interval_ms": Setting(3000, _long(1, INT_MAX), "how often members heartbeat"),
    "max_poll_interval_ms": Setting(300000, _long(1, INT_MAX), "longest gap between polls"),
    "partition_assignment_strategy": Setting("range", _preferred("range", "roundrobin", "cooperative-sticky"),
                                             "how the group splits partitions (a comma-separated list: the "
                                             "first)"),
    "group_instance_id": Setting("", _identifier("a dynamic group member"), "static membership id", text=True),
    "isolation_level": Setting("read_committed", _choice("read_committed", "read_uncommitted"),
                               "read_committed: read a replicated partition below its last stable offset, "
                               "skipping aborted transactions; read_uncommitted: up to the high watermark"),
    "retry_backoff_ms": Setting(100, _long(0, INT_MAX), "wait between fetch attempts after a retriable error"),
    "consumer_timeout_ms": Setting(float("inf"), _ms_or_forever, "how long iterating the consumer (for record in "
                                   "consumer) waits for a record before the loop ends; default forever"),
}
# What confluent-kafka's Consumer (fabric.kafka.Consumer) takes besides CONSUMER_SETTINGS
CONFLUENT_CONSUMER_SETTINGS: dict[str, Setting] = {
    "enable_partition_eof": Setting(False, _bool, "a poll that finds nothing answers a message whose error is "
                                    "KafkaError._PARTITION_EOF, once per partition each time its end is reached"),
}


_CONNECTION = "the fabric is named by fabric.connect(url): file:///dir, or fabric://host:port[,host:port]"
_SECURITY = ("a service is reached with TLS by fabric+tls://host:port and authenticates the token of ?token= in "
             "the URL or $FABRIC_TOKEN")
_TRANSPORT = ("the fabric's transport manages its own connections (one fabric protocol connection per server, opened "
              "again once the server closed it idle; Arrow Flight for the rest) and timeouts (?timeout_ms= in the "
              "fabric:// URL)")
_ERRORS = "every error is raised by the call it concerns (or given to a send's callback)"
_METRICS = "clients' metrics are their metrics() (Prometheus on the servers)"
_LOGS = "clients log with Python's logging, under the logger fabric"
_CREATE = "topics are created by create_topic() or `fabric topics create`, never by a send or a subscription"
_BUFFERED = "buffered records are bounded by batch_size per topic besides its batch in flight"
_PREFETCH = "a consumer buffers one fetch (fetch_max_bytes) at a time"
_ADMIN_RETRIES = "an admin call retries a retriable error with the fabric's own backoff, within its timeout"
# Kafka client configs (kafka-python's names, '.' or '_') that mean nothing here: each is accepted with a warning
# saying why, so code written for Kafka runs unchanged instead of failing on its first line.
IGNORED_CLIENT_SETTINGS: dict[str, str] = {
    "bootstrap_servers": _CONNECTION, "api_version": "the fabric has one protocol version",
    "security_protocol": _SECURITY, "sasl_mechanism": _SECURITY, "sasl_plain_username": _SECURITY,
    "sasl_plain_password": _SECURITY, "ssl_cafile": _SECURITY, "ssl_certfile": _SECURITY, "ssl_keyfile": _SECURITY,
    "ssl_check_hostname": _SECURITY, "request_timeout_ms": _TRANSPORT, "connections_max_idle_ms": _TRANSPORT,
    "reconnect_backoff_ms": _TRANSPORT, "reconnect_backoff_max_ms": _TRANSPORT, "send_buffer_bytes": _TRANSPORT,
    "receive_buffer_bytes": _TRANSPORT, "metadata_max_age_ms": "topic metadata is refreshed every 5 s and on "
    "every NotLeaderError", "buffer_memory": "buffered records are bounded by batch_size per "
    "topic besides its batch in flight", "max_block_ms": "send() waits for a full batch only while the one before "
    "it is in flight, within delivery_timeout_ms", "fetch_min_bytes": "a fetch answers as soon as "
    "a record is there (fetch_max_wait_ms bounds the wait)", "max_partition_fetch_bytes": "fetch_max_bytes bounds "
    "a poll", "check_crcs": "every frame's CRC is always checked", "exclude_internal_topics": "internal topics "
    "(__consumer_offsets) are never listed or subscribed",
    # librdkafka's (confluent-kafka's) and kafka-python's names with nothing to do here
    "sasl_mechanisms": _SECURITY, "sasl_username": _SECURITY, "sasl_password": _SECURITY,
    "ssl_ca_location": _SECURITY, "ssl_certificate_location": _SECURITY, "ssl_key_location": _SECURITY,
    "ssl_key_password": _SECURITY, "ssl_context": _SECURITY, "ssl_password": _SECURITY,
    "socket_timeout_ms": _TRANSPORT, "socket_keepalive_enable": _TRANSPORT,
    "api_version_request": "the fabric has one protocol version",
    "api_version_auto_timeout_ms": "the fabric has one protocol version",
    "error_cb": _ERRORS, "throttle_cb": "the fabric applies no client quotas", "stats_cb": _METRICS,
    "statistics_interval_ms": _METRICS, "metric_reporters": _METRICS, "metrics_num_samples": _METRICS,
    "metrics_sample_window_ms": _METRICS, "logger": _LOGS, "debug": _LOGS, "log_level": _LOGS,
    "allow_auto_create_topics": _CREATE, "queue_buffering_max_messages": _BUFFERED,
    "queue_buffering_max_kbytes": _BUFFERED, "batch_num_messages": "a batch is bounded by batch_size bytes",
    "message_max_bytes": "a record's size is bounded by the topic's max.message.bytes, checked by the server",
    "fetch_message_max_bytes": "fetch_max_bytes bounds a poll", "queued_max_messages_kbytes": _PREFETCH,
    "queued_min_messages": _PREFETCH, "partitioner": "records with a key go to the partition of Kafka's murmur2 "
    "hash of it (the Java client's), the others to a partition per batch (KIP-480's sticky partitioner)",
    "leave_group_on_close": "close() always leaves the group (a static member keeps its place: group_instance_id)",
    # (an admin client's; a producer's and a consumer's are theirs)
    "retry_backoff_ms": _ADMIN_RETRIES, "retry_backoff_max_ms": _ADMIN_RETRIES,
}
# librdkafka's names for settings the fabric's clients take under Kafka's (Java's, kafka-python's) names
CLIENT_ALIASES: dict[str, str] = {"queue_buffering_max_ms": "linger_ms", "message_timeout_ms": "delivery_timeout_ms",
                                  "fetch_wait_max_ms": "fetch_max_wait_ms", "compression_codec": "compression_type"}


def merged_client_config(kind: str, conf: Mapping[str, Any] | None, config: dict[str, Any]) -> dict[str, Any]:
    """A client's config from confluent-kafka's dict (`conf`) and the keywords together; a key given both ways
    (`linger.ms` and `linger_ms`) with two values is refused."""
    if conf is None:
        return config
    if not isinstance(conf, Mapping) or not all(isinstance(k, str) for k in conf):
        raise InvalidConfigError(f"{kind}() takes a dict of Kafka's config names (e.g. {{'linger.ms': 5}}), or "
                                 f"keywords, got {type(conf).__name__}")
    merged = dict(config)
    named = {k.replace(".", "_"): k for k in config}
    for key, value in conf.items():
        other = named.get(key.replace(".", "_"))
        if other is not None and config[other] != value:
            raise InvalidConfigError(f"{kind} config {key!r} is given twice, {value!r} in the dict and {other}="
                                     f"{config[other]!r}; give one")
        merged.setdefault(other or key, value)
    return merged


def client_config(kind: str, table: Mapping[str, Setting], given: Mapping[str, object]) -> dict[str, Any]:
    """Validate client keyword config (Kafka names with '_' for '.') and fill in defaults. A Kafka config the
    fabric does not use (IGNORED_CLIENT_SETTINGS) is dropped with an IgnoredConfigWarning naming why."""
    out: dict[str, Any] = {}
    for key, value in given.items():
        norm = key.replace(".", "_")
        norm = CLIENT_ALIASES.get(norm, norm) if norm not in table else norm
        setting = table.get(norm)
        if setting is None and norm in IGNORED_CLIENT_SETTINGS:
            warnings.warn(f"{kind} config {key!r} is ignored: {IGNORED_CLIENT_SETTINGS[norm]}",
                          IgnoredConfigWarning, stacklevel=4)
            continue
        if setting is None:
            raise _error(kind, key, value, "", table)
        if value is None:  # left unset (kafka-python's None: compression_type, transactional_id, ...)
            continue
        if setting.text and not isinstance(value, str):
            raise _error(kind, key, value, f"must be a string, got {type(value).__name__}", table)
        if isinstance(value, bool):
            value = str(value).lower()
        try:
            out[norm] = setting.parse(str(value))
        except ValueError as exc:
            raise _error(kind, key, value, str(exc), table) from None
    for key, setting in table.items():
        out.setdefault(key, setting.default)
    return out
