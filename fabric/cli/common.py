"""What the `fabric` command groups share: how a command is declared (`add_command`), how it reaches the
fabric (`open_fabric`; the URL's options from --command-config's file, as Kafka's tools take a client config,
so a token stays off the command line), `key=value` parsing and table printing.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, NamedTuple, Sequence
from urllib.parse import urlencode, urlparse

from fabric.client.admin import Fabric
from fabric.client.url import bootstrap_url as servers_url
from fabric.client.url import open_cluster, resolve
from fabric.common.errors import FabricError
from fabric.server.connection import ENV_TOKEN, QUERY_KEYS, SCHEMES, url_token
from fabric.server.security import load_properties

Handler = Callable[[argparse.Namespace], "int | None"]


class CommandError(FabricError):
    """Bad command-line input the argument parser cannot catch (e.g. bad JSON on stdin)."""


def bootstrap_url(servers: str) -> str:
    """Kafka's `--bootstrap-server host:port[,host:port]` as the fabric:// URL of those coordinators (a value
    that already names a scheme is kept)."""
    try:
        return servers_url(servers)
    except FabricError:
        raise argparse.ArgumentTypeError(f"--bootstrap-server expects host:port[,host:port], got {servers!r} "
                                         "(or use --url file:///dir for an embedded fabric)") from None


def add_url_option(parser: argparse.ArgumentParser, default: Any) -> None:
    """The --url option, and Kafka's --bootstrap-server for it; accepted before the command and after it
    (`fabric topics list --url X`)."""
    parser.add_argument("--url", default=default, metavar="URL",
                        help="the fabric to use: file:///dir or a path (embedded), or fabric://host:port "
                             "(default: $FABRIC_URL, else ./fabric-data)")
    parser.add_argument("--bootstrap-server", dest="url", default=default, type=bootstrap_url,
                        metavar="HOST:PORT", help="as in Kafka's tools: --url fabric://HOST:PORT[,HOST:PORT]")
    parser.add_argument("--command-config", default=default, metavar="FILE",
                        help="as in Kafka's tools: a properties file of the fabric:// URL's options ("
                             + ", ".join(QUERY_KEYS) + f"), e.g. token=...; with ${ENV_TOKEN}, the way to give a "
                             "token without showing it on the command line")


def client_url(args: argparse.Namespace) -> str | None:
    """The URL a command uses: --url (None: $FABRIC_URL, else ./fabric-data) with the options of --command-config's
    file added (they win over the URL's). A token in --url gets a warning on stderr: every user of the machine
    can read a command line (ps), and the shell keeps it in its history."""
    url = args.url
    if url and url_token(url) is not None:
        print(f"warning: --url carries ?token=, which other users of this machine can read on the command line (ps) "
              f"and which the shell history keeps; set ${ENV_TOKEN} or put token=... in a file given as "
              "--command-config FILE instead", file=sys.stderr)
    path = getattr(args, "command_config", None)
    if not path:
        return url
    options = load_properties(path)
    unknown = sorted(set(options) - set(QUERY_KEYS))
    if unknown:
        raise CommandError(f"{path}: unknown key(s) {', '.join(unknown)}; --command-config takes the fabric:// URL's "
                           f"options: {', '.join(QUERY_KEYS)}")
    url = resolve(url)
    if urlparse(url).scheme not in SCHEMES:
        raise CommandError(f"--command-config holds the options of a fabric:// URL; {url!r} is an embedded fabric, "
                           "which takes none")
    return url + ("&" if urlparse(url).query else "?") + urlencode(options)


def add_command(subparsers: argparse._SubParsersAction, name: str, handler: Handler | None, help: str,
                description: str | None = None, epilog: str | None = None) -> argparse.ArgumentParser:
    """Declare one (sub)command; `handler(args)` runs it (None for a group that only has subcommands). Every one
    takes --url / --bootstrap-server / --command-config, a group's before its verb as Kafka's tools have them
    (`kafka-transactions --bootstrap-server H list` -> `fabric transactions --bootstrap-server H list`)."""
    parser = subparsers.add_parser(name, help=help, description=textwrap.fill(description or help, 90),
                                   epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_url_option(parser, argparse.SUPPRESS)
    if handler is not None:
        parser.set_defaults(func=handler, prog=parser.prog)  # (prog: named in the error for arguments it lacks)
    return parser


def defer_arguments(parser: argparse.ArgumentParser, add: Callable[[argparse.ArgumentParser], None]) -> None:
    """Have `add(parser)` give `parser` its arguments only when the command is used (its arguments parsed, its help
    printed): a server's options come from its modules, which load the storage and replication layers that a
    client command has no use for. Shell completion reads every parser, so under it they are added at once."""
    if "_ARGCOMPLETE" in os.environ:
        add(parser)
        return
    parse = parser.parse_known_args

    def parse_known_args(args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        del parser.parse_known_args  # (the class's own again)
        add(parser)
        return parse(args, namespace)
    setattr(parser, "parse_known_args", parse_known_args)  # noqa: B010 (an instance's method, assigned)


def add_subcommands(parser: argparse.ArgumentParser, title: str) -> argparse._SubParsersAction:
    """A required choice of subcommands under `parser` (e.g. `fabric topics {create,list,...}`)."""
    return parser.add_subparsers(title=title, metavar="COMMAND", dest="command", required=True)


class Subject(NamedTuple):
    """What a command acts on (a topic, a group), given as a positional or as Kafka's tools name it (`--topic T`);
    `resolve_subjects` merges the two forms into `dest`."""

    dest: str
    option: str
    noun: str  # "topic", "group"
    metavar: str
    command: str  # e.g. "fabric topics create", for the error that asks for the subject
    required: bool
    many: bool


def add_subject(parser: argparse.ArgumentParser, dest: str, option: str, noun: str, metavar: str, help: str, *,
                required: bool = True, many: bool = False) -> None:
    """`parser` takes its subject as a positional METAVAR or as `option` METAVAR (Kafka's form, e.g.
    `kafka-topics --create --topic T`), repeatable where the command takes `many`."""
    parser.add_argument(dest, metavar=metavar, nargs="*" if many else "?", help=f"{help} (or {option} {metavar})")
    parser.add_argument(option, dest=f"{dest}_option", metavar=metavar, action="append" if many else "store",
                        help=f"as Kafka's tools: the same as {metavar}" + (" (repeatable)" if many else ""))
    subject = Subject(dest, option, noun, metavar, parser.prog, required, many)
    parser.set_defaults(subjects=(*(parser.get_default("subjects") or ()), subject))


def resolve_subjects(args: argparse.Namespace) -> None:
    """Each subject of the command (add_subject) into its `dest`, from the positional or the option: a
    CommandError where two different ones are given, or a required one is missing."""
    for s in getattr(args, "subjects", ()):
        named, option = getattr(args, s.dest), getattr(args, f"{s.dest}_option")
        if s.many:
            setattr(args, s.dest, list(dict.fromkeys([*(named or ()), *(option or ())])))
        elif named is not None and option is not None and named != option:
            raise CommandError(f"two {s.noun}s given ({named!r} and {s.option} {option!r}); name one")
        else:
            setattr(args, s.dest, named if named is not None else option)
        if s.required and not getattr(args, s.dest):
            raise CommandError(f"name the {s.noun}: {s.command} {s.metavar} (or {s.option} {s.metavar})")


def open_fabric(args: argparse.Namespace) -> Fabric:
    """Connect to the fabric named by --url (else $FABRIC_URL, else ./fabric-data) with --command-config's
    options."""
    return Fabric(open_cluster(client_url(args)))


def parse_config(pairs: Iterable[str] | None, option: str = "--config", example: str = "retention.ms=86400000",
                 strip_values: bool = True) -> dict[str, str]:
    """`["k=v", ...]` → {k: v}; a pair without '=' is an error naming the expected form. `strip_values=False`
    keeps blanks around values (a separator may be a tab)."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"{option} expects key=value (e.g. {example}), got {pair!r}")
        out[key.strip()] = value.strip() if strip_values else value
    return out


def utc_text(micros: int, timespec: str = "microseconds") -> str | None:
    """A time in µs since the epoch as ISO 8601 in UTC (to `timespec`); None outside the years 1970 to 9999 (-1,
    "none", among them)."""
    if not 0 <= micros < 253402300800_000000:
        return None
    return datetime.fromtimestamp(micros / 1e6, timezone.utc).isoformat(timespec=timespec)


def format_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, as Kafka's admin tools print them."""
    cells = [list(header)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)
