"""A consumer's long poll at a data node (Kafka's delayed fetch, for consumers): a fetch with max_wait_ms that finds
nothing to read is held on the fabric protocol's event loop, not on a worker thread, and read again there when its
partition's readable end may have moved on or its role or leader epoch changed (PartitionReplica.watch_readable), or
answered with what there is once max_wait_ms is over.

Holding no thread, a node serves any number of waiting consumers (its worker threads would otherwise cap them, and
queue a consumer whose records are there behind idle ones), and a record reaches a waiting consumer without two
handoffs between threads.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Any, Callable

from fabric.common.types import Fetched
from fabric.server import partition_ops
from fabric.server.node.partition import PartitionReplica
from fabric.server.protocol_server import Payload

log = logging.getLogger(__name__)
Answer = tuple[Any, Payload]


def hold(replica: PartitionReplica, args: dict[str, Any], wait_s: float, read: Callable[[], list[Fetched]],
         answer_of: Callable[[list[Fetched]], Answer]) -> Answer | concurrent.futures.Future[Answer]:
    """The answer of a consumer's fetch `args` of `replica` that found nothing: read() again (without waiting)
    each time the replica may have something for it, answered (answer_of) as soon as it does, or with what there is
    after `wait_s`; at once if the replica already has something, or has changed role. Call on the loop's thread."""
    offset, isolation = args["offset"], partition_ops.isolation_level(args.get("isolation_level", "read_committed"))
    leader_epoch, from_follower = args.get("leader_epoch"), bool(args.get("from_follower", False))
    loop = asyncio.get_running_loop()
    answer: concurrent.futures.Future[Answer] = concurrent.futures.Future()

    def woken() -> None:  # on the changing thread, under the replica's lock: only schedules
        try:
            loop.call_soon_threadsafe(settle, False)
        except RuntimeError:  # the loop is closed: the server shut down, the fetch with it
            log.debug("a held fetch of %s was woken after the server shut down", replica.name)

    def watch() -> bool:
        return replica.watch_readable(woken, offset, leader_epoch, from_follower, isolation)

    def settle(over: bool) -> None:
        if answer.done():
            return
        try:
            fetched = read()
            if not fetched and not over and watch():
                return  # nothing for it yet: wait on
        except Exception as exc:  # noqa: BLE001 (answered as the error it is)
            answer.set_exception(exc)
        else:
            answer.set_result(answer_of(fetched))
        timer.cancel()
        replica.unwatch_readable(woken)

    if not watch():
        return answer_of(read())
    timer = loop.call_later(wait_s, settle, True)
    return answer
