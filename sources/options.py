"""Options of the fabric Spark source, named as Spark's Kafka source's.

Everything is parsed and validated once, on the driver, into `SourceOptions`; a bad option fails the
query before it starts with a message naming the option and how to fix it.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

from fabric.client.cluster import Cluster
from fabric.common.errors import InvalidConfigError, InvalidGroupError, UnknownTopicError
from fabric.common.names import validate_group, validate_topic
from fabric.common.redaction import redact_url
from fabric.common.types import TopicPartition
from fabric.spark.options import (
    BOOTSTRAP_OPTION,
    CLIENT_RACK_OPTION,
    get_option,
    refuse_kafka_options,
    resolve_client_rack,
    resolve_url,
)

SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
ENDING_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
SOURCE_OPTIONS = SUBSCRIPTIONS + ENDING_OPTIONS + (
    "url", BOOTSTRAP_OPTION, "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "maxBytesPerTrigger", "minPartitions", "failOnDataLoss", "includeHeaders", "groupId", "groupIdPrefix",
    CLIENT_RACK_OPTION)
STREAMING_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "maxBytesPerTrigger")
EARLIEST, LATEST = -2, -1  # the special offsets of Kafka's JSON offset specs
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000.0  # Kafka's source's default, 15m
# Spark's time strings (JavaUtils.timeStringAsMs): a whole number and a unit, milliseconds when none is given
DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
DURATION_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
               "d": 86_400_000}
GENERATED_GROUP_SUFFIX = 37  # "-" and a uuid4, appended to groupIdPrefix
KAFKA_EQUIVALENTS = {  # what to write instead of Spark Kafka's kafka.* consumer configs
    "group.id": "use option 'groupId' instead (the group the query commits its offsets to), or 'groupIdPrefix'",
    "client.rack": f"use option '{CLIENT_RACK_OPTION}' instead",
    "isolation.level": "the source always reads committed records only (read_committed); remove it",
}


@dataclass(frozen=True)
class Subscription:
    """Which topics (or exact partitions) a query reads: exactly one of subscribe/subscribePattern/assign."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def topic_names(self, cluster: Cluster) -> list[str]:
        """The topics this subscription covers now (a pattern is re-evaluated on every call)."""
        if self.kind == "subscribePattern":
            regex = re.compile(self.pattern)
            return [t for t in cluster.coordinator.list_topics() if regex.fullmatch(t)]
        if self.kind == "assign":
            return sorted({t for t, _ in self.assigned})
        return list(self.topics)


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: earliest, latest, group, offsets (JSON), timestamp, or timestamps."""

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of one fabric read."""

    url: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: float = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_bytes_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    group_id: str | None = None
    group_id_prefix: str | None = None
    client_rack: str | None = None  # None: each task reads $FABRIC_CLIENT_RACK on its executor


def _error(option: str, value: object, why: str) -> InvalidConfigError:
    return InvalidConfigError(f"invalid value {value!r} for fabric source option {option!r}: {why}")


def _positive(options: Mapping[str, Any], name: str) -> int | None:
    text = get_option(options, name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise _error(name, text, "must be a positive whole number") from None
    if value < 1:
        raise _error(name, text, "must be a positive whole number")
    return value


def _duration_ms(options: Mapping[str, Any], name: str, default_ms: float) -> float:
    """A duration in Spark's time-string syntax ("30s", "5m", "1h", "500ms"; a bare number is milliseconds)."""
    text = get_option(options, name)
    if text is None:
        return default_ms
    match = DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise _error(name, text, "must be a duration such as 500ms, 30s, 5m, 1h or 1d (a bare number is "
                                 "milliseconds)")
    return int(match[1]) * DURATION_MS[match[2]]


def _bool(options: Mapping[str, Any], name: str, default: bool) -> bool:
    text = get_option(options, name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise _error(name, text, "must be true or false")
    return text.strip().lower() == "true"


def _json_partitions(name: str, text: str, leaf: str) -> dict[TopicPartition, Any]:
    """Parse {"topic": {"0": x, ...}} (leaf = "offsets"/"timestamps") or, for assign, {"topic": [0, 1]}."""
    example = '{"topicA":[0,1]}' if leaf == "partitions" else '{"topicA":{"0":23,"1":-2}}'
    try:
        parsed = json.loads(text)
    except ValueError:
        raise _error(name, text, f"expected JSON like {example}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise _error(name, text, f"expected a non-empty JSON object like {example}")
    out: dict[TopicPartition, Any] = {}
    for topic, parts in parsed.items():
        validate_topic(topic)
        items: list[tuple[Any, Any]]
        if leaf == "partitions" and isinstance(parts, list):
            if not parts:  # it would read nothing of the topic, silently
                raise _error(name, text, f"topic {topic!r} lists no partitions: name them, as in {example}, or "
                                         "leave the topic out")
            items = [(p, None) for p in parts]
        elif leaf != "partitions" and isinstance(parts, dict):
            items = list(parts.items())
        else:
            raise _error(name, text, f"topic {topic!r} is not mapped to its partitions as in {example}")
        for p, value in items:
            try:  # JSON true/false and 0.7 are no partitions (int() would take them as 1, 0 and 0)
                partition = int(p) if not isinstance(p, (bool, float)) else None
            except (TypeError, ValueError):
                partition = None
            if partition is None:
                raise _error(name, text, f"partition {p!r} of topic {topic!r} is not a whole number")
            if partition < 0 or (leaf != "partitions" and (not isinstance(value, int) or isinstance(value, bool))):
                raise _error(name, text, f"{topic}-{p}: partitions are numbers >= 0 and {leaf} are integers")
            if leaf == "timestamps" and value < 0:
                raise _error(name, text, f"{topic}-{p}: timestamps are milliseconds since the epoch, >= 0 (for the "
                                         "earliest or latest offset use startingOffsets with -2 or -1)")
            out[(topic, partition)] = value
    return out


def _subscription(options: Mapping[str, Any]) -> Subscription:
    given = [(n, text) for n in SUBSCRIPTIONS if (text := get_option(options, n)) is not None]
    if len(given) != 1:
        names = ", ".join(n for n, _ in given) or "none"
        raise InvalidConfigError(
            f"the fabric source needs exactly one of 'subscribe' (comma-separated topics), 'subscribePattern' "
            f"(a regex) or 'assign' (JSON like {{\"topicA\":[0,1]}}); got {names}")
    name, text = given[0]
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not topics:
            raise _error(name, text, "name at least one topic, e.g. subscribe=orders,payments")
        return Subscription(name, topics=tuple(validate_topic(t) for t in topics))
    if name == "subscribePattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise _error(name, text, f"not a valid regular expression ({exc})") from None
        return Subscription(name, pattern=text)
    return Subscription(name, assigned=tuple(sorted(_json_partitions(name, text, "partitions"))))


def _timestamp(options: Mapping[str, Any], name: str) -> int | None:
    text = get_option(options, name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise _error(name, text, "must be milliseconds since the epoch, e.g. 1767225600000") from None
    if value < 0:
        raise _error(name, text, "must be milliseconds since the epoch, >= 0 (for the earliest or latest offset "
                                 f"use {name.replace('Timestamp', 'Offsets')}=earliest or latest)")
    return value


def _offset_spec(options: Mapping[str, Any], prefix: str, streaming: bool) -> OffsetSpec:
    """startingOffsets/endingOffsets with their timestamp variants; the global timestamp wins (as Kafka's)."""
    single = _timestamp(options, f"{prefix}Timestamp")
    if single is not None:
        return OffsetSpec("timestamp", timestamp_ms=single)
    by_ts = get_option(options, f"{prefix}OffsetsByTimestamp")
    if by_ts is not None:
        return OffsetSpec("timestamps", offsets=_json_partitions(f"{prefix}OffsetsByTimestamp", by_ts, "timestamps"))
    name = f"{prefix}Offsets"
    default = "latest" if prefix == "ending" or streaming else "earliest"
    text = (get_option(options, name) or default).strip()
    if text.lower() in ("earliest", "latest", "group"):
        kind = text.lower()
        if kind == "group" and prefix == "ending":
            raise _error(name, text, "'group' is only a starting position; use latest or JSON offsets")
        if not streaming and kind == ("latest" if prefix == "starting" else "earliest"):
            what, instead = ("start at latest", "earliest") if kind == "latest" else ("end at earliest", "latest")
            raise _error(name, text, f"a batch query cannot {what} (it would read nothing); use {instead} "
                                     "or JSON offsets")
        return OffsetSpec(kind)
    if not text.startswith("{"):
        raise _error(name, text, 'use earliest, latest, group or JSON offsets like {"topicA":{"0":23,"1":-2}}')
    offsets = _json_partitions(name, text, "offsets")
    for (topic, p), offset in offsets.items():
        if offset < EARLIEST:
            raise _error(name, text, f"{topic}-{p}: offsets are >= 0, or -2 (earliest) / -1 (latest)")
        if not streaming and offset == (LATEST if prefix == "starting" else EARLIEST):
            raise _error(name, text, f"{topic}-{p}: a batch query cannot use {offset} in {name}")
    return OffsetSpec("offsets", offsets=offsets)


def _group_id_prefix(options: Mapping[str, Any]) -> str | None:
    """groupIdPrefix, checked so that the group ids generated from it are valid."""
    prefix = get_option(options, "groupIdPrefix")
    if prefix is None:
        return None
    if not prefix.strip():
        raise _error("groupIdPrefix", prefix, "must not be empty")
    try:
        validate_group(prefix + "-" * GENERATED_GROUP_SUFFIX)
    except InvalidGroupError as exc:
        raise _error("groupIdPrefix", prefix[:80], f"the group ids made from it (<prefix>-<uuid>) are invalid: "
                                                   f"{exc}") from None
    return prefix


def generated_group_id(prefix: str) -> str:
    """A new group id from groupIdPrefix, as Kafka's source generates one per query run: `<prefix>-<uuid>`."""
    return f"{prefix}-{uuid.uuid4()}"


def parse_source_options(options: Mapping[str, Any], streaming: bool) -> SourceOptions:
    """Validate a read's options (unknown names are refused, so a typo cannot be silently ignored)."""
    refuse_kafka_options(options, "source", KAFKA_EQUIVALENTS)
    known = {n.lower(): n for n in SOURCE_OPTIONS}
    unknown = sorted(k for k in options if k.lower() not in known)
    if unknown:
        raise InvalidConfigError(
            f"unknown fabric source option(s) {unknown}; known options: {', '.join(SOURCE_OPTIONS)}")
    if not streaming:
        for name in STREAMING_ONLY:
            if get_option(options, name) is not None:
                raise _error(name, get_option(options, name), "applies to streaming queries only (readStream)")
    elif any(get_option(options, n) is not None for n in ENDING_OPTIONS):
        raise InvalidConfigError("endingOffsets/endingTimestamp apply to batch queries only (spark.read); "
                                 "a streaming query reads until it is stopped (or use trigger(availableNow=True))")
    group = get_option(options, "groupId")
    starting = _offset_spec(options, "starting", streaming)
    if starting.kind == "group" and group is None:
        raise _error("startingOffsets", "group", "set option 'groupId' to the consumer group to start from "
                                                 "(groupIdPrefix names a new group each run, which has no offsets)")
    min_offsets = _positive(options, "minOffsetsPerTrigger")
    if min_offsets is None and get_option(options, "maxTriggerDelay") is not None:
        raise _error("maxTriggerDelay", get_option(options, "maxTriggerDelay"),
                     "bounds how long minOffsetsPerTrigger makes a trigger wait; set minOffsetsPerTrigger too")
    strategy = (get_option(options, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise _error("startingOffsetsByTimestampStrategy", strategy, "must be error or latest")
    return SourceOptions(
        url=resolve_url(options),
        subscription=_subscription(options),
        starting=starting,
        ending=_offset_spec(options, "ending", streaming) if not streaming else OffsetSpec("latest"),
        timestamp_strategy=strategy,
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        max_bytes_per_trigger=_positive(options, "maxBytesPerTrigger"),
        min_partitions=_positive(options, "minPartitions"),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        group_id=validate_group(group) if group is not None else None,
        group_id_prefix=_group_id_prefix(options),
        client_rack=resolve_client_rack(options),
    )


def check_topics_exist(cluster: Cluster, topics: list[str]) -> None:
    """Fail clearly when a subscribed or assigned topic does not exist."""
    existing = set(cluster.coordinator.list_topics())
    missing = [t for t in topics if t not in existing]
    if missing:
        raise UnknownTopicError(
            f"topic(s) {missing} do not exist in the fabric at {redact_url(cluster.url)}; create them first "
            "(fabric topics create NAME), fix the subscribe/assign option, or point the read at another fabric "
            "(option 'url', or $FABRIC_URL in the driver's environment)")
