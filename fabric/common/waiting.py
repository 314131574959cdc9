"""Waiting on a condition (never on a fixed sleep): used by tests, benchmarks and notebooks. `wait_for` gives it a
deadline; `wait_progressing` waits as long as the work it waits on moves, and fails only once that work has shown
no progress for a while: a loaded machine slows work down without stopping it, so a stall, unlike a total budget,
says something is stuck."""
from __future__ import annotations

import os
import time
from typing import Callable, Hashable, Iterator, TypeVar

from fabric.common.redaction import clip

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 30.0, what: str = "condition",
             interval: float = 0.05) -> T:
    """Call `condition` until it returns something truthy and return that; raise TimeoutError naming
    `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def wait_progressing(condition: Callable[[], T], progress: Callable[[], Hashable], stall_timeout: float,
                     what: str = "condition", interval: float = 0.2) -> T:
    """Call `condition` until it returns something truthy and return that, however long it takes while
    `progress()` (a snapshot of what shows the work advancing: a job's log, its checkpoint, its output) keeps
    changing; raise TimeoutError naming `what` once it has not changed for `stall_timeout` seconds."""
    last, since = progress(), time.monotonic()
    while True:
        value = condition()
        if value:
            return value
        now = progress()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > stall_timeout:
            raise TimeoutError(f"no progress for {stall_timeout} s waiting for {what} (last seen: {clip(last, 300)})")
        time.sleep(interval)


def files_progress(*paths: str | os.PathLike[str]) -> tuple[tuple[str, int, int], ...]:
    """(path, size, modification time) of every file under `paths` (files or directories; missing ones skipped):
    changes whenever a process writes its log, a checkpoint or an output there, for `wait_progressing`."""
    found = []
    for path in (f for top in paths for f in _files(os.fspath(top))):
        try:
            stat = os.stat(path)
        except OSError:  # removed meanwhile, or not there yet
            continue
        found.append((path, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


def _files(top: str) -> Iterator[str]:
    """`top` itself, or every file under it if it is a directory."""
    if not os.path.isdir(top):
        yield top
        return
    for directory, _, names in os.walk(top):
        yield from (os.path.join(directory, name) for name in names)
