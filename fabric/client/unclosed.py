"""A producer its program never closed is closed, so flushed, all the same: when it is garbage-collected, or at
the latest when the interpreter exits; its buffered records are sent, not lost, as Kafka's clients flush on close.
"""
from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread  # noqa: F401 (see close_at_exit)
import logging
import weakref
from typing import Protocol

from fabric.common.errors import FabricError

log = logging.getLogger(__name__)


class Closable(Protocol):
    def close(self) -> None: ...


def close_at_exit(ref: weakref.ref[Closable]) -> None:
    """At interpreter exit, close a producer its program never closed. (Building the batch may make pyarrow
    import pandas, which imports concurrent.futures.thread; that import fails once the interpreter is shutting
    down, so this module imports it first.)"""
    producer = ref()
    if producer is not None:
        close_unclosed(producer)


def close_unclosed(producer: Closable) -> None:
    """Close, so flush, a producer nobody closed (at exit, or when collected)."""
    try:
        producer.close()
    except FabricError as exc:
        log.warning("flushing an unclosed producer failed: %s; its buffered records were not sent", exc)
