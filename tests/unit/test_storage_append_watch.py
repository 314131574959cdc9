"""Log.watch_appends, what a coordinator service's held consumer fetch waits on: a waiter is called once when
this process next moves the log's end on (an append, a publish), never when the end is already past the offset
watched (nothing is registered then: the caller reads at once), and not once unwatched. Another writer's appends
(another Log over the same directory, as another process has) reach the waiters they moved past through
Log.look_for_appends, which the service's AppendPoller calls for every watched log on its event loop."""
from __future__ import annotations

import asyncio
import threading

from fabric.common.waiting import wait_for
from fabric.server.consumer_fetches import AppendPoller


def test_a_waiter_is_called_once_at_the_next_append(tmp_path, storage) -> None:
    log = storage.open_log(str(tmp_path / "p"))
    calls: list[int] = []
    assert log.watch_appends(lambda: calls.append(log.end_offset), 0)
    assert calls == []
    log.append(storage.make_batch([b"a", b"b"]))
    assert calls == [2]  # called by the append, after its end offset moved
    log.append(storage.make_batch([b"c"]))
    assert calls == [2]  # once: a waiter watches again if it still waits


def test_nothing_is_registered_when_the_end_is_past_the_offset_already(tmp_path, storage) -> None:
    log = storage.open_log(str(tmp_path / "p"))
    log.append(storage.make_batch([b"a"]))
    calls: list[str] = []
    assert not log.watch_appends(lambda: calls.append("late"), 0)
    log.append(storage.make_batch([b"b"]))
    assert calls == []
    assert log.watch_appends(lambda: calls.append("at the end"), 2)
    log.append(storage.make_batch([b"c"]))
    assert calls == ["at the end"]


def test_an_unwatched_waiter_is_not_called(tmp_path, storage) -> None:
    log = storage.open_log(str(tmp_path / "p"))
    calls: list[str] = []

    def waiter() -> None:
        calls.append("called")
    assert log.watch_appends(waiter, 0)
    log.unwatch_appends(waiter)
    log.unwatch_appends(waiter)  # forgetting twice is harmless (a held fetch answered by its timer)
    log.append(storage.make_batch([b"a"]))
    assert calls == []


def test_an_append_on_another_thread_calls_the_waiters_registered_before_it(tmp_path, storage) -> None:
    log = storage.open_log(str(tmp_path / "p"))
    woken = [threading.Event() for _ in range(5)]
    for event in woken:
        assert log.watch_appends(event.set, 0)
    writer = threading.Thread(target=log.append, args=(storage.make_batch([b"a"]),))
    writer.start()
    wait_for(lambda: all(event.is_set() for event in woken), 30, "every waiter to be called")
    writer.join(30)
    assert log.end_offset == 1


def test_a_look_finds_another_writers_appends_and_calls_only_the_waiters_they_moved_past(tmp_path, storage) -> None:
    log, other = storage.open_log(str(tmp_path / "p")), storage.open_log(str(tmp_path / "p"))
    log.append(storage.make_batch([b"a"]))
    calls: list[str] = []
    assert log.watch_appends(lambda: calls.append("past 1"), 1)
    assert log.watch_appends(lambda: calls.append("past 2"), 2)
    assert log.look_for_appends() and calls == []  # nothing moved: both wait on
    other.append(storage.make_batch([b"b"]))  # nothing in this process calls them
    assert calls == []
    assert log.look_for_appends() and calls == ["past 1"]
    other.append(storage.make_batch([b"c"]))
    assert not log.look_for_appends() and calls == ["past 1", "past 2"]  # none left
    assert not log.look_for_appends() and calls == ["past 1", "past 2"]


def test_the_poller_looks_at_every_watched_log_until_another_writers_append_reaches_its_waiters(
        tmp_path, storage) -> None:
    logs = [storage.open_log(str(tmp_path / str(p))) for p in range(3)]
    others = [storage.open_log(str(tmp_path / str(p))) for p in range(3)]

    async def scenario() -> list[int]:
        poller, woken, loop = AppendPoller(0.01), [asyncio.Event() for _ in logs], asyncio.get_running_loop()
        for plog, event in zip(logs, woken, strict=True):
            assert plog.watch_appends(lambda event=event: loop.call_soon_threadsafe(event.set), 0)
            poller.add(plog)
        others[1].append(storage.make_batch([b"x"]))
        await asyncio.wait_for(woken[1].wait(), 60)
        others[0].append(storage.make_batch([b"y"]))
        others[2].append(storage.make_batch([b"z"]))
        await asyncio.wait_for(asyncio.gather(woken[0].wait(), woken[2].wait()), 60)
        return [plog.end_offset for plog in logs]
    assert asyncio.run(scenario()) == [1, 1, 1]
