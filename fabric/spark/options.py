"""Option lookup shared by the Spark source and sinks: case-insensitive options, the fabric URL rule and the
reader's rack (Kafka's client.rack).

Where each is read: the source and sinks resolve their options on the driver side and carry the result to the
tasks in the pickled reader/partition state, so executors never look the URL up themselves. Spark confs
(spark.fabric.*) are read only in a Python process that has an active SparkSession: pyspark 4.3 runs a Python data
source's driver-side code (schema, reader, partitions) in a planner Python worker that has none, and passes it
neither the session's confs nor spark.executorEnv.*, so there the conf step is skipped and the URL comes from the
`url` option or from $FABRIC_URL: the driver's environment (which the planner worker inherits), or the one
fabric.spark.session.use_fabric_confs gives the format, holding the session's spark.fabric.url and
spark.fabric.clientRack (every session and job of fabric.spark calls it).
"""
from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import urlparse

from fabric.client.url import DEFAULT_URL, ENV_URL, bootstrap_url
from fabric.common.config import IGNORED_CLIENT_SETTINGS
from fabric.common.errors import InvalidConfigError

URL_CONF = "spark.fabric.url"
CLIENT_RACK_OPTION = "clientRack"
CLIENT_RACK_CONF = "spark.fabric.clientRack"
ENV_CLIENT_RACK = "FABRIC_CLIENT_RACK"  # read by each task, on its executor: racks may differ per worker
MAX_RACK_LENGTH = 255
# Spark's Kafka source and sink pass `kafka.`-prefixed options to their Kafka clients; the fabric's have none, and
# take only the one every Kafka query names, its bootstrap servers (the fabric's coordinator services)
KAFKA_PREFIX = "kafka."
BOOTSTRAP_OPTION = "kafka.bootstrap.servers"


def get_option(options: Mapping[str, Any], name: str) -> str | None:
    """An option's value, looked up case-insensitively (Spark's own option maps are case-insensitive)."""
    wanted = name.lower()
    for key, value in options.items():
        if key.lower() == wanted:
            return None if value is None else str(value)
    return None


def _session_conf(key: str) -> str | None:
    """A Spark conf of the active session, when this process has one (the driver's own Python); else None (a
    planner or executor Python worker: see the module docstring)."""
    try:
        from pyspark.sql import SparkSession
        session = SparkSession.getActiveSession()
        return session.conf.get(key, None) if session is not None else None
    except Exception:  # noqa: BLE001 (no JVM in this process, a Python worker: fall through to the environment)
        return None


def resolve_url(options: Mapping[str, Any]) -> str:
    """The fabric URL: option `url` or Spark Kafka's `kafka.bootstrap.servers` (host:port[,host:port] of
    coordinator services; both given, they must name the same fabric), else Spark conf spark.fabric.url (where this
    process has a session), else $FABRIC_URL, else ./fabric-data.

    A plain path is made absolute here, on the driver, so executors with another cwd open the same fabric."""
    url = option_url(options) or _session_conf(URL_CONF) or os.environ.get(ENV_URL) or DEFAULT_URL
    return f"file://{os.path.abspath(url)}" if urlparse(url).scheme == "" else url


def option_url(options: Mapping[str, Any]) -> str | None:
    """The fabric the options name: `url`, or `kafka.bootstrap.servers` as the fabric:// URL of those services;
    InvalidConfigError for servers that are not host:port pairs, or for the two naming different fabrics."""
    url, servers = get_option(options, "url"), get_option(options, BOOTSTRAP_OPTION)
    if servers is None:
        return url
    try:
        named = bootstrap_url(servers)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"option {BOOTSTRAP_OPTION!r}: {exc}") from None
    if url is not None and url != named:
        raise InvalidConfigError(f"options 'url' and {BOOTSTRAP_OPTION!r} name different fabrics; give one of them "
                                 f"({BOOTSTRAP_OPTION} host:port[,host:port] is url fabric://host:port[,host:port])")
    return named


def check_rack(value: str, where: str) -> str:
    """`value` if it is a usable rack name (what a data node's --rack says); else InvalidConfigError naming
    `where` the value came from."""
    why = ("must not be empty" if not value.strip() else
           f"is longer than {MAX_RACK_LENGTH} characters" if len(value) > MAX_RACK_LENGTH else
           "has leading or trailing whitespace" if value != value.strip() else
           "has control characters" if not value.isprintable() else None)
    if why is not None:
        raise InvalidConfigError(f"invalid value {value[:80]!r} for {where}: a rack name {why}; give the rack of "
                                 "the data nodes near the reader, as their --rack says (e.g. rack-1)")
    return value


def resolve_client_rack(options: Mapping[str, Any]) -> str | None:
    """The reader's rack fixed on the driver: option clientRack, else Spark conf spark.fabric.clientRack (where
    this process has a session); None leaves it to each task (task_client_rack)."""
    option = get_option(options, CLIENT_RACK_OPTION)
    if option is not None:
        return check_rack(option, f"fabric source option {CLIENT_RACK_OPTION!r}")
    conf = _session_conf(CLIENT_RACK_CONF)
    return check_rack(conf, f"Spark conf {CLIENT_RACK_CONF}") if conf is not None else None


def task_client_rack(resolved: str | None) -> str | None:
    """The rack a task reads as: the one resolved on the driver, else $FABRIC_CLIENT_RACK of the executor this
    task runs on (empty or unset: none, the task reads from the leaders)."""
    if resolved is not None:
        return resolved
    value = os.environ.get(ENV_CLIENT_RACK, "")
    return check_rack(value, f"environment variable {ENV_CLIENT_RACK}") if value else None


def refuse_kafka_options(options: Mapping[str, Any], what: str, equivalents: Mapping[str, str]) -> None:
    """Refuse Spark Kafka's `kafka.*` client configs given to the fabric `what` ("source", "sink"), all at once,
    but the bootstrap servers (resolve_url's), each with what to write instead: its entry in `equivalents` (by
    config name), else why the config means nothing here (the Python client's table of Kafka configs), else that
    it has no equivalent. Values are never echoed (sasl.jaas.config holds passwords)."""
    given = sorted(k for k in options if k.lower().startswith(KAFKA_PREFIX) and k.lower() != BOOTSTRAP_OPTION)
    if not given:
        return
    reasons = []
    for key in given:
        config = key[len(KAFKA_PREFIX):].lower()
        why = equivalents.get(config) or IGNORED_CLIENT_SETTINGS.get(config.replace(".", "_"))
        reasons.append(f"{key!r}: " + (why or "a Kafka client config with no fabric equivalent; remove it"))
    raise InvalidConfigError(f"the fabric {what} has no Kafka client to pass 'kafka.' options to; "
                             + "; ".join(reasons))
