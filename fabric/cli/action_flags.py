"""Kafka's tools name their action with a flag (`kafka-topics --create --topic T`, `kafka-consumer-groups
--describe --group G`); `fabric` names it with a verb (`fabric topics create T`). A command line in Kafka's form is
read as the verb's: the one action flag, wherever it stands after the command, becomes the verb after it.
"""
from __future__ import annotations

from typing import Sequence

from fabric.cli.common import CommandError

# the command groups whose verbs Kafka's tool gives as flags, and those flags' verbs
ACTIONS = {"topics": ("create", "list", "describe", "delete", "alter"),
           "groups": ("list", "describe", "delete", "reset-offsets", "delete-offsets")}
GLOBAL_VALUED = ("--url", "--bootstrap-server", "--command-config", "--log-level")  # `fabric`'s options with values


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
