"""A background pass, run every so often while its process should run it: a coordinator instance's abort of
timed-out transactions (fabric.server.transaction_reaper), and the expiry of abandoned groups' offsets
(fabric.server.offsets_retention), a coordinator instance's or a writing embedded fabric's. A pass that fails is
logged and tried again at the next one.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Runs `work()` every `interval_s` while `active()`, in a daemon thread named `name`; `what` names the work
    in the warning a failed pass logs. wake() runs a pass now; stop() ends the thread."""

    def __init__(self, name: str, interval_s: float, active: Callable[[], bool], work: Callable[[], object],
                 what: str) -> None:
        self.interval_s, self.active, self.work, self.what = interval_s, active, work, what
        self._stopped = False
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout_s: float) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stopped:
                return
            if not self.active():
                continue
            try:
                self.work()
            except Exception as exc:  # noqa: BLE001 (the pass must survive: the next one retries)
                log.warning("%s failed: %s; retrying in %.1f s", self.what, exc, self.interval_s)
