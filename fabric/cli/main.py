# PYTHON_ARGCOMPLETE_OK (argcomplete: this console entry completes itself; see README, Shell completion)
"""`fabric`: Kafka's command-line tools as one command (topics, produce, consume, groups, transactions,
coordinator).

Each command group lives in a module of fabric.cli exposing `register(subparsers)`; add a group by adding its
module name to COMMAND_MODULES. Errors print `error: <message>` on stderr and exit 1.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn, Sequence

import argcomplete

import fabric
from fabric.cli.action_flags import as_verbs, kafka_tool_hint, unknown_flags_hint
from fabric.cli.common import CommandError, add_url_option, resolve_subjects
from fabric.common import pandas_probe
from fabric.common.errors import FabricError
from fabric.common.logs import add_log_level_option, configure, level_of

COMMAND_MODULES = ("topics", "clients", "offsets", "groups", "transactions", "coordinator", "nodes", "partitions",
                   "cluster", "configs", "dump_log", "perf_test")
CLI_LOG_LEVEL = "WARNING"

EPILOG = """examples:
  fabric topics create orders --partitions 3 --config retention.ms=86400000
  fabric topics create payments --schema 'user:string,amount:int64'
  fabric topics create clicks --partitions 6 --replication-factor 3   (a cluster with data nodes)
  fabric partitions elect-leaders --preferred                         (leaders back on their first replica)
  seq 10 | fabric produce orders
  fabric consume orders --from-beginning --max-messages 10
  fabric consume orders --group billing --format json --timeout-ms 5000
  fabric consume orders --partition 0 --offset 42 --exit-at-end --property print.offset=true
  fabric groups describe billing
  fabric groups reset-offsets billing --topic orders --to-earliest --execute
  fabric groups reset-offsets billing --all-topics --shift-by -10 --export
  fabric transactions abort --transactional-id my-sink               (readers held back by a dead writer)
  fabric producer-perf-test --topic perf --num-records 100000 --record-size 100 --throughput -1

Shell completion: eval "$(register-python-argcomplete fabric)"

Every command takes --url (before or after the command); without it $FABRIC_URL, else ./fabric-data."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but bad arguments exit 1 with `error: ...` like every other fabric error."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full parser: global options, then one subcommand tree per module in COMMAND_MODULES."""
    parser = ArgumentParser(prog="fabric", description="Spark Fabric's command-line tool: manage topics and "
                            "consumer groups, produce and consume records.", epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fabric (spark-fabric) {fabric.__version__}")
    add_url_option(parser, None)
    add_log_level_option(parser, CLI_LOG_LEVEL)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"fabric.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit code. Under argcomplete's shell hook (_ARGCOMPLETE set) it
    prints the completions of the command line instead and exits."""
    parser = build_parser()
    argcomplete.autocomplete(parser)
    argv = sys.argv[1:] if argv is None else argv
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    hint = kafka_tool_hint(argv, commands)
    if hint:
        parser.error(hint)
    try:
        argv = as_verbs(argv)
    except CommandError as exc:
        parser.error(str(exc))
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.error(unknown_flags_hint(extra, getattr(args, "prog", "fabric")))
    configure(level_of(args, getattr(args, "log_level_default", CLI_LOG_LEVEL)))
    pandas_probe.settle_without_pandas()
    try:
        resolve_subjects(args)
        return args.func(args) or 0
    except FabricError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `fabric consume t | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # a file the command opens itself (dump-log's): named, not a traceback
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}; check the path, and that this user may read it", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
