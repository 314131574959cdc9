"""A producer's `send(...).get(timeout=...)` on a `file://` fabric appends its one-record batch in the calling
thread when the partition's lock is free (no hand-off to the linger thread: what kafka-python users type costs what
`get()` does), and otherwise leaves the append to a thread that may wait for the lock: the caller's wait still
ends at its timeout, the record stays queued, and it is written once; the same where the producer's own batch to
the partition (a send_batch on another thread) waits for the lock. The lock's holder is a real process, paused
with SIGSTOP (test_paused_lock_holders.PausedHolder)."""
from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import fabric
from fabric.common.errors import ClientTimeoutError
from fabric.common.waiting import wait_for
from tests.integration.test_paused_lock_holders import PausedHolder, values

LINGER_MS = 600_000  # the linger thread never sends a batch first: each is the get(timeout)'s to take


def get_in_thread(future, timeout: float) -> list[BaseException]:
    """future.get(timeout) on a thread of its own, joined (for at most a minute): what it raised."""
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            future.get(timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 (the test looks at it)
            outcome.append(exc)
    waiter = threading.Thread(target=wait)
    waiter.start()
    waiter.join(60)
    assert not waiter.is_alive(), f"get(timeout={timeout}) waited on past its timeout"
    return outcome


def test_a_get_with_a_timeout_appends_in_the_calling_thread(tmp_path) -> None:
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        called_back_in: list[str] = []
        with fab.producer(linger_ms=LINGER_MS) as producer:
            for i in range(5):
                future = producer.send("t", b"v%d" % i, callback=lambda error, metadata: called_back_in.append(
                    threading.current_thread().name))
                assert future.get(timeout=30).offset == i
        assert called_back_in == [threading.current_thread().name] * 5  # the batch ended here, not elsewhere
        assert values(fab, "t") == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_a_get_with_a_timeout_ends_at_it_while_a_paused_process_holds_the_partition(tmp_path) -> None:
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        holder = PausedHolder(tmp_path / "t" / "0" / ".lock")
        try:
            appended_in: list[str] = []
            with fab.producer(linger_ms=LINGER_MS) as producer:
                future = producer.send("t", b"late", callback=lambda error, metadata: appended_in.append(
                    threading.current_thread().name))
                outcome = get_in_thread(future, 0.5)
                assert len(outcome) == 1 and isinstance(outcome[0], ClientTimeoutError)
                assert "stays queued" in str(outcome[0]) and not future.done()
                holder.kill()
                assert future.get(timeout=60).offset == 0
                assert appended_in == ["fabric-append"]
            assert values(fab, "t") == [b"late"]
        finally:
            holder.kill()


def test_a_get_with_a_timeout_ends_at_it_while_the_producers_own_batch_waits_for_the_partition(tmp_path) -> None:
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        holder = PausedHolder(tmp_path / "t" / "0" / ".lock")
        try:
            with fab.producer(linger_ms=LINGER_MS) as producer:
                batch = threading.Thread(target=producer.send_batch, args=(
                    "t", pa.table({"value": [b"b1", b"b2"], "partition": [0, 0]})))
                batch.start()  # it holds the producer's order for t-0 while it waits for the lock
                order = producer._appender.sequences.partition_lock(("t", 0))  # (a waiter polls: the kernel
                wait_for(order.locked, 60, "send_batch waiting for the paused process's lock")  # lists none)
                future = producer.send("t", b"late", partition=0)
                outcome = get_in_thread(future, 0.5)
                assert len(outcome) == 1 and isinstance(outcome[0], ClientTimeoutError)
                holder.kill()
                batch.join(60)
                assert not batch.is_alive() and future.get(timeout=60).offset == 2
            assert values(fab, "t") == [b"b1", b"b2", b"late"]
        finally:
            holder.kill()


def test_a_partition_lock_taken_without_waiting_refuses_another_threads_hold(tmp_path) -> None:
    from fabric.storage.lock import PartitionBusy, PartitionLock, without_waiting
    lock, other = PartitionLock(str(tmp_path / ".lock")), PartitionLock(str(tmp_path / ".lock"))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(120)
    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(120)
    with without_waiting():
        with pytest.raises(PartitionBusy, match="another thread"):
            lock.__enter__()
        with pytest.raises(PartitionBusy, match="another process"):  # (flock: a second open file is another holder)
            other.__enter__()
    release.set()
    holder.join(120)
    with without_waiting(), lock, lock:  # free again, and re-entrant within the thread
        assert lock.held
    assert not lock.held
