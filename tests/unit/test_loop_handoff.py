"""loop_handoff: work handed to an event loop runs there, after what the loop runs now, from its own thread and
from any other (run_on: at once on the loop's own thread); a closed loop refuses it."""
from __future__ import annotations

import asyncio
import threading

import pytest

from fabric.server import loop_handoff


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_on_loop_is_true_only_inside_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    inside = asyncio.run_coroutine_threadsafe(_ask(loop), loop).result(10)
    assert inside is True
    assert loop_handoff.on_loop(loop) is False


async def _ask(loop: asyncio.AbstractEventLoop) -> bool:
    return loop_handoff.on_loop(loop)


def test_work_handed_on_the_loop_runs_after_the_current_callback(loop: asyncio.AbstractEventLoop) -> None:
    order: list[str] = []
    done = threading.Event()

    def handed() -> None:
        order.append("handed")
        done.set()

    def current() -> None:
        loop_handoff.call_soon(loop, handed)
        order.append("current ends")
    loop.call_soon_threadsafe(current)
    assert done.wait(10)
    assert order == ["current ends", "handed"]


@pytest.mark.parametrize("hand", [loop_handoff.call_soon, loop_handoff.run_on])
def test_work_handed_from_another_thread_wakes_the_loop(loop: asyncio.AbstractEventLoop, hand) -> None:
    ran_on: list[int] = []
    done = threading.Event()

    def handed() -> None:
        ran_on.append(threading.get_ident())
        done.set()
    hand(loop, handed)
    assert done.wait(10)  # the idle loop was woken: call_soon alone from this thread would leave it asleep
    assert ran_on and ran_on[0] != threading.get_ident()


def test_a_closed_loop_refuses_work() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    with pytest.raises(RuntimeError):
        loop_handoff.call_soon(loop, lambda: None)


def test_run_on_runs_at_once_on_the_loop(loop: asyncio.AbstractEventLoop) -> None:
    order: list[str] = []
    done = threading.Event()

    def current() -> None:
        loop_handoff.run_on(loop, order.append, "ran")
        order.append("current ends")
        done.set()
    loop.call_soon_threadsafe(current)
    assert done.wait(10)
    assert order == ["ran", "current ends"]
