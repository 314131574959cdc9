"""Stopping a server process within a bounded time, whatever ZooKeeper or the peers do.

SIGTERM or Ctrl-C (SIGINT) asks for an orderly stop: stop serving (calls in flight finish), leave the
election, close the stores, each step waited for at most what is left of the shutdown timeout. Past the
timeout the process exits at once, saying so: the OS then releases its port, files and partition locks, and
ZooKeeper drops its session (and ephemeral znodes) by itself. A second signal also exits at once. A signal
that arrives while the server is still starting (e.g. connecting to an unreachable ZooKeeper) unwinds the
start with `Interrupted`.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)


class Interrupted(BaseException):
    """A stop was asked for before the server was serving: unwinds its start (a BaseException, so no handler of
    ordinary errors on the way swallows it)."""


class Shutdown:
    """Turns SIGTERM and SIGINT into a stop of at most `timeout_s` seconds (install() in the main thread)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.requested = threading.Event()
        self.serving = False
        self._deadline: float | None = None
        self._lock = threading.Lock()

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self._deadline is not None:
            exit_now(f"{name} again while stopping: exiting at once", 1)
        log.info("%s received: stopping within %g s", name, self.timeout_s)
        self.begin()
        if not self.serving:
            raise Interrupted(name)

    def serve_until_requested(self, banner: str) -> None:
        """The server is serving (say so with `banner` on stdout): from now on a signal stops it in order; block
        until one asks for the stop."""
        print(banner, flush=True)
        self.serving = True
        while not self.requested.wait(1.0):
            pass

    def begin(self) -> None:
        """Start the shutdown clock (once): past the timeout the process exits, finished or not."""
        with self._lock:
            if self._deadline is not None:
                return
            self._deadline = time.monotonic() + self.timeout_s
        self.requested.set()
        watchdog = threading.Timer(self.timeout_s, exit_now, (
            f"shutdown did not finish within {self.timeout_s:g} s (coordinator.shutdown.timeout.ms): exiting now; "
            "the OS releases the port, files and locks", 1))
        watchdog.daemon = True
        watchdog.start()

    def remaining(self) -> float:
        """Seconds left before the deadline (the whole timeout before begin())."""
        return self.timeout_s if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def start(self, what: str, step: Callable[[], object]) -> threading.Event:
        """Run one step of the stop in a daemon thread; the returned event is set when it ended (even failing)."""
        done = threading.Event()

        def run() -> None:
            try:
                step()
            except Exception:  # noqa: BLE001 (the other steps still run; the failure is logged)
                log.exception("shutdown: %s failed", what)
            finally:
                done.set()
        threading.Thread(target=run, name=f"shutdown: {what}", daemon=True).start()
        return done

    def wait(self, what: str, done: threading.Event, share: float = 1.0) -> bool:
        """Wait for a started step at most `share` of the remaining time; False (logged) if it did not end."""
        if done.wait(self.remaining() * share):
            return True
        log.warning("shutdown: %s did not finish in time; going on", what)
        return False


    def finish(self, finished: bool) -> None:
        """End the stop: exit at once if a step did not finish in time, else log that it stopped."""
        if not finished:
            exit_now("stopped with steps unfinished (see above): exiting now", 1)
        log.info("stopped")


def exit_now(message: str, code: int) -> None:
    """Log `message` and end the process immediately (no cleanup: what is left is stuck)."""
    log.error("%s", message)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
