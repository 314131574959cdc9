"""Groups whose committed offsets are about to change by a producer transaction (Kafka's pending transactional
offsets, KIP-447): from before the transaction's generation check to the append of its offsets, a read of the
group's committed offsets waits, so a member that joined meanwhile does not resume from the offsets the
transaction is replacing (it would read its records twice). Kept in the memory of the instance that owns the
offsets topic: an instance that takes it over applies every pending offset before it serves any
(coordinator.transaction_offsets), so it starts with none unstable.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from fabric.common.errors import UnstableOffsetCommitError

WAIT_S = 5.0  # how long a read waits for a group's offsets to settle before it is told to retry


class UnstableGroups:
    """Groups with a transaction's offsets in flight; `committing` marks one, `wait_stable` waits for it."""

    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._changing: dict[str, int] = {}  # group -> transactions committing its offsets now
        self._settled = threading.Condition()

    @contextlib.contextmanager
    def committing(self, group: str) -> Iterator[None]:
        """The group's offsets are unstable inside the block."""
        with self._settled:
            self._changing[group] = self._changing.get(group, 0) + 1
        try:
            yield
        finally:
            with self._settled:
                left = self._changing.pop(group) - 1
                if left:
                    self._changing[group] = left
                self._settled.notify_all()

    def wait_stable(self, group: str) -> None:
        """Return once no transaction is committing the group's offsets; UnstableOffsetCommitError (retriable)
        if one still is after `wait_s`."""
        with self._settled:
            if not self._settled.wait_for(lambda: group not in self._changing, self.wait_s):
                raise UnstableOffsetCommitError(
                    f"a producer transaction is committing group {group!r}'s offsets (Kafka's UNSTABLE_OFFSET_COMMIT); "
                    "retry once it has")
