"""The coordinator instance's offsets-topic, transaction-timeout and request-size options (fabric/server/instance.py):
offsets.topic.segment.bytes takes the topic config's own check, and a bad value names the option and the range."""
from __future__ import annotations

import argparse

import pytest

from fabric.common.config import INT_MAX
from fabric.common.errors import InvalidConfigError
from fabric.coordinator.offsets_records import SEGMENT_BYTES
from fabric.server.instance import add_start_arguments, settings_from


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    add_start_arguments(parser)
    return settings_from(parser.parse_args(argv))


def test_the_offsets_topic_segment_size_defaults_to_the_local_topics_and_can_be_set() -> None:
    assert parse().offsets_topic_segment_bytes == SEGMENT_BYTES
    assert parse("--offsets-topic-segment-bytes", "65536").offsets_topic_segment_bytes == 65536


@pytest.mark.parametrize("value", ["100", "x", "-1"])
def test_a_bad_offsets_topic_segment_size_names_the_option_and_the_range(value) -> None:
    with pytest.raises(InvalidConfigError, match=r"--offsets-topic-segment-bytes \(offsets.topic.segment.bytes\): .*"
                                                 "must be an integer from 1024"):
        parse("--offsets-topic-segment-bytes", value)


def test_the_transaction_timeout_options_default_to_kafkas_and_can_be_set() -> None:
    assert (parse().transaction_max_timeout_ms, parse().transaction_cleanup_interval_ms) == (900_000, 10_000)
    settings = parse("--transaction-max-timeout-ms", "60000", "--transaction-cleanup-interval-ms", "500")
    assert (settings.transaction_max_timeout_ms, settings.transaction_cleanup_interval_ms) == (60_000, 500)


@pytest.mark.parametrize("option", ["--transaction-max-timeout-ms", "--transaction-cleanup-interval-ms"])
def test_a_bad_transaction_timeout_option_names_the_key_and_the_range(option) -> None:
    with pytest.raises(InvalidConfigError, match="must be a number of milliseconds from 1"):
        parse(option, "0")


def test_socket_request_max_bytes_defaults_to_kafkas_and_a_bad_value_names_the_key() -> None:
    assert parse().socket_request_max_bytes == 100 << 20
    assert parse("--socket-request-max-bytes", "4194304").socket_request_max_bytes == 4 << 20
    with pytest.raises(InvalidConfigError, match="socket.request.max.bytes must be a number of bytes from 1"):
        parse("--socket-request-max-bytes", "0")


def test_connection_limits_default_to_kafkas_none_and_a_bad_value_names_the_key() -> None:
    assert (parse().max_connections, parse().max_connections_per_ip) == (INT_MAX, INT_MAX)
    limited = parse("--max-connections", "100", "--max-connections-per-ip", "0",
                    "--max-connections-per-ip-overrides", "10.0.0.5:20")
    quotas = limited.connection_quotas()
    assert (quotas.total, quotas.per_ip, quotas.overrides) == (100, 0, {"10.0.0.5": 20})
    with pytest.raises(InvalidConfigError, match="max.connections.per.ip must be a number of connections from 1"):
        parse("--max-connections-per-ip", "0")  # nothing could connect: 0 only beside overrides
    with pytest.raises(InvalidConfigError, match="max.connections must be a number of connections from 1"):
        parse("--max-connections", "lots")
    with pytest.raises(InvalidConfigError, match="max.connections.per.ip.overrides entry '10.0.0.5' must be HOST"):
        parse("--max-connections-per-ip-overrides", "10.0.0.5")


def test_offsets_retention_defaults_to_kafkas_seven_days_and_a_bad_value_names_the_key() -> None:
    assert (parse().offsets_retention_minutes, parse().offsets_retention_check_interval_ms) == (10080, 600_000)
    short = parse("--offsets-retention-minutes", "1", "--offsets-retention-check-interval-ms", "500")
    assert (short.offsets_retention_minutes, short.offsets_retention_check_interval_ms) == (1, 500)
    for bad in ("0", "-5", "1.5", "week"):
        with pytest.raises(InvalidConfigError, match="offsets.retention.minutes must be a number of minutes from 1"):
            parse("--offsets-retention-minutes", bad)
    with pytest.raises(InvalidConfigError, match="offsets.retention.check.interval.ms must be a number of millis"):
        parse("--offsets-retention-check-interval-ms", "0")


def test_group_max_session_timeout_defaults_to_kafkas_thirty_minutes() -> None:
    assert parse().group_max_session_timeout_ms == 1_800_000
    assert parse("--group-max-session-timeout-ms", "3600000").group_max_session_timeout_ms == 3_600_000
    with pytest.raises(InvalidConfigError, match="group.max.session.timeout.ms must be a number of milliseconds"):
        parse("--group-max-session-timeout-ms", "forever")


def test_group_max_size_defaults_to_kafkas_no_limit_and_a_bad_value_names_the_key() -> None:
    assert parse().group_max_size == 2**31 - 1
    assert parse("--group-max-size", "50").group_max_size == 50
    for bad in ("0", "-3", "lots", "2147483648"):
        with pytest.raises(InvalidConfigError, match=r"group.max.size must be a number of members from 1 to "
                                                     r"2147483647, got"):
            parse("--group-max-size", bad)


def test_producer_id_expiration_defaults_to_kafkas_day_and_a_bad_value_names_the_key() -> None:
    assert parse().producer_id_expiration_ms == 86_400_000
    assert parse("--producer-id-expiration-ms", "60000").producer_id_expiration_ms == 60_000
    assert parse("--producer-id-expiration-ms", "604800000").producer_id_expiration_ms == 604_800_000  # a week
    with pytest.raises(InvalidConfigError, match="producer.id.expiration.ms must be a number of milliseconds"):
        parse("--producer-id-expiration-ms", "0")
    with pytest.raises(InvalidConfigError, match="from 1 to 2147483647, got '2147483648'"):  # Kafka's int
        parse("--producer-id-expiration-ms", "2147483648")
    with pytest.raises(InvalidConfigError, match="node.session.timeout.ms .* from 1 to 86400000"):  # others: a day
        parse("--node-session-timeout-ms", "604800000")


def test_connections_max_idle_ms_defaults_to_kafkas_and_a_bad_value_names_the_key() -> None:
    assert parse().connections_max_idle_ms == 600_000
    assert parse("--connections-max-idle-ms", "1500").connections_max_idle_ms == 1500
    with pytest.raises(InvalidConfigError, match="connections.max.idle.ms must be a number of milliseconds from 1"):
        parse("--connections-max-idle-ms", "0")
