"""The fabric source's options parsed without a Spark session (no conf to read): clientRack, validated on the
driver, and the rack a task falls back to, $FABRIC_CLIENT_RACK of its executor. (Options through real Spark reads:
tests/integration/test_source.py.)"""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidConfigError
from fabric.sources.options import parse_source_options
from fabric.spark.options import ENV_CLIENT_RACK, MAX_RACK_LENGTH, task_client_rack

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
