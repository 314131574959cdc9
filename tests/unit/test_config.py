"""The shared config rules of fabric.common.config: what create_topic and alter_topic_config accept, and how
clients treat Kafka's client configs."""
from __future__ import annotations

import warnings

import pytest

from fabric.common.config import (
    CONSUMER_SETTINGS,
    PRODUCER_SETTINGS,
    TopicConfig,
    client_config,
    validate_topic_config,
    validate_topic_config_changes,
)
from fabric.common.errors import IgnoredConfigWarning, InvalidConfigError, RecordTooLargeError


@pytest.mark.parametrize("config", ["retention.ms=1", ["retention.ms"], 5])
def test_a_topic_config_that_is_not_a_dict_is_refused(config):
    with pytest.raises(InvalidConfigError, match="must be a dict of Kafka config names.*retention.ms"):
        validate_topic_config(config)
    with pytest.raises(InvalidConfigError, match="must be a dict"):
        validate_topic_config_changes(config)


def test_integer_configs_name_their_range():
    for bad in ("1.5", "soon", None, "", 2**63):
        with pytest.raises(InvalidConfigError, match=r"'retention.ms': must be an integer from -1 to \d+"):
            validate_topic_config({"retention.ms": bad})
    assert validate_topic_config({"retention.ms": " 42 "}) == {"retention.ms": "42"}


def test_config_changes_set_known_keys_and_delete_only_known_keys():
    assert validate_topic_config_changes({"retention.ms": 5, "segment.bytes": None}) == {
        "retention.ms": "5", "segment.bytes": None}
    with pytest.raises(InvalidConfigError, match="unknown topic config 'no.such.key'; known keys: cleanup.policy"):
        validate_topic_config_changes({"no.such.key": None})
    with pytest.raises(InvalidConfigError, match="segment.bytes"):
        validate_topic_config_changes({"segment.bytes": 1})


def test_boolean_topic_configs_are_stored_as_kafka_spells_them():
    assert validate_topic_config({"unclean.leader.election.enable": "TRUE"}) == {
        "unclean.leader.election.enable": "true"}
    assert TopicConfig({"unclean.leader.election.enable": True})["unclean.leader.election.enable"] is True
    assert TopicConfig().effective()["unclean.leader.election.enable"] == "false"  # off by default, as in Kafka
    with pytest.raises(InvalidConfigError, match="must be true or false"):
        validate_topic_config({"unclean.leader.election.enable": "yes"})


def test_kafka_client_configs_the_fabric_does_not_use_warn_naming_its_way(fab):
    with pytest.warns(IgnoredConfigWarning, match=r"producer config 'bootstrap_servers' is ignored: the fabric is "
                      r"named by fabric.connect\(url\)") as caught:
        producer = fab.producer(bootstrap_servers="localhost:9092", linger_ms=0)
    assert caught[0].filename == __file__  # pointing at the caller's line
    with pytest.warns(IgnoredConfigWarning, match="'security.protocol' is ignored: .*fabric\\+tls://"):
        consumer = fab.consumer(**{"security.protocol": "SSL", "auto_offset_reset": "earliest"})
    assert producer.config["linger_ms"] == 0 and "bootstrap_servers" not in producer.config
    assert consumer.config["auto_offset_reset"] == "earliest"
    producer.close()
    consumer.close()
    with pytest.raises(InvalidConfigError, match="unknown producer config 'no_such_thing'"):
        fab.producer(no_such_thing=1)


def test_a_bad_value_of_a_client_config_given_with_kafkas_dots_names_the_value(fab):
    with pytest.raises(InvalidConfigError, match="invalid value '-1' for consumer config 'max.poll.records': must "
                       "be an integer from 1"):
        fab.consumer({"max.poll.records": "-1"})
    with pytest.raises(InvalidConfigError, match="invalid value 'x' for producer config 'linger.ms'"):
        fab.producer({"linger.ms": "x"})


@pytest.mark.parametrize("table, key", [(PRODUCER_SETTINGS, "transactional_id"),
                                        (CONSUMER_SETTINGS, "group_instance_id")])
@pytest.mark.parametrize("value", [b"etl", ["etl"], 5])
def test_an_id_given_as_anything_but_a_string_is_refused(table, key, value):
    """str() would have made one up (b'etl' became the id "b'etl'"): Kafka's ids are strings."""
    with pytest.raises(InvalidConfigError, match=f"invalid value .* for .* config '{key}': must be a string, got"):
        client_config("Producer", table, {key: value})
    assert client_config("Producer", table, {key: "etl"})[key] == "etl"


def test_a_record_over_max_request_size_is_refused_naming_it(fab):
    fab.create_topic("t")
    with fab.producer(max_request_size=10) as producer:
        with pytest.raises(RecordTooLargeError, match="max_request_size=10"):
            producer.send("t", b"x" * 11)
        assert producer.send("t", b"x" * 10).get(timeout=30).offset == 0


@pytest.mark.parametrize("kafka_codec, ours", [("gzip", "zstd"), ("snappy", "lz4")])
def test_kafkas_gzip_and_snappy_are_refused_naming_what_to_use(fab, kafka_codec, ours):
    with pytest.raises(InvalidConfigError, match=f"must be one of none, lz4, zstd: {kafka_codec} is a Kafka codec "
                       f"that Arrow IPC, which the fabric stores, cannot compress with; use {ours}"):
        fab.producer(compression_type=kafka_codec)
    with pytest.raises(InvalidConfigError, match=f"{kafka_codec} is a Kafka codec .* use {ours}"):
        fab.create_topic("t", config={"compression.type": kafka_codec})
    assert fab.list_topics() == []


def test_an_admin_clients_retry_backoff_is_taken_with_a_warning(fab) -> None:
    """kafka-python's KafkaAdminClient(retry_backoff_ms=...) and confluent-kafka's AdminClient retry.backoff.ms
    were refused as unknown; a producer still takes its own."""
    from fabric.kafka import AdminClient, KafkaAdminClient
    with pytest.warns(IgnoredConfigWarning, match="admin config 'retry_backoff_ms' is ignored: an admin call retries"):
        KafkaAdminClient(bootstrap_servers=fab.url, retry_backoff_ms=50).close()
    with pytest.warns(IgnoredConfigWarning, match="'retry.backoff.ms' is ignored"):
        AdminClient({"bootstrap.servers": fab.url, "retry.backoff.ms": 50}).close()
    assert client_config("producer", PRODUCER_SETTINGS, {"retry_backoff_ms": 7})["retry_backoff_ms"] == 7


def test_librdkafka_names_and_values_and_kafka_pythons_none_are_taken() -> None:
    """A confluent-kafka config typed for Confluent Cloud, with librdkafka's names, runs: its aliases set the
    fabric's settings, its SASL and callback configs are ignored with a warning naming what does their job, and
    kafka-python's None (compression_type's default) leaves a setting at its default."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        producer = client_config("producer", PRODUCER_SETTINGS, {
            "queue.buffering.max.ms": 7, "message.timeout.ms": 60_000, "compression_type": None,
            "security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": "key",
            "sasl.password": "secret", "error_cb": print})
    assert (producer["linger_ms"], producer["delivery_timeout_ms"], producer["compression_type"]) == (7, 60_000, "none")
    assert sorted(str(w.message).split("'")[1] for w in caught) == [
        "error_cb", "sasl.mechanisms", "sasl.password", "sasl.username", "security.protocol"]
    assert all(issubclass(w.category, IgnoredConfigWarning) for w in caught)
    assert "?token=" in next(str(w.message) for w in caught if "sasl.password" in str(w.message))
    consumer = client_config("consumer", CONSUMER_SETTINGS, {
        "auto.offset.reset": "smallest", "partition.assignment.strategy": "range,roundrobin", "fetch.wait.max.ms": 100})
    assert (consumer["auto_offset_reset"], consumer["partition_assignment_strategy"], consumer["fetch_max_wait_ms"]) \
        == ("earliest", "range", 100)
    largest = client_config("consumer", CONSUMER_SETTINGS, {"auto.offset.reset": "largest"})
    assert largest["auto_offset_reset"] == "latest"
    with pytest.raises(InvalidConfigError, match="auto.offset.reset.*must be one of earliest, latest, none"):
        client_config("consumer", CONSUMER_SETTINGS, {"auto.offset.reset": "sometimes"})
