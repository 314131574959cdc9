"""Kafka's tools name their action with a flag (`kafka-topics --create --topic T`, `kafka-consumer-groups
--describe --group G`); `fabric` names it with a verb (`fabric topics create T`). A command line in Kafka's form is
read as the verb's: the one action flag, wherever it stands after the command, becomes the verb after it.
"""
from __future__ import annotations

from typing import Collection, Sequence

from fabric.cli.common import CommandError

# the command groups whose verbs Kafka's tool gives as flags, and those flags' verbs
ACTIONS = {"topics": ("create", "list", "describe", "delete", "alter"),
           "groups": ("list", "describe", "delete", "reset-offsets", "delete-offsets")}
GLOBAL_VALUED = ("--url", "--bootstrap-server", "--command-config", "--log-level")  # `fabric`'s options with values
# Kafka's tools that are no `fabric` command of their own name (typed as `kafka-NAME[.sh]`, or NAME): where they are
KAFKA_TOOLS = {
    "console-producer": "is `fabric produce` here", "console-consumer": "is `fabric consume` here",
    "consumer-groups": "is `fabric groups` here", "delete-records": "is `fabric topics delete-records` here",
    "leader-election": "is `fabric partitions elect-leaders` here",
    "reassign-partitions": "is `fabric partitions reassign` here",
    "metadata-quorum": "is `fabric coordinator status` here",
    "server-start": "is `fabric coordinator start` and `fabric node start` here",
    "log-dirs": "is `fabric topics describe` here (each partition's segments and bytes)",
    "acls": "has no counterpart: the ACLs are the acl.file of the coordinator and of each data node (docs: Security)",
}
# Kafka tools' flags a `fabric` command does not take under that name: what to give instead
KAFKA_FLAGS = {
    "--broker-list": "--bootstrap-server HOST:PORT (its newer name in Kafka's tools too)",
    "--zookeeper": "--bootstrap-server HOST:PORT or --url: the tools reach the fabric's coordinator, never ZooKeeper",
}


def as_verbs(argv: Sequence[str]) -> list[str]:
    """`argv` with a Kafka action flag of `topics` or `groups` made the verb (`topics --create --topic T` ->
    `topics create --topic T`); a line that already names a verb, or no action flag, is kept as it is (the parser
    then says what is wrong with it); CommandError for several action flags."""
    args = list(argv)
    at = _command_at(args)
    if at is None or args[at] not in ACTIONS or at + 1 >= len(args) or not args[at + 1].startswith("-"):
        return args
    flags = {f"--{verb}": verb for verb in ACTIONS[args[at]]}
    found = [i for i in range(at + 1, len(args)) if args[i] in flags]
    if len(found) > 1:
        raise CommandError(f"{' and '.join(args[i] for i in found)} given; `fabric {args[at]}` takes one of "
                           f"{', '.join(flags)} (or the verb: `fabric {args[at]} {ACTIONS[args[at]][0]} ...`)")
    if not found:
        return args
    verb = flags[args.pop(found[0])]
    args.insert(at + 1, verb)
    return args


def kafka_tool_hint(argv: Sequence[str], commands: Collection[str]) -> str | None:
    """Where a Kafka tool typed as the command (`fabric delete-records`, `fabric kafka-topics.sh`) is in `fabric`,
    as an error's text; None where the command is one of `commands`, or no Kafka tool's name."""
    args = list(argv)
    at = _command_at(args)
    if at is None or args[at] in commands:
        return None
    typed = args[at]
    name = typed.removesuffix(".sh").removesuffix(".bat").removeprefix("kafka-")
    where = f"is `fabric {name}` here" if name in commands else KAFKA_TOOLS.get(name)
    if where is None:
        return None
    return f"`fabric {typed}` is no command; kafka-{name} {where} (`fabric --help` lists the commands)"


def unknown_flags_hint(extra: Sequence[str], prog: str) -> str:
    """The error for arguments `prog` (e.g. "fabric produce") does not take: a Kafka flag's counterpart where it
    has one, and where to find what the command takes."""
    hints = [f"{flag}: give {KAFKA_FLAGS[flag]}" for flag in extra if flag in KAFKA_FLAGS]
    return (f"unrecognized arguments: {' '.join(extra)}" + "".join(f"; {h}" for h in hints)
            + f" (`{prog} --help` lists what it takes)")


def _command_at(args: list[str]) -> int | None:
    """Where the command (`topics`, `groups`, ...) stands: the first word that is no option and no option's value."""
    i = 0
    while i < len(args):
        word = args[i]
        if word in GLOBAL_VALUED:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return i
    return None
