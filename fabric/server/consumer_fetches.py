"""A consumer's long poll (Kafka's delayed fetch, for consumers): a fetch with max_wait_ms that finds nothing to read
is held on the fabric protocol's event loop, not on a worker thread, and read again there when what it waits on
may have moved (a data node's partition replica: PartitionReplica.watch_readable; a coordinator service's log:
Log.watch_appends), or answered with what there is once max_wait_ms is over.

Holding no thread, a server serves any number of waiting consumers (its worker threads would otherwise cap them,
and queue a consumer whose records are there behind idle ones), and a record reaches a waiting consumer without
two handoffs between threads.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any, Callable, NamedTuple

from fabric.common.types import Fetched
from fabric.server import loop_handoff, partition_ops
from fabric.server.flight_server import FabricFlightServer, fetched_bytes
from fabric.server.protocol_server import Payload
from fabric.server.request_metrics import RequestMetrics
from fabric.storage.log import Log

log = logging.getLogger(__name__)
Answer = tuple[Any, Payload]
Waiter = Callable[[], None]


class Watched(NamedTuple):
    """What a held fetch waits on: partition `name`'s waiters (watch returns False, registering nothing, when
    there may be something already)."""

    name: str
    watch: Callable[[Waiter], bool]
    unwatch: Callable[[Waiter], None]


class AppendPoller:
    """The logs held fetches wait on, looked at together every `every_s` on the event loop for other processes'
    appends, which call no waiter (Log.look_for_appends: one watermark read a log, however many fetches it holds,
    instead of every held fetch reading again on a timer of its own). Used on the loop's thread only."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._logs: set[Log] = set()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, plog: Log) -> None:
        """Look at `plog` every `every_s` while it has waiters."""
        self._logs.add(plog)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.every_s, self._look)

    def _look(self) -> None:
        try:  # (a look that fails leaves every log to the next, and the loop's handler logs why)
            self._logs = {plog for plog in self._logs if plog.look_for_appends()}
        finally:
            self._timer = asyncio.get_running_loop().call_later(self.every_s, self._look) if self._logs else None


def serve(server: FabricFlightServer, principal: str, args: dict[str, Any], method: Callable,
          read: Callable[..., list[Fetched]], answer_of: Callable[[list[Fetched]], Answer],
          watched: Callable[[], Watched]) -> Answer | concurrent.futures.Future[Answer]:
    """A consumer's `fetch` over the fabric protocol, checked against `method` and read with `read`: on a worker
    thread, waiting there as a Flight DoGet does; on the event loop, read without waiting and, if it found nothing
    and may wait (max_wait_ms, no end_offset), held (`hold`) on what `watched()` names."""
    try:
        on_loop = asyncio.get_running_loop() is not None
    except RuntimeError:
        on_loop = False
    at_hand = partition_ops.at_once(read) if on_loop else read
    with server.metrics.requests.measure("fetch"):
        fetched = server.fetch_checked(principal, args, method, at_hand)
    wait_s = partition_ops.wait_seconds("max_wait_ms", args.get("max_wait_ms", 0))
    if not on_loop or fetched or not wait_s or args.get("end_offset") is not None:
        return answer_of(fetched)
    return hold(watched(), wait_s, counted(at_hand, args, server.metrics.requests), answer_of)


def hold(watched: Watched, wait_s: float, read: Callable[[], list[Fetched]],
         answer_of: Callable[[list[Fetched]], Answer]) -> Answer | concurrent.futures.Future[Answer]:
    """The answer of a consumer's fetch that found nothing: read() again (without waiting) each time the waiter it
    gives watched.watch() is called, answered (answer_of) as soon as read() finds something, or with what there is
    after `wait_s`. Call on the loop's thread."""
    name, watch, unwatch = watched
    loop = asyncio.get_running_loop()
    answer: concurrent.futures.Future[Answer] = concurrent.futures.Future()

    def woken() -> None:  # on the changing thread, maybe under a lock: only schedules
        try:
            loop_handoff.call_soon(loop, settle, False)
        except RuntimeError:  # the loop is closed: the server shut down, the fetch with it
            log.debug("a held fetch of %s was woken after the server shut down", name)

    def settle(over: bool) -> None:
        if answer.done():
            return
        try:
            fetched = read()
            if not fetched and not over and watch(woken):
                return  # nothing for it yet: wait on
        except Exception as exc:  # noqa: BLE001 (answered as the error it is)
            answer.set_exception(exc)
        else:
            answer.set_result(answer_of(fetched))
        timer.cancel()
        unwatch(woken)

    if not watch(woken):
        return answer_of(read())
    timer = loop.call_later(wait_s, settle, True)
    return answer


def counted(read: Callable[..., list[Fetched]], args: dict[str, Any], requests: RequestMetrics
            ) -> Callable[[], list[Fetched]]:
    """A held fetch's read again (`read`, which does not wait, called with the fetch's checked `args`), its
    records' bytes counted in `requests` as the first read's were."""
    def again() -> list[Fetched]:
        fetched = read(**args)
        requests.add_bytes("fetch", fetched_bytes(fetched))
        return fetched
    return again
