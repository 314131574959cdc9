"""Handing work to an event loop from whichever thread has it: the loop's own thread queues it with `call_soon`,
any other with `call_soon_threadsafe`, which also writes to the loop's wake-up descriptor. Most of a node's
wake-ups (an append waking held fetches, a follower's fetch moving the high watermark) happen on its protocol loop
itself, where that write and the loop's read of it are two system calls for nothing."""
from __future__ import annotations

import asyncio
from typing import Any, Callable


def on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the caller runs on `loop`'s thread, inside the loop."""
    return asyncio._get_running_loop() is loop


def call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """Run callback(*args) on `loop` after what it is running now; RuntimeError if the loop is closed."""
    if on_loop(loop):
        loop.call_soon(callback, *args)
    else:
        loop.call_soon_threadsafe(callback, *args)


def run_on(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """Run callback(*args) now if the caller is on `loop`'s thread (an answer settled there goes out before the
    loop's other ready work), else hand it to the loop; RuntimeError if the loop is closed."""
    if on_loop(loop):
        callback(*args)
    else:
        loop.call_soon_threadsafe(callback, *args)
