"""Group commit (fabric/server/group_commit.py) over a real partition Log: appends that arrive while one is in
flight go together in the next append, in arrival order, each caller told the offset of its own rows; a caller
whose check fails is answered alone; a refused append fails every caller of its batch and writes nothing."""
from __future__ import annotations

import threading
from typing import Callable

from fabric.common.config import TopicConfig
from fabric.common.errors import IllegalGenerationError, InvalidLeaderEpochError
from fabric.common.waiting import wait_for
from fabric.coordinator.offsets_records import CONFIG, LEADER_KEY, SCHEMA, batch, encoded
from fabric.server.group_commit import GroupCommit
from fabric.storage.log import Log

WAIT_S = 30


class Partition:
    """A real Log appended to through a GroupCommit; the first append holds until `release()` (an append in
    flight, so later callers queue behind it). `appends` counts the rows of each append."""

    def __init__(self, path: str) -> None:
        self.log = Log(path, SCHEMA, TopicConfig(CONFIG))
        self.epoch, self.appends = 0, []
        self._entered, self._gate = threading.Event(), threading.Event()
        self.commit = GroupCommit(threading.Lock(), self._append)

    def _append(self, rows, written: Callable[[int], None]) -> None:
        self.appends.append(rows.num_rows)
        self._entered.set()
        assert self._gate.wait(WAIT_S), "the test never released the first append"
        written(self.log.append(rows, leader_epoch=self.epoch))

    def release(self) -> None:
        self._gate.set()

    def submit(self, name: str, count: int, told: dict, failed: dict, check: Callable[[], None] = lambda: None
               ) -> threading.Thread:
        """A caller appending `count` records keyed `name` in a thread; once its first append is in flight or it
        is queued behind one, return (its thread): where its rows landed goes to `told`, its error to `failed`."""
        before, in_flight = self.commit.queued, self._entered.is_set()

        def run() -> None:
            try:
                self.commit.submit(encoded([(name.encode(), None)] * count, 0), check,
                                   lambda offset: told.setdefault(name, offset))
            except Exception as exc:  # noqa: BLE001 (asserted by the test)
                failed[name] = exc
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        if in_flight:
            wait_for(lambda: self.commit.queued > before, WAIT_S, f"{name} queued behind the append in flight")
        else:
            assert self._entered.wait(WAIT_S), f"{name}'s append did not start"
        return thread

    def keys(self) -> list[bytes]:
        return [key for fetched in self.log.fetch(0, 1 << 20, self.log.end_offset)
                for key in fetched.batch.column(1).to_pylist()]


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive()


def test_appends_arriving_during_one_in_flight_go_together_in_order(tmp_path) -> None:
    partition, told, failed = Partition(str(tmp_path / "p")), {}, {}

    def fenced() -> None:
        raise IllegalGenerationError("generation 3 is not the group's 4")
    threads = [partition.submit("a", 1, told, failed), partition.submit("b", 2, told, failed),
               partition.submit("c", 1, told, failed, fenced), partition.submit("d", 3, told, failed)]
    partition.release()
    _join(threads)
    assert list(failed) == ["c"] and isinstance(failed["c"], IllegalGenerationError)  # answered alone
    assert partition.appends == [1, 5]  # a alone; b and d waited and went in one append
    assert told == {"a": 0, "b": 1, "d": 3}  # each the offset of its own rows, in arrival order
    assert partition.keys() == [b"a", b"b", b"b", b"d", b"d", b"d"]


def test_a_refused_append_fails_every_caller_of_its_batch_and_writes_nothing(tmp_path) -> None:
    partition, told, failed = Partition(str(tmp_path / "p")), {}, {}
    first = partition.submit("a", 1, told, failed)
    queued = [partition.submit("b", 1, told, failed), partition.submit("c", 2, told, failed)]
    partition.log.append(batch([(LEADER_KEY, None)], 0), leader_epoch=1)  # a newer writer stamped the partition
    partition.release()
    _join([first, *queued])
    assert set(failed) == {"a", "b", "c"} and all(isinstance(e, InvalidLeaderEpochError) for e in failed.values())
    assert told == {} and partition.appends == [1, 3]
    assert partition.keys() == [LEADER_KEY]  # nothing of theirs was written
    partition.epoch = 1
    after: list[int] = []
    partition.commit.submit(encoded([(b"e", None)], 0), lambda: None, after.append)
    assert after == [1] and partition.keys() == [LEADER_KEY, b"e"]  # the partition takes appends again
