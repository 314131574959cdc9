"""The configuration reference page (configuration.md), written at every docs build from the code's own config
tables, so it never drifts from what the fabric accepts.

mkdocs-gen-files runs this file during `mkdocs build` (mkdocs.yml); `python docs/scripts/config_reference.py`
prints the page. Sources: topic and client configs (fabric.common.config), the coordinator's and the data
node's properties and options (fabric.server.instance, fabric.server.node.settings), the Spark source's and
sink's options (fabric.sources.options, fabric.sinks.fabric_sink) and the Spark confs (fabric.spark.options).
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable, Iterable, Mapping, Sequence

from fabric.common import config
from fabric.server import instance
from fabric.server.node import settings as node_settings
from fabric.sinks import fabric_sink
from fabric.sources import options as source_options
from fabric.spark import options as spark_options

PAGE = "configuration.md"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DURATIONS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s"))


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell: no pipes, no HTML, one line."""
    return str(text).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def readable(key: str, value: Any) -> str:
    """A default as the code holds it, with milliseconds and bytes also in larger units (`7 d`, `1 GiB`)."""
    if value is None or value == "":
        return "(not set)"
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, bool) or not isinstance(value, int) or value in (config.LONG_MAX, config.INT_MAX):
        return f"`{text}`"
    if key.endswith(("ms", "_ms")):
        unit = next(((size, name) for size, name in DURATIONS if value >= size and value % size == 0), None)
        return f"`{text}` ({value // unit[0]} {unit[1]})" if unit else f"`{text}`"
    if key.endswith(("bytes", "_size")):
        unit = next(((size, name) for size, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB"))
                     if value >= size and value % size == 0), None)
        return f"`{text}` ({value // unit[0]} {unit[1]})" if unit else f"`{text}`"
    return f"`{text}`"


def accepted(parse: Callable[[str], Any]) -> str:
    """What a setting's parser accepts, in its own words: the message it gives a value it refuses."""
    try:
        parse("?")
    except ValueError as exc:
        return str(exc).removeprefix("must be ")
    return "any text"


def settings_table(table_: Mapping[str, config.Setting], dotted_alias: bool) -> str:
    """Topic or client settings: name, default, accepted values, meaning."""
    rows = []
    for key, setting in table_.items():
        dotted = key.replace("_", ".")
        name = f"`{key}` / `{dotted}`" if dotted_alias and dotted != key else f"`{key}`"
        rows.append((name, readable(key, setting.default), accepted(setting.parse), setting.doc))
    return table(("config", "default", "valid values", "meaning"), rows)


def options_of(add_arguments: Callable[[argparse.ArgumentParser], None]) -> dict[str, argparse.Action]:
    """A server command's options by their destination (the settings field each sets)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return {action.dest: action for action in parser._actions}


def ignored_by(key: str) -> str:
    """Which clients ignore a Kafka config: those whose own table does not take it."""
    tables = (("producers", config.PRODUCER_SETTINGS), ("consumers", config.CONSUMER_SETTINGS))
    return " and ".join(kind for kind, table_ in tables if key not in table_)


def server_table(settings: type, properties: Mapping[str, str],
                 add_arguments: Callable[[argparse.ArgumentParser], None]) -> str:
    """A server's properties: the key, the command-line option that overrides it, the default, its help."""
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    options = options_of(add_arguments)
    rows = []
    for key, name in properties.items():
        option = options.get(name)
        flag = f"`{option.option_strings[0]}`" if option is not None else "(properties file only)"
        meaning = option.help if option is not None and option.help else "—"
        rows.append((f"`{key}`", flag, readable(key, defaults.get(name)), meaning))
    return table(("property", "option", "default", "meaning"), rows)


def source_table() -> str:
    """The Spark source's options and the queries each applies to."""
    def queries(name: str) -> str:
        if name in source_options.STREAMING_ONLY:
            return "streaming"
        return "batch" if name in source_options.ENDING_OPTIONS else "batch and streaming"
    rows = [(f"`{name}`", queries(name)) for name in source_options.SOURCE_OPTIONS]
    return table(("option", "queries"), rows)


def kafka_table(equivalents: Mapping[str, str]) -> str:
    """Spark Kafka connector options (`kafka.*`) and what the fabric takes instead."""
    return table(("Kafka connector option", "instead"),
                 ((f"`{spark_options.KAFKA_PREFIX}{key}`", why) for key, why in equivalents.items()))


def page() -> str:
    """The whole configuration reference, in Markdown."""
    return "\n".join([
        "# Configuration reference",
        "",
        "Every table on this page is generated from the code's own config tables when the documentation is "
        "built, so it lists exactly what this version accepts. A value outside *valid values* is refused with an "
        "error naming the config and what it accepts.",
        "",
        "## Topic configs",
        "",
        "Kafka's names and defaults. Set at creation (`create_topic(..., config={...})`, `fabric topics create "
        "--config k=v`) or later (`alter_topic_config`, `fabric topics alter --config k=v`, `--delete-config k`). "
        "Source: `TOPIC_SETTINGS` in `fabric/common/config.py`.",
        "",
        settings_table(config.TOPIC_SETTINGS, dotted_alias=False),
        "## Producer configs",
        "",
        "Keyword arguments of `Fabric.producer()`, with `_` or `.` (`linger_ms` or `linger.ms`). Source: "
        "`PRODUCER_SETTINGS` in `fabric/common/config.py`.",
        "",
        settings_table(config.PRODUCER_SETTINGS, dotted_alias=True),
        "## Consumer configs",
        "",
        "Keyword arguments of `Fabric.consumer()`, with `_` or `.`. Source: `CONSUMER_SETTINGS` in "
        "`fabric/common/config.py`.",
        "",
        settings_table(config.CONSUMER_SETTINGS, dotted_alias=True),
        "confluent-kafka's `Consumer` (`fabric.kafka.Consumer`) also takes these. Source: "
        "`CONFLUENT_CONSUMER_SETTINGS` in `fabric/common/config.py`.",
        "",
        settings_table(config.CONFLUENT_CONSUMER_SETTINGS, dotted_alias=True),
        "## Kafka client configs that are accepted and ignored",
        "",
        "Code written for a Kafka client runs unchanged: these configs are accepted with an "
        "`IgnoredConfigWarning` saying what does their job here. A name that is neither here nor in the "
        "tables above is an error listing the known ones. Source: `IGNORED_CLIENT_SETTINGS`.",
        "",
        table(("config", "ignored by", "why"),
              ((f"`{key}`", ignored_by(key), why) for key, why in config.IGNORED_CLIENT_SETTINGS.items())),
        "## librdkafka's names for the same configs",
        "",
        "confluent-kafka's configs under librdkafka's own names are those of the tables above. Source: "
        "`CLIENT_ALIASES`.",
        "",
        table(("librdkafka's config", "is"), ((f"`{key.replace('_', '.')}`", f"`{name}`")
                                             for key, name in config.CLIENT_ALIASES.items())),
        "## Coordinator service",
        "",
        "`fabric coordinator start --config conf/fabric.properties`: each property below can be set in the "
        "properties file, and its option on the command line overrides it. Source: `Settings`, `PROPERTIES` and "
        "`add_start_arguments` in `fabric/server/instance.py`.",
        "",
        server_table(instance.Settings, instance.PROPERTIES, instance.add_start_arguments),
        "## Data node",
        "",
        "`fabric node start --config conf/node.properties`, as for the coordinator. Source: `NodeSettings`, "
        "`PROPERTIES` and `add_node_arguments` in `fabric/server/node/settings.py`.",
        "",
        server_table(node_settings.NodeSettings, node_settings.PROPERTIES, node_settings.add_node_arguments),
        "## Spark source options",
        "",
        "`spark.read.format(\"fabric\")` and `spark.readStream.format(\"fabric\")`, named as Spark's Kafka "
        "source's; what each does: [Spark source](spark/source.md). Other options are refused. Source: "
        "`SOURCE_OPTIONS` in `sources/options.py`.",
        "",
        source_table(),
        kafka_table(source_options.KAFKA_EQUIVALENTS),
        "Other `kafka.*` options are refused too: the source has no Kafka consumer to pass them to.",
        "",
        "## Spark sink options",
        "",
        "`df.write.format(\"fabric\")` and `df.writeStream.format(\"fabric\")`: "
        + ", ".join(f"`{name}`" for name in fabric_sink.SINK_OPTIONS)
        + "; what each does: [Spark sink](spark/sink.md). Spark's own "
        + ", ".join(f"`{name}`" for name in fabric_sink.SPARK_OPTIONS)
        + " are passed along by Spark and ignored by the sink; any other option is refused. Source: "
        "`SINK_OPTIONS` in `sinks/fabric_sink.py`.",
        "",
        kafka_table(fabric_sink.KAFKA_EQUIVALENTS),
        "## Spark confs and environment",
        "",
        table(("name", "what it sets"), [
            (f"`{spark_options.URL_CONF}` (Spark conf)", "the fabric of sources and sinks without a `url` option"),
            (f"`{spark_options.CLIENT_RACK_CONF}` (Spark conf)", f"the source's `{spark_options.CLIENT_RACK_OPTION}` "
             "when the option is not given"),
            (f"`{spark_options.ENV_CLIENT_RACK}` (executor environment)", "the rack of the tasks on that executor, "
             "when neither the option nor the conf is given"),
        ]),
    ])


def main() -> None:
    """Write the page into the docs build (mkdocs-gen-files)."""
    import mkdocs_gen_files

    with mkdocs_gen_files.open(PAGE, "w") as out:
        out.write(page())


if __name__ == "<run_path>":  # run by mkdocs-gen-files during the build
    main()
elif __name__ == "__main__":
    print(page())
