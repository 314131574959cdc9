"""The client config Kafka's console tools take: `--producer.config FILE` / `--consumer.config FILE` (a properties
file of Kafka's client configs), then `--producer-property k=v` / `--consumer-property k=v` (which win). The client
checks every key and value; the tool's own flags say what they set."""
from __future__ import annotations

import argparse

from fabric.cli.common import CommandError, parse_config
from fabric.server.security import load_properties

TRUE_FALSE = ("true", "false")


def add_options(parser: argparse.ArgumentParser, kind: str, example: str) -> None:
    """`--{kind}.config FILE` and `--{kind}-property K=V` (repeatable, several after one) on `parser`."""
    parser.add_argument(f"--{kind}.config", dest="client_config_file", metavar="FILE",
                        help=f"a properties file of Kafka's {kind} configs (e.g. {example})")
    parser.add_argument(f"--{kind}-property", dest="client_properties", action="extend", nargs="+",
                        metavar="K=V", help=f"a Kafka {kind} config, e.g. {example} (wins over --{kind}.config's)")


def given(args: argparse.Namespace, kind: str) -> dict[str, str]:
    """The configs --{kind}.config and --{kind}-property give, the latter winning."""
    out = load_properties(args.client_config_file) if args.client_config_file else {}
    out.update(parse_config(args.client_properties, f"--{kind}-property", example="client.id=me"))
    return out


def take(configs: dict[str, str], key: str, flag: str, value: str | None) -> str | None:
    """Remove `key` from `configs`, which the tool's own `flag` sets: its value, or the flag's `value` (a
    CommandError where both are given and differ)."""
    configured = configs.pop(key, None)
    if value is not None and configured is not None and configured != value:
        raise CommandError(f"{flag} and the config {key}={configured} disagree; give one")
    return value if value is not None else configured


def flag(configs: dict[str, str], key: str, default: bool) -> bool:
    """Remove the true/false config `key` from `configs`: its value, else `default`."""
    text = configs.pop(key, None)
    if text is None:
        return default
    if text.strip().lower() not in TRUE_FALSE:
        raise CommandError(f"config {key}={text}: expected true or false")
    return text.strip().lower() == "true"
