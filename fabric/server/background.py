"""A server's background worker: a loop on a daemon thread of its own, ended by stop() (the heap's quiet collector,
a data node's scrubber).
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import TypeVar

W = TypeVar("W", bound="BackgroundWorker")


class BackgroundWorker(ABC):
    """Runs `_run` on a daemon thread named `name` from start(); `_run` returns once `_stopped` is set."""

    def __init__(self, name: str) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self: W) -> W:
        """Start the thread."""
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the loop to stop; return once the thread has (or after `timeout_s`)."""
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)

    @abstractmethod
    def _run(self) -> None:
        """The loop, until `_stopped` is set."""
