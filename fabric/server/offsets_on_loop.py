"""The replicated offsets topic's appends sent from the coordinator's event loop: the commits its protocol server
answers on the loop (fabric.server.protocol_routes.LoopCommits) are queued per offsets partition
(coordinator.commit_batch), and the loop sends each partition's queued rows to its leader, as the next sequence of
the offsets producer, over the leader's connection read by the loop (fabric.common.protocol.loop_connection): no
worker thread serves the commit and no thread is handed its answer. One append per partition is in flight; the
commits queued meanwhile go together in the next (group commit, as fabric.server.group_commit does for blocking
callers).

States of a partition: idle; sending (the loop holds the partition's write lock, taken without waiting, until the
leader's answer is read); on a worker (the blocking path, ReplicatedOffsetsLog.write with LeaderCalls' retries and
metadata refreshes). The loop hands an append to a worker, never waiting itself, when the lock is held by another
writer (the leadership record, a migration, a commit over Flight), when an earlier append's outcome is unknown,
when the leader or the loop's connection to it is not known yet (opened meanwhile), and when an answer failed
retriably or did not come in time: the worker sends the same rows again with the same sequence, so the leader
writes them once. A fenced producer epoch or a partition not placed is answered at once, as the blocking path
answers it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import TYPE_CHECKING, Callable

from fabric.common.errors import FabricError
from fabric.common.protocol import messages, payloads
from fabric.common.protocol.loop_connection import Result
from fabric.coordinator.commit_batch import (
    Queued,
    append_together,
    failed_checks,
    rows_of,
    settle,
    told,
    without_failed,
)
from fabric.storage.batch_encoding import Encoded

if TYPE_CHECKING:
    from fabric.server.replicated_offsets import ReplicatedOffsetsLog

log = logging.getLogger(__name__)
ANSWER_GRACE_S = 5.0  # past the produce's own timeout (the leader's wait for its in-sync replicas)


class LoopAppends:
    """The appends the loop sends for `log`'s partitions (the module says how); touched on the loop's thread
    only."""

    def __init__(self, log: ReplicatedOffsetsLog) -> None:
        self.log = log
        self._waiting: dict[int, list[Queued]] = {}
        self._busy: set[int] = set()  # partitions sending, or on a worker, for the loop
        self.counts = {"loop": 0, "worker": 0}  # appends sent from the loop, and handed to a worker (metrics)
        # a thread per partition at most (one append of each at a time): none waits behind another's stall
        self._workers = concurrent.futures.ThreadPoolExecutor(log.partitions, thread_name_prefix="offsets-append")

    def write(self, partition: int, queued: list[Queued]) -> None:
        """Append the rows of `queued` to `partition` in order, after those queued before; each caller's `done`
        is settled once its rows are acknowledged, or with why not."""
        self._waiting.setdefault(partition, []).extend(queued)
        if partition not in self._busy:
            self._next(partition)

    def _next(self, partition: int) -> None:
        callers = self._waiting.pop(partition, [])
        if not callers:
            return
        self._busy.add(partition)
        lock = self.log.lock(partition)
        if not lock.acquire(blocking=False):
            self._on_worker(partition, lambda: self._write_blocking(partition, callers, held=False))
            return
        try:
            route = self.log.route_on_loop(partition)
            if route is None:
                self._on_worker(partition, lambda: self._write_blocking(partition, callers, held=True))
                return
            callers = without_failed(callers, failed_checks(callers))  # answered alone; the others go on
            if not callers:
                self._finished(partition)
                return
            connection, args, sequence = route
            rows = rows_of(callers)
            sent = connection.request("produce", args, payloads.message_stream(rows.schema, [rows.payload]),
                                      self.log.timeout_s + ANSWER_GRACE_S)
            self.counts["loop"] += 1
        except Exception as exc:  # noqa: BLE001 (every caller hears it; nothing was sent)
            settle(callers, exc)
            self._finished(partition)
            return
        sent.add_done_callback(lambda answer: self._answered(partition, sequence, rows, callers, answer))

    def _answered(self, partition: int, sequence: int, rows: Encoded, callers: list[Queued],
                  answer: asyncio.Future[Result]) -> None:
        exc = answer.exception()
        if exc is None:
            try:
                offset: int = messages.decode_result(answer.result()[0], int)
            except Exception as bad:  # noqa: BLE001 (the leader answered something else: outcome unknown)
                exc = bad
            else:
                self.log.sent(partition, sequence, rows.num_rows)
                try:
                    told(callers)(offset)
                except Exception as failed:  # noqa: BLE001 (as the blocking path: each caller hears it)
                    settle(callers, failed)
                else:
                    settle(callers, None)
                self._finished(partition)
                return
        fenced = self.log.fenced(exc, partition)
        if fenced is not None:
            settle(callers, fenced)
            self._finished(partition)
            return
        self.log.unresolved(partition, sequence, rows, told(callers))
        if isinstance(exc, FabricError) and not exc.retriable:
            settle(callers, exc)  # as the blocking path: refused, kept as unknown, sent again before the next
            self._finished(partition)
            return
        log.info("%s: the append of sequence %d sent from the loop failed (%s); sent again from a worker",
                 self.log.name(partition), sequence, exc)
        self.log.leaders.forget()
        self._on_worker(partition, lambda: self._resolve_blocking(partition, callers))

    def _finished(self, partition: int) -> None:
        """The loop's append of `partition` is answered (lock held): release it and send what waits."""
        self.log.lock(partition).release()
        self._busy.discard(partition)
        self._next(partition)

    def _on_worker(self, partition: int, work: Callable[[], None]) -> None:
        """Run `work` on a worker thread; once it returns, the loop sends what waits for `partition`."""
        loop = asyncio.get_running_loop()
        self.counts["worker"] += 1

        def run() -> None:
            try:
                work()
            finally:
                try:
                    loop.call_soon_threadsafe(self._back, partition)
                except RuntimeError:  # the loop is closed: the server shut down
                    log.debug("an offsets append finished after the loop closed")
        self._workers.submit(run)

    def _back(self, partition: int) -> None:
        self._busy.discard(partition)
        self._next(partition)

    def _write_blocking(self, partition: int, callers: list[Queued], held: bool) -> None:
        """On a worker: append the callers' rows through the blocking path, under the partition's lock (taken
        here unless `held`)."""
        lock = self.log.lock(partition)
        if not held:
            lock.acquire()
        try:
            def append(rows: Encoded, validate: Callable[[], None], written: Callable[[int], None]) -> None:
                validate()
                self.log.write(partition, rows, written)
            append_together(append, callers)
        finally:
            lock.release()

    def _resolve_blocking(self, partition: int, callers: list[Queued]) -> None:
        """On a worker, lock held: send the append whose answer failed again, with its sequence."""
        try:
            self.log.resolve(partition)
        except Exception as exc:  # noqa: BLE001 (every caller hears it; it stays unresolved)
            settle(callers, exc)
        else:
            settle(callers, None)
        finally:
            self.log.lock(partition).release()
