"""Server metrics without processes: --metrics-port (metrics.port), --metrics-host (metrics.host, loopback by
default) and --metrics-token-file (metrics.token.file) are read the same way by the coordinator and the node; each
server's metrics live in a registry of its own, served on a real port, behind a bearer token when given one; the
controller's decisions are counted as elections and ISR changes; requests are counted with their bytes and
refusals."""
from __future__ import annotations

import argparse
import urllib.error
import urllib.request
from typing import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fabric.common.errors import InvalidConfigError, NotLeaderError
from fabric.common.types import LeaderAndIsr
from fabric.coordinator.controller import Decision, DecisionKind
from fabric.server.coordinator_metrics import DecisionCounters
from fabric.server.instance import add_start_arguments, settings_from
from fabric.server.metrics import ServerMetrics
from fabric.server.node.settings import add_node_arguments, node_settings_from
from fabric.server.request_metrics import count_bytes

NODE = ("--id", "1", "--coordinator", "fabric://127.0.0.1:9093")


def parse(add: Callable[[argparse.ArgumentParser], None], settings_of: Callable, argv: tuple[str, ...]):
    parser = argparse.ArgumentParser()
    add(parser)
    return settings_of(parser.parse_args(list(argv)))


SERVERS = {"coordinator": (add_start_arguments, settings_from, ()), "node": (add_node_arguments, node_settings_from,
                                                                            NODE)}


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_the_metrics_port_is_off_by_default_and_any_port_from_0_is_taken(server, tmp_path) -> None:
    add, settings_of, required = SERVERS[server]
    assert parse(add, settings_of, required).metrics_port is None
    assert parse(add, settings_of, (*required, "--metrics-port", "0")).metrics_port == 0
    assert parse(add, settings_of, (*required, "--metrics-port", "65535")).metrics_port == 65535
    config = tmp_path / "server.properties"
    config.write_text("metrics.port=9101\n")
    assert parse(add, settings_of, (*required, "--config", str(config))).metrics_port == 9101
    config.write_text("metrics.port=\n")  # an empty key leaves metrics off
    assert parse(add, settings_of, (*required, "--config", str(config))).metrics_port is None


@pytest.mark.parametrize("server", sorted(SERVERS))
@pytest.mark.parametrize("port", ["-1", "65536", "http", "9100.5", ""])
def test_a_bad_metrics_port_names_the_fix(server, port) -> None:
    add, settings_of, required = SERVERS[server]
    with pytest.raises(InvalidConfigError, match="--metrics-port .* must be a port from 1 to 65535, or 0 for any "
                                                 "free port .*leave it out to serve no metrics"):
        parse(add, settings_of, (*required, "--metrics-port", port))


@pytest.mark.parametrize("server", sorted(SERVERS))
def test_the_metrics_endpoint_binds_loopback_unless_told_and_takes_a_token_file(server, tmp_path) -> None:
    add, settings_of, required = SERVERS[server]
    default = parse(add, settings_of, required)
    assert (default.metrics_host, default.metrics_token_file) == ("127.0.0.1", None)
    config = tmp_path / "server.properties"
    config.write_text("metrics.host=0.0.0.0\nmetrics.token.file=metrics-token\n")
    configured = parse(add, settings_of, (*required, "--config", str(config)))
    assert configured.metrics_host == "0.0.0.0"
    assert configured.metrics_token_file == str(tmp_path / "metrics-token")  # relative to the config file
    flags = parse(add, settings_of, (*required, "--metrics-host", "::1", "--metrics-token-file", "/run/t"))
    assert (flags.metrics_host, flags.metrics_token_file) == ("::1", "/run/t")


def scrape(port: int, token: str | None = None) -> dict[tuple[str, tuple[str, ...]], float]:
    """(sample name, label values) -> value, from the endpoint on 127.0.0.1:`port` (sending `token`, if any)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(s.labels.values())): s.value for family in text_string_to_metric_families(text)
            for s in family.samples}


def test_each_server_serves_its_own_registry_on_the_port_it_bound() -> None:
    first, second = ServerMetrics(), ServerMetrics()  # the same metric names, no collision
    try:
        first.serve("127.0.0.1", 0)
        second.serve("127.0.0.1", 0)
        assert first.port and second.port and first.port != second.port
        with first.requests.measure("produce"):
            count_bytes(100)
        with pytest.raises(NotLeaderError), second.requests.measure("fetch"):
            raise NotLeaderError("not here")
        count_bytes(7)  # outside a measured request: counted nowhere
        one, two = scrape(first.port), scrape(second.port)
        assert (one[("fabric_produce_requests_total", ())], one[("fabric_produce_bytes_total", ())]) == (1, 100)
        assert one[("fabric_produce_latency_seconds_count", ())] == 1
        assert one[("fabric_fetch_requests_total", ())] == 0
        assert (two[("fabric_produce_requests_total", ())], two[("fabric_fetch_requests_total", ())]) == (0, 1)
        assert two[("fabric_fetch_bytes_total", ())] == 0
        assert two[("fabric_fetch_errors_total", ("NotLeaderError",))] == 1
    finally:
        first.close()
        second.close()
    assert first.port is None


def test_with_a_token_file_only_a_scrape_bearing_its_token_is_answered(tmp_path) -> None:
    (tmp_path / "metrics-token").write_text("# the scraper's token\nscrape-secret\n")
    metrics = ServerMetrics()
    try:
        metrics.serve("127.0.0.1", 0, str(tmp_path / "metrics-token"))
        assert metrics.port is not None
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic scrape-secret"},
                        {"Authorization": "Bearer scrape-secret-and-more"}):
            request = urllib.request.Request(f"http://127.0.0.1:{metrics.port}/metrics", headers=headers)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"].startswith("Bearer")
            assert b"fabric_" not in refused.value.read()
        assert ("fabric_produce_requests_total", ()) in scrape(metrics.port, "scrape-secret")
    finally:
        metrics.close()


@pytest.mark.parametrize("content, problem", [("", "holds 0"), ("one\ntwo\n", "holds 2"),
                                              ("token principal\n", "a token line has 1 fields")])
def test_a_metrics_token_file_of_anything_but_one_token_is_refused_without_showing_it(tmp_path, content,
                                                                                       problem) -> None:
    (tmp_path / "metrics-token").write_text(content)
    with pytest.raises(InvalidConfigError, match=problem) as raised:
        ServerMetrics().serve("127.0.0.1", 0, str(tmp_path / "metrics-token"))
    assert "principal" not in str(raised.value).replace("`token principal`", "") and "two" not in str(raised.value)


def test_a_port_in_use_is_refused_with_the_fix(busy_port) -> None:
    with pytest.raises(InvalidConfigError, match=f"cannot serve metrics on 127.0.0.1:{busy_port} .*choose another "
                                                 "--metrics-port"):
        ServerMetrics().serve("127.0.0.1", busy_port)


def state(leader: int | None, isr: tuple[int, ...], epoch: int) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, isr, epoch, 1)


def test_the_controllers_decisions_count_as_elections_and_isr_changes() -> None:
    metrics = ServerMetrics()
    counters = DecisionCounters(metrics.registry)
    tp = ("t", 0)
    for decision in [
        Decision(tp, DecisionKind.CREATED, None, state(1, (1, 2, 3), 0)),
        Decision(tp, DecisionKind.ISR_CHANGED, state(1, (1, 2, 3), 0), state(1, (1, 2), 1)),  # follower 3 died
        Decision(tp, DecisionKind.ELECTED, state(1, (1, 2), 1), state(2, (2,), 2)),  # leader 1 died: 2 elected
        Decision(tp, DecisionKind.OFFLINE, state(2, (2,), 2), state(None, (2,), 3)),  # the last one died
        Decision(tp, DecisionKind.UNCLEAN_ELECTED, state(None, (2,), 3), state(3, (3,), 4)),
        Decision(tp, DecisionKind.ISR_CHANGED, state(3, (3,), 4), state(3, (1, 3), 5)),  # 1 caught up
    ]:
        counters.decided(decision)
    samples = {(s.name, tuple(s.labels.values())): s.value for metric in metrics.registry.collect()
               for s in metric.samples}
    assert samples[("fabric_leader_elections_total", ("elected",))] == 1
    assert samples[("fabric_leader_elections_total", ("offline",))] == 1
    assert samples[("fabric_leader_elections_total", ("unclean_elected",))] == 1
    assert samples[("fabric_isr_shrinks_total", ())] == 3  # 3 left, 1 left, 2 replaced by 3
    assert samples[("fabric_isr_expands_total", ())] == 2  # 3 replaced 2, 1 rejoined
