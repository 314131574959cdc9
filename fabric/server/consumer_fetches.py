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
from typing import Any, Callable

from fabric.common.types import Fetched
from fabric.server.flight_server import fetched_bytes
from fabric.server.protocol_server import Payload
from fabric.server.request_metrics import RequestMetrics

log = logging.getLogger(__name__)
Answer = tuple[Any, Payload]
Waiter = Callable[[], None]


def hold(name: str, watch: Callable[[Waiter], bool], unwatch: Callable[[Waiter], None], wait_s: float,
         read: Callable[[], list[Fetched]], answer_of: Callable[[list[Fetched]], Answer],
         poll_s: float | None = None) -> Answer | concurrent.futures.Future[Answer]:
    """The answer of a consumer's fetch of partition `name` that found nothing: read() again (without waiting)
    each time the waiter it gives watch() is called (watch returns False, registering nothing, when there may be
    something already), and every `poll_s` if given (for changes nothing calls it for), answered (answer_of) as
    soon as read() finds something, or with what there is after `wait_s`. Call on the loop's thread."""
    loop = asyncio.get_running_loop()
    answer: concurrent.futures.Future[Answer] = concurrent.futures.Future()

    def woken() -> None:  # on the changing thread, maybe under a lock: only schedules
        try:
            loop.call_soon_threadsafe(settle, False)
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
        for timer in timers:
            timer.cancel()
        unwatch(woken)

    def polled() -> None:
        settle(False)
        if not answer.done() and poll_s is not None:
            timers[1] = loop.call_later(poll_s, polled)

    if not watch(woken):
        return answer_of(read())
    timers = [loop.call_later(wait_s, settle, True)]
    if poll_s is not None:
        timers.append(loop.call_later(poll_s, polled))
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
