"""A data node's options (fabric/server/node/settings.py): the shipped conf/node.properties is valid, and a
missing or malformed option is an error naming it and the fix."""
from __future__ import annotations

import argparse
import os

import pytest

from fabric.common.errors import InvalidConfigError
from fabric.server.node.settings import add_node_arguments, node_settings_from


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    return node_settings_from(parser.parse_args(argv))


def test_the_shipped_node_config_is_valid(repo_root) -> None:
    settings = parse("--config", os.path.join(repo_root, "conf", "node.properties"), "--id", "2")
    assert (settings.node_id, settings.coordinator, settings.heartbeat_interval_ms) == (
        2, "fabric://127.0.0.1:9093", 2000)
    assert settings.tokens_file == os.path.join(repo_root, "conf", "tokens")
    assert settings.log_retention_check_interval_ms == 300000
    assert parse("--id", "1", "--coordinator", "fabric://h:1", "--log-retention-check-interval-ms",
                 "250").log_retention_check_interval_ms == 250
    assert settings.socket_request_max_bytes == 100 << 20  # Kafka's socket.request.max.bytes
    assert settings.connections_max_idle_ms == 600_000  # and connections.max.idle.ms
    assert parse("--id", "1", "--coordinator", "fabric://h:1", "--connections-max-idle-ms",
                 "1500").connections_max_idle_ms == 1500
    assert parse("--id", "1", "--coordinator", "fabric://h:1", "--socket-request-max-bytes",
                 "65536").socket_request_max_bytes == 65536
    assert parse("--id", "1", "--coordinator", "fabric://h:1", "--max-connections-per-ip",
                 "50").connection_quotas().per_ip == 50  # the same socket keys as the coordinator's
    assert settings.producer_id_expiration_ms == 86_400_000  # Kafka's producer.id.expiration.ms
    assert parse("--id", "1", "--coordinator", "fabric://h:1", "--producer-id-expiration-ms",
                 "60000").producer_id_expiration_ms == 60_000
    assert parse("--id", "1", "--coordinator", "fabric://h:1", "--producer-id-expiration-ms",
                 "604800000").producer_id_expiration_ms == 604_800_000  # past a day, as Kafka takes it
    assert (settings.log_scrubber_io_max_bytes_per_second, settings.log_scrubber_backoff_ms) == (16 << 20, 15000)
    scrubbing = parse("--id", "1", "--coordinator", "fabric://h:1", "--log-scrubber-io-max-bytes-per-second", "0",
                      "--log-scrubber-backoff-ms", "500")
    assert (scrubbing.log_scrubber_io_max_bytes_per_second, scrubbing.log_scrubber_backoff_ms) == (0, 500)


@pytest.mark.parametrize("argv, message", [
    ((), "needs its id: --id N"),
    (("--id", "x", "--coordinator", "fabric://h:1"), "--id 'x' must be a node id"),
    (("--id", "1"), "needs its coordinator: --coordinator fabric://"),
    (("--id", "1", "--coordinator", "http://h:1"), "coordinator URL 'http://h:1' is invalid"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--listen", "nowhere"), "--listen 'nowhere' must be HOST:PORT"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--heartbeat-interval-ms", "5000", "--session-timeout-ms",
      "4000"), "must be below node.session.timeout.ms"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--session-timeout-ms", "0"), "node.session.timeout.ms must be"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--log-retention-check-interval-ms", "0"),
     "log.retention.check.interval.ms must be a number of milliseconds"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--socket-request-max-bytes", "1e6"),
     "socket.request.max.bytes must be a number of bytes from 1"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--log-scrubber-io-max-bytes-per-second", "-1"),
     "log.scrubber.io.max.bytes.per.second must be a number of bytes from 0"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--connections-max-idle-ms", "-5"),
     "connections.max.idle.ms must be a number of milliseconds"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--producer-id-expiration-ms", "day"),
     "producer.id.expiration.ms must be a number of milliseconds"),
    (("--id", "1", "--coordinator", "fabric://h:1", "--log-scrubber-backoff-ms", "0"),
     "log.scrubber.backoff.ms must be a number of milliseconds"),
])
def test_bad_options_name_the_fix(argv, message) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        parse(*argv)
