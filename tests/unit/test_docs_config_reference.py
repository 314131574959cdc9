"""The configuration reference page (docs/scripts/config_reference.py, which the docs build runs) lists every
config the code accepts, with the default and the accepted values the code's own tables and parsers give."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from fabric.common.config import CONFLUENT_CONSUMER_SETTINGS, CONSUMER_SETTINGS, PRODUCER_SETTINGS, TOPIC_SETTINGS
from fabric.server import instance
from fabric.server.node import settings as node_settings
from fabric.sources.options import SOURCE_OPTIONS


@pytest.fixture(scope="module")
def reference(repo_root: str) -> ModuleType:
    path = Path(repo_root) / "docs" / "scripts" / "config_reference.py"
    spec = importlib.util.spec_from_file_location("fabric_docs_config_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(page: str, name: str) -> list[str]:
    return [line for line in page.splitlines() if line.startswith(f"| `{name}`")]


def test_every_topic_and_client_config_is_listed_with_its_default_and_accepted_values(reference):
    page = reference.page()
    for table in (TOPIC_SETTINGS, PRODUCER_SETTINGS, CONSUMER_SETTINGS, CONFLUENT_CONSUMER_SETTINGS):
        for key, setting in table.items():
            found = rows(page, key)
            assert found, f"{key} is missing from the configuration reference"
            expected = (reference.readable(key, setting.default), reference.accepted(setting.parse), setting.doc)
            assert any(all(reference.cell(part) in row for part in expected) for row in found), (key, found)


def test_every_server_property_is_listed_with_the_option_that_sets_it(reference):
    page = reference.page()
    for properties, add_arguments in ((instance.PROPERTIES, instance.add_start_arguments),
                                      (node_settings.PROPERTIES, node_settings.add_node_arguments)):
        options = reference.options_of(add_arguments)
        for key, name in properties.items():
            option = f"`{options[name].option_strings[0]}`" if name in options else "(properties file only)"
            assert any(option in row for row in rows(page, key)), f"{key} ({option}) is missing"
    assert all(rows(page, name) for name in SOURCE_OPTIONS)


def test_defaults_and_values_read_as_the_code_means_them(reference):
    assert reference.readable("retention.ms", 7 * 24 * 3600 * 1000) == "`604800000` (7 d)"
    assert reference.readable("segment.bytes", 1 << 30) == "`1073741824` (1 GiB)"
    assert reference.readable("replica.fetch.wait.max.ms", 500) == "`500`"
    assert reference.readable("enable_idempotence", True) == "`true`"
    assert reference.readable("coordinator.store", None) == "(not set)"
    assert reference.accepted(PRODUCER_SETTINGS["acks"].parse) == "one of 0, 1, all, -1"
    assert reference.accepted(str) == "any text"
    assert reference.cell("a|b <c>\nd") == "a\\|b &lt;c&gt; d"
