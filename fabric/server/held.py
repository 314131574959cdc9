"""An answer that comes later (an acks=all write waiting for its replicas): what a server hands its transport
instead of blocking a thread on it."""
from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Held:
    """`future` gets the answer (or its error); whoever waits calls `expire()` if it has not come after
    `timeout_s`, which settles the future with the timeout's error unless the answer came meanwhile."""

    future: concurrent.futures.Future
    timeout_s: float
    expire: Callable[[], None]

    def wait(self) -> Any:
        """The answer, waited for on this thread."""
        try:
            return self.future.result(self.timeout_s)
        except concurrent.futures.TimeoutError:
            self.expire()
            return self.future.result()
