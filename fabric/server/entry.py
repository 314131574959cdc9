"""The `python -m` entry point every server process shares (a coordinator instance, a data node): its options,
its log level, and a FabricError as one `error:` line and exit code 1, never a traceback. A fatal signal (SIGSEGV,
SIGBUS, SIGFPE, SIGABRT, SIGILL) prints every thread's Python stack on stderr before the process dies
(faulthandler), so the log of a crashed server says where it was."""
from __future__ import annotations

import argparse
import faulthandler
import sys
from typing import Any, Callable, Sequence

from fabric.common import logs
from fabric.common.errors import FabricError
from fabric.server.instance import SERVER_LOG_LEVEL


def server_main(prog: str, description: str | None, add_arguments: Callable[[argparse.ArgumentParser], None],
                settings_from: Callable[[argparse.Namespace], Any], serve: Callable[[Any], None],
                argv: Sequence[str] | None) -> int:
    """Parse `argv` with `add_arguments`, then serve(settings_from(args)) until stopped; the exit code."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure(logs.level_of(args, SERVER_LOG_LEVEL))
    faulthandler.enable(all_threads=True)
    try:
        serve(settings_from(args))
    except FabricError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
