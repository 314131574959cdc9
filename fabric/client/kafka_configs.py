"""confluent-kafka's topic config calls on its AdminClient, over the fabric's (the topic's metadata,
Fabric.alter_topic_config): `describe_configs([ConfigResource(ResourceType.TOPIC, "orders")])` a done future per
resource of {name: ConfigEntry}, every config the topic has (an override's source DYNAMIC_TOPIC_CONFIG, a default's
DEFAULT_CONFIG); `incremental_alter_configs([ConfigResource(..., incremental_configs=[ConfigEntry(name, value,
incremental_operation=AlterConfigOpType.SET)])])` (SET, DELETE, and APPEND / SUBTRACT on a list config such as
cleanup.policy); `alter_configs([ConfigResource(..., set_config={...})])`, which replaces the topic's overrides
with those given, as Kafka's legacy AlterConfigs does. Each change is checked whole before anything is written.

Only topics have configs here: a broker's are its process's options and properties file (`fabric coordinator
start`, `fabric node start`), refused naming them.
"""
from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from fabric.client.kafka_admin import done_future, listed
from fabric.common.errors import InvalidArgumentError, InvalidConfigError
from fabric.common.names import validate_topic

if TYPE_CHECKING:
    from fabric.client.admin import Fabric
    from fabric.common.types import TopicInfo


class ResourceType(enum.Enum):
    """confluent-kafka's resource types (those with configs)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4


class ConfigSource(enum.Enum):
    """Where a config's value comes from (confluent-kafka's names)."""

    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DEFAULT_CONFIG = 5


class AlterConfigOpType(enum.Enum):
    """What an incremental change does to its config."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigEntry:
    """A config's name and value as described (with its source), or as a change (with its operation)."""

    def __init__(self, name: str, value: str | None, source: ConfigSource = ConfigSource.UNKNOWN_CONFIG,
                 is_read_only: bool = False, is_default: bool = False, is_sensitive: bool = False,
                 is_synonym: bool = False, synonyms: list[Any] | None = None,
                 incremental_operation: AlterConfigOpType | None = None) -> None:
        self.name, self.value, self.source = name, value, source
        self.is_read_only, self.is_default, self.is_sensitive = is_read_only, is_default, is_sensitive
        self.is_synonym, self.synonyms, self.incremental_operation = is_synonym, synonyms or [], incremental_operation

    def __repr__(self) -> str:
        return f"ConfigEntry({self.name}={self.value!r})"


class ConfigResource:
    """A resource whose configs are described or altered: its type, name, the configs to set (`set_config`,
    alter_configs) and the incremental changes (`incremental_configs`). kafka-python's ConfigResource(resource_type,
    name, configs) too: `configs` a {name: value} dict to alter, or the names kafka-python's describe_configs asks."""

    def __init__(self, restype: ResourceType | str | int, name: str,
                 set_config: Mapping[str, Any] | Iterable[str] | None = None, described_configs: Any = None,
                 error: Any = None, incremental_configs: list[ConfigEntry] | None = None, *,
                 configs: Mapping[str, Any] | Iterable[str] | None = None) -> None:
        self.restype, self.name = _restype(restype), name
        self.configs = set_config if configs is None else configs  # (kafka-python's attribute)
        given = self.configs if isinstance(self.configs, Mapping) else {}
        self.set_config_dict = {k: str(v) for k, v in given.items()}
        self.incremental_configs = list(incremental_configs or [])

    @property
    def resource_type(self) -> ResourceType:
        """The resource's type, by kafka-python's name."""
        return self.restype

    def set_config(self, name: str, value: Any, overwrite: bool = True) -> None:
        """A config alter_configs sets (kept if already set and not `overwrite`)."""
        if overwrite or name not in self.set_config_dict:
            self.set_config_dict[name] = str(value)

    def add_incremental_config(self, config: ConfigEntry) -> None:
        """A change incremental_alter_configs makes."""
        self.incremental_configs.append(config)

    def __hash__(self) -> int:
        return hash((self.restype, self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigResource) and (self.restype, self.name) == (other.restype, other.name)

    def __repr__(self) -> str:
        return f"ConfigResource({self.restype}, {self.name!r})"


def describe_configs(fab: Fabric, resources: Iterable[ConfigResource]) -> dict[ConfigResource, Future]:
    """A future of each resource's configs, {name: ConfigEntry}."""
    def describe(resource: ConfigResource) -> dict[str, ConfigEntry]:
        info = _info(fab, resource)
        return {name: ConfigEntry(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG if name in info.config
                                  else ConfigSource.DEFAULT_CONFIG, is_default=name not in info.config)
                for name, value in sorted(info.settings.effective().items())}
    return {r: done_future(describe, r) for r in listed(resources, ConfigResource, "describe_configs", _EXAMPLE)}


def incremental_alter_configs(fab: Fabric, resources: Iterable[ConfigResource]) -> dict[ConfigResource, Future]:
    """A future of each resource's incremental changes applied (None)."""
    def alter(resource: ConfigResource) -> None:
        info = _info(fab, resource)
        current = info.settings.effective()
        changes: dict[str, str | None] = {}
        for entry in resource.incremental_configs:
            changes[entry.name] = _changed(entry, current.get(entry.name))
        if not changes:
            raise InvalidArgumentError("incremental_alter_configs takes each resource with its changes: "
                                       "ConfigResource(ResourceType.TOPIC, 'orders', incremental_configs=[ConfigEntry("
                                       "'retention.ms', '60000', incremental_operation=AlterConfigOpType.SET)])")
        fab.alter_topic_config(info.name, changes)
    return {r: done_future(alter, r) for r in listed(resources, ConfigResource, "incremental_alter_configs", _EXAMPLE)}


def alter_configs(fab: Fabric, resources: Iterable[ConfigResource]) -> dict[ConfigResource, Future]:
    """A future of each resource's overrides replaced by its `set_config` (None)."""
    def replace(resource: ConfigResource) -> None:
        info = _info(fab, resource)
        dropped = {name: None for name in info.config if name not in resource.set_config_dict}
        fab.alter_topic_config(info.name, {**dropped, **resource.set_config_dict})
    return {r: done_future(replace, r) for r in listed(resources, ConfigResource, "alter_configs", _EXAMPLE)}


_EXAMPLE = "[ConfigResource(ResourceType.TOPIC, 'orders')]"


def _restype(value: ResourceType | str | int) -> ResourceType:
    """A resource type as confluent-kafka takes it: the enum, its name ("topic") or its number."""
    try:
        if isinstance(value, ResourceType):
            return value
        return ResourceType[value.upper()] if isinstance(value, str) else ResourceType(value)
    except (KeyError, ValueError):
        raise InvalidArgumentError(f"unknown resource type {value!r}; use ResourceType.TOPIC") from None


def _info(fab: Fabric, resource: ConfigResource) -> TopicInfo:
    """The metadata of the topic a resource names (its overrides, and the effective config over them)."""
    return fab.cluster.coordinator.topic(validate_topic(_topic(resource)))


def _topic(resource: ConfigResource) -> str:
    """The topic a resource names; InvalidConfigError for any other kind of resource."""
    if resource.restype is not ResourceType.TOPIC:
        raise InvalidConfigError(f"{resource}: only topics have configs a client changes here; a broker's are the "
                                 "options and properties file of its process (`fabric coordinator start`, `fabric "
                                 "node start`), a group's its consumers' own")
    return resource.name


def _changed(entry: ConfigEntry, current: str | None) -> str | None:
    """The value an incremental change leaves (None: back to the default)."""
    operation = entry.incremental_operation or AlterConfigOpType.SET
    if operation is AlterConfigOpType.SET:
        return None if entry.value is None else str(entry.value)
    if operation is AlterConfigOpType.DELETE:
        return None
    listed_now = [v for v in (current or "").split(",") if v]
    given = [v.strip() for v in str(entry.value or "").split(",") if v.strip()]
    if operation is AlterConfigOpType.APPEND:
        return ",".join(listed_now + [v for v in given if v not in listed_now])
    return ",".join(v for v in listed_now if v not in given)
