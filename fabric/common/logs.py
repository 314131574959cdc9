"""Where the fabric's logs go when it runs as a program (the CLI, the servers): stderr, at a chosen level.
Library use configures nothing; every module logs to `logging.getLogger(__name__)`."""
from __future__ import annotations

import argparse
import logging
import sys

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_log_level_option(parser: argparse.ArgumentParser, default: str) -> None:
    """The --log-level option; it is left out of the namespace unless given, so a command's own default
    (servers log INFO, commands WARNING) applies: see level_of."""
    parser.add_argument("--log-level", choices=LEVELS, type=str.upper, default=argparse.SUPPRESS,
                        help=f"what to log on stderr: {', '.join(LEVELS)} (default {default})")


def level_of(args: argparse.Namespace, default: str) -> str:
    """The --log-level given, else `default`."""
    return getattr(args, "log_level", None) or default


def configure(level: str) -> None:
    """Log records of `level` and above to stderr, with time, level and the module that decided."""
    logging.basicConfig(level=getattr(logging, level), format=FORMAT, stream=sys.stderr, force=True)
