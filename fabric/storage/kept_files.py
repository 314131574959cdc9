"""The bound on files a process keeps open between writes: a least-recently-used set of their holders (partition
locks, open_files), each closing its own files when pushed out, unless it is using them at that moment."""
from __future__ import annotations

import collections
import os
import threading
from typing import Callable, Generic, Protocol, TypeVar


class Holder(Protocol):
    def close_unless_busy(self) -> bool:
        """Close the files kept, unless they are in use now; whether they were closed."""

    def forget_after_fork(self) -> None:
        """In a forked child: close the files kept (the parent's, shared with it) without changing them."""


H = TypeVar("H", bound=Holder)


class KeptFiles(Generic[H]):
    """Holders of open files, most recently used last; beyond `capacity()` of them the oldest not busy close
    theirs (one busy stays, and is closed at a later turn). A forked child starts with none open."""

    def __init__(self, capacity: Callable[[], int]) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._holders: collections.OrderedDict[H, None] = collections.OrderedDict()
        self._newest: H | None = None
        os.register_at_fork(after_in_child=self._after_fork)

    def used(self, holder: H) -> None:
        """`holder` keeps files open now (it holds its own lock, so it is busy itself and never closed here)."""
        if self._newest is holder:  # (the common case: one partition written again and again)
            return
        with self._lock:
            self._newest = holder
            self._holders[holder] = None
            self._holders.move_to_end(holder)
            over = len(self._holders) - self.capacity()
            for victim in [h for h in self._holders if h is not holder][:max(over, 0)]:
                if victim.close_unless_busy():
                    del self._holders[victim]

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        for holder in self._holders:
            holder.forget_after_fork()
        self._holders.clear()
        self._newest = None
