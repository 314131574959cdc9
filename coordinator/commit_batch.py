"""Offset commits gathered over one turn of a server's event loop and appended together: group commit for a server
that answers commits on its loop thread, where no two commits are ever in flight at once to be joined.

While a `CommitBatch` is collecting (`collecting()`, around one request's handling), OffsetsTopic.commit queues the
commit's rows in it (`queue`) instead of appending them. `write()`, called once the loop has read every request that
arrived, hands each offsets partition's queued callers, in arrival order, to the partition's writer: a local log
appends them at once as one batch (`append_together`), a replicated one sends them from the loop
(fabric.server.offsets_on_loop). Either way every caller's check (its generation) runs under the partition's write
lock first, and a caller whose check fails is answered alone, its rows left out (the others are appended without
them). Each caller learns its outcome from its `Queued.done` future: None once its rows are written, else the
error. A failed append fails every caller of its batch, and none of them is acknowledged.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator

import pyarrow as pa

from fabric.common.errors import RequestTimedOutError
from fabric.storage.batch_encoding import Encoded
from fabric.storage.lock import REQUEST_WAIT_S, PartitionBusy, waiting_until

log = logging.getLogger(__name__)
# (rows, validate, written) -> None: one offsets partition's append (OffsetsLog.append, its partition bound)
Append = Callable[[Encoded, Callable[[], None], Callable[[int], None]], None]
# (queued callers) -> None: one offsets partition's writer (OffsetsLog.write_queued, its partition bound); it
# settles each caller's `done`, at once or later
Write = Callable[[list["Queued"]], None]
# the batch this thread's commits are queued in now, and the list of those queued within the current block
_COLLECTING: contextvars.ContextVar[tuple[CommitBatch, list[Queued]] | None] = contextvars.ContextVar(
    "fabric_commit_batch", default=None)


class _Rejected(Exception):
    """Some caller's check failed: nothing of the batch was appended; it is tried again without them."""


@dataclass
class Queued:
    """One caller's rows, its check, what to tell once written, and its outcome."""

    rows: Encoded
    validate: Callable[[], None]
    written: Callable[[int], None]
    done: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


def queue(key: Hashable, write: Write, rows: Encoded, validate: Callable[[], None],
          written: Callable[[int], None]) -> bool:
    """Queue a commit's `rows` for offsets partition `key` (written by `write`) in the batch this thread is
    collecting into, if any (True); False: none is collecting, the caller appends them itself."""
    collecting = _COLLECTING.get()
    if collecting is None:
        return False
    batch, added = collecting
    queued = Queued(rows, validate, written)
    batch._partitions.setdefault(key, (write, []))[1].append(queued)
    added.append(queued)
    return True


class CommitBatch:
    """The commits queued in one turn of a loop, per offsets partition (`key`), each with its partition's
    writer."""

    def __init__(self) -> None:
        self._partitions: dict[Hashable, tuple[Write, list[Queued]]] = {}

    @contextlib.contextmanager
    def collecting(self) -> Iterator[list[Queued]]:
        """Within the block, this thread's commits are queued here; the list holds those queued within it."""
        added: list[Queued] = []
        token = _COLLECTING.set((self, added))
        try:
            yield added
        finally:
            _COLLECTING.reset(token)

    def write(self) -> None:
        """Hand every partition's queued callers to its writer (module docstring), which settles each `done`."""
        partitions, self._partitions = self._partitions, {}
        for write, queued in partitions.values():
            write(queued)


def append_together(append: Append, queued: list[Queued]) -> None:
    """Append the rows of the callers `queued` whose checks pass as one batch, in their order, and settle each
    caller's `done`: None once written, else its check's error or the append's (each of the batch hears it).
    Within storage.lock.without_waiting, PartitionBusy if the partition's lock is held: nothing was appended, and
    the callers not answered yet are left to the caller (Deferrals)."""
    try:
        pending = [one for one in queued if not one.done.done()]
        while pending:
            failed = _append_checked(append, pending)
            if not failed:
                settle(pending, None)
                return
            pending = without_failed(pending, failed)  # nothing was written: again, without those
    except PartitionBusy:
        raise
    except BaseException as exc:  # noqa: BLE001 (every caller not yet answered hears it)
        settle(queued, exc)
        if not isinstance(exc, Exception):
            raise


class Deferrals:
    """Commit batches that an event loop could not append at once because another thread or process held their
    offsets partition's lock (PartitionBusy, within storage.lock.without_waiting: a loop waits for no lock), per
    partition: a thread of the partition's own appends them as one batch, waiting for the lock at most
    REQUEST_WAIT_S from the oldest one's deferral (then their callers hear who holds it). While a partition has
    batches deferred, later ones join them, so its batches keep their order, and a paused lock holder takes one
    thread per partition at most."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._deferred: dict[Hashable, list[tuple[float, list[Queued]]]] = {}  # partition -> (when, callers)
        self._guard = threading.Lock()

    def write(self, key: Hashable, append: Append, queued: list[Queued]) -> None:
        """append_together(append, queued) for partition `key` now, or deferred: behind its deferred batches, or
        if its lock is held."""
        with self._guard:
            behind = self._deferred.get(key)
            if behind is not None:
                behind.append((time.monotonic(), queued))
                return
        try:
            append_together(append, queued)
        except PartitionBusy:
            self._defer(key, append, queued)

    def _defer(self, key: Hashable, append: Append, queued: list[Queued]) -> None:
        with self._guard:
            behind = self._deferred.setdefault(key, [])
            behind.append((time.monotonic(), queued))
            if len(behind) > 1:  # (another thread deferred one first: its writer takes this one too)
                return
        threading.Thread(target=self._drain, args=(key, append), name=f"{self._name}-{key}", daemon=True).start()

    def _drain(self, key: Hashable, append: Append) -> None:
        """Append the partition's deferred batches, those deferred meanwhile next, until none is left."""
        try:
            while (batches := self._take(key)) is not None:
                try:
                    with waiting_until(batches[0][0] + REQUEST_WAIT_S):
                        append_together(append, [one for _, queued in batches for one in queued])
                except Exception as exc:  # noqa: BLE001 (settled already; the next batches still get their turn)
                    log.error("deferred commits to %s %s failed: %s", self._name, key, exc)
        except BaseException:  # (an unexpected end: what was deferred since must not wait for good)
            with self._guard:
                left = self._deferred.pop(key, [])
            settle([one for _, queued in left for one in queued], RequestTimedOutError(
                f"the thread appending deferred commits to {self._name} {key} ended; nothing of these was "
                "written, retry"))
            raise

    def _take(self, key: Hashable) -> list[tuple[float, list[Queued]]] | None:
        """The partition's deferred batches, taken; None, and the partition no longer deferred, if there are none."""
        with self._guard:
            batches = self._deferred[key]
            if not batches:
                del self._deferred[key]
                return None
            self._deferred[key] = []
            return batches


def failed_checks(callers: list[Queued]) -> list[tuple[Queued, Exception]]:
    """Run every caller's check (the partition's write lock held): those that failed, with why."""
    failed: list[tuple[Queued, Exception]] = []
    for one in callers:
        try:
            one.validate()
        except Exception as exc:  # noqa: BLE001 (this caller's answer)
            failed.append((one, exc))
    return failed


def without_failed(callers: list[Queued], failed: list[tuple[Queued, Exception]]) -> list[Queued]:
    """Answer each caller whose check `failed` with why; the others, in their order."""
    for one, exc in failed:
        one.done.set_exception(exc)
    return [one for one in callers if not one.done.done()]


def rows_of(callers: list[Queued]) -> Encoded:
    """The callers' rows as one batch, in their order (one caller's as it made them)."""
    return callers[0].rows if len(callers) == 1 else Encoded.of(pa.concat_batches([one.rows.batch for one in callers]))


def told(callers: list[Queued]) -> Callable[[int], None]:
    """What to tell the callers once their rows, appended together (rows_of), are written at an offset."""
    def written(offset: int) -> None:
        for one in callers:
            one.written(offset)
            offset += one.rows.num_rows
    return written


def settle(callers: list[Queued], exc: BaseException | None) -> None:
    """Answer each caller not answered yet: its rows written (`exc` None), else `exc`."""
    for one in callers:
        if not one.done.done():
            if exc is None:
                one.done.set_result(None)
            else:
                one.done.set_exception(exc)


def _append_checked(append: Append, callers: list[Queued]) -> list[tuple[Queued, Exception]]:
    """Append the rows of `callers` as one batch if every caller's check passes (under the append's lock), each
    told where its rows landed; else append nothing and return the callers whose checks failed, with why."""
    failed: list[tuple[Queued, Exception]] = []

    def validate() -> None:
        failed.extend(failed_checks(callers))
        if failed:
            raise _Rejected()
    rows = rows_of(callers)
    try:
        append(rows, validate, told(callers))
    except _Rejected:
        return failed
    if len(callers) > 1:
        log.debug("group commit: %d commits (%d rows) in one append", len(callers), rows.num_rows)
    return []
