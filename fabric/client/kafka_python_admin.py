"""kafka-python's KafkaAdminClient config and record calls in the shapes its programs read, over what
confluent-kafka's AdminClient does (kafka_configs, kafka_admin): kafka-python answers some calls with Kafka's
protocol responses, so these answer look-alikes with the same attribute names.

- `describe_configs([ConfigResource(ConfigResourceType.TOPIC, "orders")], include_synonyms=False)`: a list of one
  DescribeConfigsResponse (kafka-python 2.0's shape), whose `.resources` rows are (error_code, error_message,
  resource_type, resource_name, config_entries); each entry (name, value, read_only, is_default, is_sensitive),
  or with `include_synonyms` (name, value, read_only, config_source, is_sensitive, synonyms). A resource's error
  is its row's code and message, as Kafka answers, never raised.
- `alter_configs([ConfigResource(ConfigResourceType.TOPIC, "orders", configs={...})])`: an AlterConfigsResponse,
  rows (error_code, error_message, resource_type, resource_name); the topic's overrides replaced by those given.
- `delete_records({TopicPartition("orders", 0): 42})`: kafka-python 2.1's {TopicPartition: {"partition_index",
  "low_watermark", "error_code"}}, raising a partition's error as it does.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Iterable, Mapping, NamedTuple

from fabric.client import kafka_admin, kafka_configs
from fabric.client.kafka_configs import ConfigEntry, ConfigResource, ConfigSource
from fabric.client.topic_partition import TopicPartition
from fabric.common import checks
from fabric.common.config import LONG_MAX
from fabric.common.errors import (
    AuthorizationError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FabricError,
    InvalidConfigError,
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    NotLeaderError,
    OffsetOutOfRangeError,
    PreferredLeaderNotAvailableError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from fabric.client.admin import Fabric

UNKNOWN_SERVER_ERROR = -1
KAFKA_CODES: tuple[tuple[type[FabricError], int], ...] = (  # Kafka's error code of each fabric error with one
    (OffsetOutOfRangeError, 1), (UnknownTopicOrPartitionError, 3), (LeaderNotAvailableError, 5),
    (NotLeaderError, 6), (RequestTimedOutError, 7), (InvalidTopicError, 17), (AuthorizationError, 29),
    (InvalidConfigError, 40), (InvalidRequestError, 42), (PreferredLeaderNotAvailableError, 80),
    (EligibleLeadersNotAvailableError, 83), (ElectionNotNeededError, 84))


def error_code(error: BaseException | None) -> int:
    """Kafka's error code of `error` as kafka-python's responses carry it: 0 for none, -1 where Kafka has none."""
    if error is None:
        return 0
    return next((code for kind, code in KAFKA_CODES if isinstance(error, kind)), UNKNOWN_SERVER_ERROR)


class DescribeConfigsResponse(NamedTuple):
    """kafka-python's DescribeConfigsResponse: a row per resource (error_code, error_message, resource_type,
    resource_name, config_entries)."""

    throttle_time_ms: int
    resources: list[tuple[int, str | None, int, str, list[tuple[Any, ...]]]]


class AlterConfigsResponse(NamedTuple):
    """kafka-python's AlterConfigsResponse: a row per resource (error_code, error_message, resource_type,
    resource_name)."""

    throttle_time_ms: int
    resources: list[tuple[int, str | None, int, str]]


def describe_configs(fab: Fabric, config_resources: Iterable[ConfigResource], include_synonyms: bool = False
                     ) -> list[DescribeConfigsResponse]:
    """Each resource's configs (of the names its `configs` asks, where given), as the module says."""
    resources = kafka_admin.listed(config_resources, ConfigResource, "describe_configs", _EXAMPLE)
    described = kafka_configs.describe_configs(fab, resources)
    rows = []
    for resource in resources:
        code, message, entries = _outcome(described[resource])
        wanted = None if resource.configs is None else set(resource.configs)
        found = [_entry(e, include_synonyms) for name, e in (entries or {}).items() if wanted is None or name in wanted]
        rows.append((code, message, resource.restype.value, resource.name, found))
    return [DescribeConfigsResponse(0, rows)]


def alter_configs(fab: Fabric, config_resources: Iterable[ConfigResource]) -> AlterConfigsResponse:
    """Each resource's overrides replaced by its `configs`, as the module says."""
    resources = kafka_admin.listed(config_resources, ConfigResource, "alter_configs", _EXAMPLE)
    altered = kafka_configs.alter_configs(fab, resources)
    return AlterConfigsResponse(0, [(*_outcome(altered[r])[:2], r.restype.value, r.name) for r in resources])


def delete_records(fab: Fabric, records_to_delete: Mapping[Any, int]) -> dict[TopicPartition, dict[str, int]]:
    """Each partition's records below its offset deleted (-1: every record): {TopicPartition: {"partition_index",
    "low_watermark", "error_code"}}, or the partition's error raised (every partition is tried first)."""
    chosen = checks.by_partition(records_to_delete, "delete_records",
                                 lambda offset, what: checks.integer(offset, what, -1, LONG_MAX))
    deleted = kafka_admin.records_deleted(fab, {TopicPartition(*tp): offset for tp, offset in chosen.items()})
    failed = {tp: error for tp, future in deleted.items() if (error := future.exception()) is not None}
    if len(failed) == 1:
        raise next(iter(failed.values()))
    if failed:
        raise FabricError("delete_records failed on " + "; ".join(f"{tp.topic}-{tp.partition}: {error}"
                                                                   for tp, error in failed.items()))
    return {tp: {"partition_index": tp.partition, "low_watermark": future.result().low_watermark, "error_code": 0}
            for tp, future in deleted.items()}


_EXAMPLE = "[ConfigResource(ConfigResourceType.TOPIC, 'orders')]"


def _outcome(future: Future) -> tuple[int, str | None, Any]:
    """A done future's (error code, error message, result) as a response row carries them."""
    error = future.exception()
    return (error_code(error), str(error), None) if error is not None else (0, None, future.result())


def _entry(entry: ConfigEntry, include_synonyms: bool) -> tuple[Any, ...]:
    """A described config as kafka-python's DescribeConfigsResponse v0 carries it, or v1's with its synonyms."""
    if not include_synonyms:
        return entry.name, entry.value, entry.is_read_only, entry.is_default, entry.is_sensitive
    source = entry.source.value if isinstance(entry.source, ConfigSource) else ConfigSource.UNKNOWN_CONFIG.value
    return (entry.name, entry.value, entry.is_read_only, source, entry.is_sensitive,
            [(entry.name, entry.value, source)])
