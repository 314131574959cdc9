"""Group commit for one partition's appends (Kafka's request pipelining on the offsets topic): appends that arrive
while another is in flight are not sent one by one behind it, each paying its own acks=all round trip, but go
together as the partition's next append, one batch of every waiting caller's rows, in arrival order.

Each caller's `validate()` (a commit's generation check) runs under the partition's write lock just before the
append that carries its rows, so a caller whose check fails is answered alone and its rows are left out. Once the
append is acknowledged, every caller's `written(offset)` is called with the offset of its own rows, in order; if it
fails, every caller of that batch hears the same error (nothing of theirs is acknowledged). The batch itself is
coordinator.commit_batch's, which a server answering commits on its event loop uses per turn of the loop.
"""
from __future__ import annotations

import threading
from typing import Callable

from fabric.coordinator.commit_batch import Queued, append_together
from fabric.storage.batch_encoding import Encoded

Append = Callable[[Encoded, Callable[[int], None]], None]  # (rows, written) -> None, write lock held


class GroupCommit:
    """The appends of one partition, each run by `append` under `lock` (the partition's write lock, which other
    writers of the partition take too); concurrent submissions share an append."""

    def __init__(self, lock: threading.Lock, append: Append) -> None:
        self.lock, self._append = lock, append
        self._queue: list[Queued] = []
        self._guard = threading.Lock()  # the queue's own: taken briefly, never across an append

    @property
    def queued(self) -> int:
        """How many callers wait for the next append."""
        with self._guard:
            return len(self._queue)

    def submit(self, rows: Encoded, validate: Callable[[], None], written: Callable[[int], None]) -> None:
        """validate(), append `rows` (with the rows of whoever else is waiting) and written(their offset), as the
        module says; returns once acknowledged, else raises validate's or the append's error."""
        waiter = Queued(rows, validate, written)
        with self._guard:
            self._queue.append(waiter)
        with self.lock:  # whoever holds the lock appends everything queued, this waiter's rows among them
            if not waiter.done.done():
                self._flush()
        waiter.done.result()

    def _flush(self) -> None:
        """Append every queued caller's rows that pass their check as one batch (lock held); answer each."""
        with self._guard:
            queued, self._queue = self._queue, []

        def append(rows: Encoded, validate: Callable[[], None], written: Callable[[int], None]) -> None:
            validate()
            self._append(rows, written)
        append_together(append, queued)
