"""`fabric configs`: kafka-configs for topics, with its flags: --describe (the overrides, or with --all every
effective config and where it comes from) and --alter --add-config k=v,k2=[a,b] --delete-config k. Brokers,
users and clients have no dynamic configs here: a server's are its properties file."""
from __future__ import annotations

import argparse
import re

from fabric.cli.common import CommandError, add_command, open_fabric, parse_config
from fabric.client.admin import TopicDescription

ENTITY_TYPES = ("topics", "brokers", "users", "clients", "ips")
# a comma that ends an item: not inside [...] (kafka-configs' way to give a value with commas: k=[a,b])
_ITEM_END = re.compile(r",(?![^\[]*\])")


def _items(text: str | None) -> list[str]:
    """kafka-configs' comma-separated list, values in brackets kept whole (their brackets dropped)."""
    if not text:
        return []
    return [re.sub(r"=\[(.*)\]$", r"=\1", item.strip()) for item in _ITEM_END.split(text) if item.strip()]


def configs(args: argparse.Namespace) -> None:
    """--describe or --alter the configs of --entity-name (or --topic) of --entity-type topics."""
    entity_type = "topics" if args.topic else args.entity_type
    name = args.topic or args.entity_name
    if entity_type != "topics":
        raise CommandError(f"--entity-type {entity_type}: only topics have configs to describe or alter here (a "
                           "coordinator's or a node's are its properties file, conf/fabric.properties or "
                           "conf/node.properties); give --entity-type topics --entity-name NAME, or --topic NAME")
    if args.describe == args.alter:
        raise CommandError("give --describe or --alter (with --add-config and/or --delete-config)")
    with open_fabric(args) as fab:
        if args.describe:
            for number, topic in enumerate([name] if name else fab.list_topics()):
                if number:
                    print()
                _describe(fab.describe_topic(topic), args.all)
            return
        if name is None:
            raise CommandError("--alter needs the topic: --entity-name NAME (or --topic NAME)")
        changes: dict[str, str | None] = dict(parse_config(_items(args.add_config), "--add-config"))
        changes.update({key: None for key in _items(args.delete_config)})
        if not changes:
            raise CommandError("nothing to alter: give --add-config key=value[,key=value] and/or --delete-config "
                               "key[,key]")
        fab.alter_topic_config(name, changes)
    print(f"Completed updating config for topic {name}.")


def _describe(described: TopicDescription, every: bool) -> None:
    """kafka-configs --describe's lines for one topic: its overrides, or with `every` every effective config and
    its source."""
    name, config, overrides = described.name, described.config, described.overrides
    if not every:
        print(f"Dynamic configs for topic {name} are:")
        for key, value in sorted(overrides.items()):
            print(f"  {key}={value} sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:{key}={value}}}")
        return
    print(f"All configs for topic {name} are:")
    for key, value in sorted(config.items()):
        source = "DYNAMIC_TOPIC_CONFIG" if key in overrides else "DEFAULT_CONFIG"
        print(f"  {key}={value} sensitive=false synonyms={{{source}:{key}={value}}}")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric configs`."""
    p = add_command(subparsers, "configs", configs, "describe or alter topic configs (kafka-configs)",
                    description="Describe or alter a topic's configs with kafka-configs' flags: --entity-type "
                                "topics --entity-name NAME (or --topic NAME), then --describe [--all] or --alter "
                                "--add-config k=v,k2=[a,b] --delete-config k. --describe without a name describes "
                                "every topic.")
    p.add_argument("--entity-type", choices=ENTITY_TYPES, default="topics", help="topics (the only one with configs "
                   "here)")
    p.add_argument("--entity-name", metavar="NAME", help="the topic")
    p.add_argument("--topic", metavar="NAME", help="the same as --entity-type topics --entity-name NAME")
    p.add_argument("--describe", action="store_true", help="print the overrides (with --all: every config)")
    p.add_argument("--all", action="store_true", help="with --describe: every effective config and its source")
    p.add_argument("--alter", action="store_true", help="change configs (--add-config, --delete-config)")
    p.add_argument("--add-config", metavar="K=V[,K=V]", help="overrides to set; a value with commas in brackets")
    p.add_argument("--delete-config", metavar="K[,K]", help="overrides to remove (back to the default)")
