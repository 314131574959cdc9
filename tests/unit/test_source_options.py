"""The fabric source's options parsed without a Spark session (no conf to read): clientRack, validated on the
driver, and the rack a task falls back to, $FABRIC_CLIENT_RACK of its executor; minOffsetsPerTrigger and
maxTriggerDelay, groupIdPrefix, Spark Kafka's `kafka.*` options refused with their equivalents (by the sink too);
Kafka's source metrics computed from a progress. (Options through real Spark reads:
tests/integration/test_source.py.)"""
from __future__ import annotations

import json
import re
import uuid

import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from fabric.common.errors import InvalidConfigError
from fabric.sinks.fabric_sink import SinkConfig
from fabric.sources.options import DEFAULT_MAX_TRIGGER_DELAY_MS, generated_group_id, parse_source_options
from fabric.sources.progress import offsets_behind_latest
from fabric.spark.options import ENV_CLIENT_RACK, MAX_RACK_LENGTH, resolve_url, task_client_rack

READ = {"url": "file:///nowhere", "subscribe": "t"}


def test_client_rack_option_is_kept_for_the_tasks(monkeypatch) -> None:
    monkeypatch.setenv(ENV_CLIENT_RACK, "driver-rack")  # the driver's environment is not the executors'
    assert parse_source_options(READ, streaming=False).client_rack is None
    for key in ("clientRack", "clientrack", "CLIENTRACK"):  # Spark's options are case-insensitive
        opts = parse_source_options({**READ, key: "rack-2"}, streaming=True)
        assert opts.client_rack == "rack-2"
    assert parse_source_options({**READ, "clientRack": "r" * MAX_RACK_LENGTH}, streaming=False).client_rack \
        == "r" * MAX_RACK_LENGTH


@pytest.mark.parametrize("value, why", [
    ("", "must not be empty"),
    ("   ", "must not be empty"),
    (" rack-1", "has leading or trailing whitespace"),
    ("rack-1\n", "has leading or trailing whitespace"),
    ("rack\x001", "has control characters"),
    ("r" * (MAX_RACK_LENGTH + 1), f"is longer than {MAX_RACK_LENGTH} characters"),
])
def test_a_bad_client_rack_option_is_refused_naming_it(value: str, why: str) -> None:
    with pytest.raises(InvalidConfigError, match=f"for fabric source option 'clientRack': a rack name {why}"):
        parse_source_options({**READ, "clientRack": value}, streaming=False)


def test_a_task_reads_its_executors_rack_unless_the_driver_fixed_one(monkeypatch) -> None:
    monkeypatch.delenv(ENV_CLIENT_RACK, raising=False)
    assert task_client_rack(None) is None
    monkeypatch.setenv(ENV_CLIENT_RACK, "")  # set but empty: no rack, as unset
    assert task_client_rack(None) is None
    monkeypatch.setenv(ENV_CLIENT_RACK, "rack-3")
    assert task_client_rack(None) == "rack-3"
    assert task_client_rack("rack-1") == "rack-1"
    monkeypatch.setenv(ENV_CLIENT_RACK, " rack-3")
    with pytest.raises(InvalidConfigError, match="for environment variable FABRIC_CLIENT_RACK: a rack name has"):
        task_client_rack(None)


@pytest.mark.parametrize("text, ms", [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("250", 250),
                                      ("2min", 120_000), ("1h", 3_600_000), ("1d", 86_400_000), (" 5M ", 300_000),
                                      ("1500us", 1.5), ("0s", 0)])
def test_max_trigger_delay_takes_sparks_durations(text: str, ms: float) -> None:
    opts = parse_source_options({**READ, "minOffsetsPerTrigger": "100", "maxTriggerDelay": text}, streaming=True)
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (100, ms)


def test_min_offsets_per_trigger_waits_fifteen_minutes_by_default_and_not_at_all_unset() -> None:
    opts = parse_source_options({**READ, "MINOFFSETSPERTRIGGER": "7"}, streaming=True)
    assert (opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (7, DEFAULT_MAX_TRIGGER_DELAY_MS)
    assert DEFAULT_MAX_TRIGGER_DELAY_MS == 15 * 60_000  # Kafka's 15m
    assert parse_source_options(READ, streaming=True).min_offsets_per_trigger is None


@pytest.mark.parametrize("options, message", [
    ({"minOffsetsPerTrigger": "0"}, "'minOffsetsPerTrigger': must be a positive whole number"),
    ({"minOffsetsPerTrigger": "many"}, "'minOffsetsPerTrigger': must be a positive whole number"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, "'maxTriggerDelay': must be a duration such as"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "-5s"}, "'maxTriggerDelay': must be a duration such as"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "1.5s"}, "'maxTriggerDelay': must be a duration such as"),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "5 weeks"}, "'maxTriggerDelay': must be a duration such as"),
    ({"maxTriggerDelay": "5m"}, "'maxTriggerDelay': bounds how long minOffsetsPerTrigger makes a trigger wait; set "
                                "minOffsetsPerTrigger too"),
])
def test_bad_trigger_minimums_are_refused_naming_the_option(options: dict, message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        parse_source_options({**READ, **options}, streaming=True)


@pytest.mark.parametrize("options, message", [
    ({"assign": '{"t":[0.7]}'}, "'assign': partition 0.7 of topic 't' is not a whole number"),
    ({"assign": '{"t":[true]}'}, "'assign': partition True of topic 't' is not a whole number"),
    ({"assign": '{"t":[0],"u":[]}'}, "'assign': topic 'u' lists no partitions: name them"),
    ({"startingOffsets": '{"t":{"0":true}}'}, "'startingOffsets': t-0: partitions are numbers >= 0 and offsets are "
                                              "integers"),
    ({"startingTimestamp": "-1"}, "'startingTimestamp': must be milliseconds since the epoch, >= 0 (for the "
                                  "earliest or latest offset use startingOffsets=earliest or latest)"),
    ({"startingOffsetsByTimestamp": '{"t":{"0":-1}}'}, "'startingOffsetsByTimestamp': t-0: timestamps are "
                                                       "milliseconds since the epoch, >= 0"),
    ({"endingOffsetsByTimestamp": '{"t":{"0":-2}}'}, "'endingOffsetsByTimestamp': t-0: timestamps are"),
])
def test_json_values_and_timestamps_that_mean_something_else_are_refused(options: dict, message: str) -> None:
    """JSON true and 0.7 used to be taken as partition (or offset) 1 and 0, and a negative timestamp (-1: Kafka's
    "latest" in its ListOffsets request) as the earliest offset: each read other records than the user meant."""
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        parse_source_options({"url": "file:///nowhere", **({} if "assign" in options else {"subscribe": "t"}),
                              **options}, streaming=False)


@pytest.mark.parametrize("name", ["minOffsetsPerTrigger", "maxTriggerDelay"])
def test_trigger_minimums_are_for_streaming_queries_only(name: str) -> None:
    with pytest.raises(InvalidConfigError, match=f"'{name}': applies to streaming queries only"):
        parse_source_options({**READ, name: "5"}, streaming=False)


def test_group_id_prefix_is_checked_and_makes_a_new_group_per_run() -> None:
    assert parse_source_options({**READ, "groupIdPrefix": "etl"}, streaming=True).group_id_prefix == "etl"
    first, second = generated_group_id("etl"), generated_group_id("etl")
    assert first != second and first.startswith("etl-") and str(uuid.UUID(first[len("etl-"):])) == first[4:]
    longest = "p" * (1024 - len(first) + len("etl"))
    assert len(generated_group_id(longest)) == 1024
    assert parse_source_options({**READ, "groupIdPrefix": longest}, streaming=True).group_id_prefix == longest
    for bad, why in [("", "must not be empty"), ("  ", "must not be empty"),
                     (longest + "p", "the group ids made from it (<prefix>-<uuid>) are invalid: group id is longer "
                                     "than 1024 characters")]:
        with pytest.raises(InvalidConfigError, match=re.escape(f"option 'groupIdPrefix': {why}")):
            parse_source_options({**READ, "groupIdPrefix": bad}, streaming=True)
    with pytest.raises(InvalidConfigError, match=r"set option 'groupId' .*groupIdPrefix names a new group each run"):
        parse_source_options({**READ, "groupIdPrefix": "etl", "startingOffsets": "group"}, streaming=True)


@pytest.mark.parametrize("key, message", [
    ("kafka.group.id", "'kafka.group.id': use option 'groupId' instead"),
    ("kafka.client.rack", "'kafka.client.rack': use option 'clientRack' instead"),
    ("kafka.isolation.level", "'kafka.isolation.level': the source always reads committed records only"),
    ("kafka.security.protocol", "'kafka.security.protocol': a service is reached with TLS by fabric+tls://"),
    ("kafka.sasl.jaas.config", "'kafka.sasl.jaas.config': a Kafka client config with no fabric equivalent; "
                               "remove it"),
])
def test_kafka_consumer_options_are_refused_naming_the_fabric_equivalent(key: str, message: str) -> None:
    for streaming in (True, False):
        with pytest.raises(InvalidConfigError, match="the fabric source has no Kafka client to pass 'kafka.' "
                                                     "options to; " + re.escape(message)) as error:
            parse_source_options({**READ, key: "secret-value"}, streaming=streaming)
        assert "secret-value" not in str(error.value)  # values (passwords in sasl.jaas.config) are never echoed


@pytest.mark.parametrize("options, url", [
    ({"kafka.bootstrap.servers": "h1:9093, h2:9094"}, "fabric://h1:9093,h2:9094"),
    ({"KAFKA.Bootstrap.Servers": "h1:9093"}, "fabric://h1:9093"),
    ({"kafka.bootstrap.servers": "fabric+tls://h1:9093"}, "fabric+tls://h1:9093"),
    ({"kafka.bootstrap.servers": "h1:9093", "url": "fabric://h1:9093"}, "fabric://h1:9093"),
])
def test_kafkas_bootstrap_servers_name_the_fabric_as_url_does(options: dict[str, str], url: str) -> None:
    """Spark Kafka's one `kafka.` option every query gives is taken: the coordinator services' host:port list is
    the fabric:// URL of those services, for the source and the sink alike (SinkConfig.parse resolves it so too)."""
    assert parse_source_options({"subscribe": "t", **options}, streaming=True).url == url
    assert resolve_url(options) == url


@pytest.mark.parametrize("options, message", [
    ({"kafka.bootstrap.servers": "broker"}, "option 'kafka.bootstrap.servers': bootstrap servers are "
                                            "host:port[,host:port] (a coordinator service's), got 'broker'"),
    ({"kafka.bootstrap.servers": "h1:9093,"}, "option 'kafka.bootstrap.servers': bootstrap servers are"),
    ({"kafka.bootstrap.servers": "h1:93", "url": "fabric://h2:93"}, "options 'url' and 'kafka.bootstrap.servers' "
                                                                     "name different fabrics; give one of them"),
])
def test_bootstrap_servers_that_name_no_fabric_or_another_are_refused(options: dict[str, str],
                                                                      message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        parse_source_options({"subscribe": "t", **options}, streaming=False)
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        SinkConfig.parse({"topic": "t", **options}, StructType([StructField("value", BinaryType())]))


def test_every_kafka_option_given_is_named_at_once() -> None:
    with pytest.raises(InvalidConfigError) as error:
        parse_source_options({"kafka.client.rack": "r", "subscribe": "t", "kafka.group.id": "g"}, streaming=True)
    assert "'kafka.client.rack': use option 'clientRack'" in str(error.value)
    assert "'kafka.group.id': use option 'groupId'" in str(error.value)


def test_the_sink_refuses_kafka_producer_options_naming_its_own() -> None:
    with pytest.raises(InvalidConfigError) as error:
        SinkConfig.parse({"url": "file:///nowhere", "topic": "t", "kafka.bootstrap.servers": "h:9092",
                          "kafka.compression.type": "zstd", "kafka.acks": "all"}, StructType([]))
    assert str(error.value) == (
        "the fabric sink has no Kafka client to pass 'kafka.' options to; 'kafka.acks': a Kafka client config with no "
        "fabric equivalent; remove it; 'kafka.compression.type': use option 'compression.type' instead")


def _progress_source(end: dict | None, latest: dict | None) -> dict:
    return {"endOffset": None if end is None else json.dumps(end),
            "latestOffset": None if latest is None else json.dumps(latest), "metrics": {}}


def test_offsets_behind_latest_from_a_progress_as_kafka_computes_them() -> None:
    source = _progress_source({"a": {"0": 10, "1": 4}, "b": {"0": 7}}, {"a": {"0": 10, "1": 9}, "b": {"0": 11}})
    assert offsets_behind_latest(source) == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "5",
                                             "avgOffsetsBehindLatest": "3.0"}
    added = _progress_source({"a": {"0": 3}}, {"a": {"0": 3, "1": 2}})  # a partition added since: read from 0
    assert offsets_behind_latest(added)["maxOffsetsBehindLatest"] == "2"
    assert offsets_behind_latest(_progress_source(None, {"a": {"0": 3}})) == {}  # before the first batch
    assert offsets_behind_latest(_progress_source({}, {})) == {}
    parsed = {"endOffset": {"a": {"0": 1}}, "latestOffset": {"a": {"0": 4}}}  # a progress's JSON, as a log holds it
    assert offsets_behind_latest(parsed)["maxOffsetsBehindLatest"] == "3"


def test_the_sinks_transaction_timeout_defaults_to_the_coordinators_maximum_and_is_checked() -> None:
    schema = StructType([StructField("topic", StringType()), StructField("value", BinaryType())])
    assert SinkConfig.parse({"url": "file:///nowhere"}, schema).transaction_timeout_ms == 900_000
    assert SinkConfig.parse({"url": "file:///nowhere", "transaction.timeout.ms": "60000"},
                            schema).transaction_timeout_ms == 60_000
    for bad in ("0", "-1", "1.5", "soon", str(2**31)):
        with pytest.raises(InvalidConfigError, match="'transaction.timeout.ms': use milliseconds from 1"):
            SinkConfig.parse({"url": "file:///nowhere", "transaction.timeout.ms": bad}, schema)
    with pytest.raises(InvalidConfigError, match="use option 'transaction.timeout.ms' instead"):
        SinkConfig.parse({"url": "file:///nowhere", "kafka.transaction.timeout.ms": "60000"}, schema)
