"""A process paused (SIGSTOP) while it holds one of a `file://` fabric's locks stalls the other processes' calls no
longer than their own timeouts, and the error names the process: a producer's sends end within delivery_timeout_ms
while another process holds their partition's lock (flush() and close() return), a commit ends within
embedded.COMMIT_WAIT_S while another holds its offsets partition's lock, a transaction's commit within its timeout
and a Spark sink's batch within its transaction.timeout.ms while another holds a partition's, and a metadata write
(create_topic, a producer id) within metadata_version.WRITE_WAIT_S while another writes the metadata database (the
version file's flock; a reader takes none). A coordinator service serving the directory goes on answering every
other request, and ends those that wait for the held lock within storage.lock.REQUEST_WAIT_S. Nothing was written
by a call that failed so, and everything works again once the holder is gone. Each holder is a real process that
took the lock as the fabric does, then was paused."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import pytest

import fabric
from fabric import TopicPartition
from fabric.client import embedded
from fabric.client.protocol_calls import produce_payload
from fabric.common.errors import ClientTimeoutError, RequestTimedOutError
from fabric.common.protocol import payloads
from fabric.common.protocol.connection import ProtocolConnection
from fabric.coordinator import metadata_version, sqlite_store
from fabric.coordinator.offsets_records import offsets_partition
from fabric.server import wire

HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == "shared" else fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""
READER = r"""
import sys
from fabric.coordinator.sqlite_store import SqliteCoordinator
def read(db):
    db.execute("SELECT name FROM topics").fetchall()
    print("reading", flush=True)
    sys.stdin.read()
SqliteCoordinator(sys.argv[1])._cached({}, "t", read)
"""
HANG_S = 60  # a call still running after this has hung: each bound below is a few seconds at most


class PausedHolder:
    """A real process holding the flock of `path` (`shared`: as a metadata reader holds it), paused until killed."""

    def __init__(self, path, shared: bool = False) -> None:
        assert path.exists()
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), "shared" if shared else "exclusive"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "held"
        os.kill(self.process.pid, signal.SIGSTOP)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # its lock goes with it
        self.process.wait(60)


def values(fab, topic: str) -> list[bytes]:
    """Every record of the topic's one partition (all of it is written before this is called)."""
    with fab.consumer(topic, auto_offset_reset="earliest") as consumer:
        return consumer.poll_batch(100).column("value").to_pylist()


class Outcome:
    """call() on a thread of its own, started at once; `result()` joins it for at most HANG_S."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call, self._result = call, [None, None, 0.0]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        began = time.monotonic()
        try:
            self._result[0] = self.call()
        except BaseException as exc:  # noqa: BLE001 (the test looks at it)
            self._result[1] = exc
        self._result[2] = time.monotonic() - began

    def result(self) -> tuple[Any, BaseException | None, float]:
        """What call() returned or raised, and how long it took."""
        self._thread.join(HANG_S)
        assert not self._thread.is_alive(), f"{self.call} still waits after {HANG_S} s"
        return self._result[0], self._result[1], self._result[2]


def outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None, float]:
    """call() on a thread of its own, joined for at most HANG_S: what it returned or raised, and how long it took."""
    return Outcome(call).result()


def assert_names_holder(error: BaseException | None, holder: PausedHolder, path) -> None:
    assert isinstance(error, RequestTimedOutError), error
    assert str(path) in str(error) and f"process {holder.process.pid}" in str(error) and "kill -CONT" in str(error)


def test_sends_end_within_delivery_timeout_while_a_paused_process_holds_the_partition(tmp_path) -> None:
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        lock = tmp_path / "t" / "0" / ".lock"
        with fab.producer() as producer:
            producer.send("t", b"before").get(timeout=60)  # (the lock file exists, the producer has its id)
        holder = PausedHolder(lock)
        try:
            producer = fab.producer(linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=3000)
            future = producer.send("t", b"stalled")
            _, error, took = outcome(future.get)  # no timeout of its own: delivery_timeout_ms bounds it
            assert_names_holder(error, holder, lock)
            assert "delivery_timeout_ms=3000 passed" in str(error) and took < HANG_S / 2
            producer.send("t", b"stalled too")
            _, error, _ = outcome(producer.flush)  # its record fails within delivery_timeout_ms: flush() ends
            assert error is None
            _, error, _ = outcome(producer.close)
            assert error is None
        finally:
            holder.kill()
        with fab.producer() as producer:
            assert producer.send("t", b"after").get(timeout=60).offset == 1  # nothing was written by the failed ones
        assert values(fab, "t") == [b"before", b"after"]


def test_a_commit_ends_while_a_paused_process_holds_its_offsets_partition(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(embedded, "COMMIT_WAIT_S", 1.0, raising=False)  # (fails, not errs, unfixed)
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        with fab.producer() as producer:
            producer.send("t", b"v").get(timeout=60)
        consumer = fab.consumer(group_id="g", enable_auto_commit=False)
        tp = TopicPartition("t", 0)
        consumer.commit({tp: 0})  # (the offsets partition's lock file exists)
        lock = tmp_path / "__fabric" / "__consumer_offsets" / str(offsets_partition("g")) / ".lock"
        holder = PausedHolder(lock)
        try:
            _, error, took = outcome(lambda: consumer.commit({tp: 1}))
            assert_names_holder(error, holder, lock)
            assert isinstance(error, RequestTimedOutError) and error.retriable and took < HANG_S / 2
            assert consumer.committed(tp) == 0  # not committed
        finally:
            holder.kill()
        consumer.commit({tp: 1})
        assert consumer.committed(tp) == 1
        consumer.close()


def test_metadata_writes_go_on_while_a_paused_process_reads_the_metadata(tmp_path, monkeypatch) -> None:
    """A reader takes no lock (metadata_version): one paused in the middle of reading the database, as a real
    store reads it, delays no write."""
    monkeypatch.setattr(metadata_version, "WRITE_WAIT_S", 1.0, raising=False)  # (fails, not hangs, unfixed)
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        reader = subprocess.Popen([sys.executable, "-c", READER, str(tmp_path / "__fabric" / "metadata.db")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
            os.kill(reader.pid, signal.SIGSTOP)
            _, error, _ = outcome(lambda: fab.create_topic("u"))
            assert error is None
            assert fab.describe_topic("u").name == "u"
        finally:
            reader.kill()
            reader.wait(60)


def test_metadata_writes_end_while_a_paused_process_writes_the_metadata(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(metadata_version, "WRITE_WAIT_S", 1.0, raising=False)
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        version = tmp_path / "__fabric" / "metadata.db-version"
        holder = PausedHolder(version)  # a writer holds it so while its transaction is in flight
        try:
            _, error, took = outcome(lambda: fab.create_topic("u"))
            assert_names_holder(error, holder, version)
            assert took < HANG_S / 2
            producer = fab.producer(linger_ms=0)  # its first send claims a producer id: a metadata write
            future = producer.send("t", b"queued")
            _, error, _ = outcome(lambda: future.get(timeout=2))  # ends at its timeout, the record left queued
            assert isinstance(error, ClientTimeoutError) and not future.done()
        finally:
            holder.kill()
        assert future.get(timeout=60).offset == 0
        producer.close()
        assert fab.create_topic("u").name == "u"
        assert values(fab, "t") == [b"queued"]


def test_a_transaction_commit_ends_while_a_paused_process_holds_a_partition(tmp_path) -> None:
    with fabric.connect(f"file://{tmp_path}") as fab:
        fab.create_topic("t", partitions=1)
        with fab.producer() as producer:
            producer.send("t", b"before").get(timeout=60)
        lock = tmp_path / "t" / "0" / ".lock"
        producer = fab.producer(transactional_id="tx")
        producer.init_transactions()
        producer.begin_transaction()
        future = producer.send("t", b"stalled")
        holder = PausedHolder(lock)
        try:
            _, error, took = outcome(lambda: producer.commit_transaction(timeout=1))
            assert_names_holder(error, holder, lock)
            assert took < HANG_S / 2 and future.done() and future.exception() is not None
            assert error is not None and error.args[0].txn_requires_abort()  # (confluent-kafka's question)
            producer.abort_transaction()  # the failed commit wrote nothing: the transaction is abortable
        finally:
            holder.kill()
        producer.begin_transaction()
        producer.send("t", b"after")
        producer.commit_transaction(timeout=-1)  # (librdkafka's -1: within the transaction timeout)
        producer.close()
        assert values(fab, "t") == [b"before", b"after"]


def test_a_spark_sink_batch_ends_while_a_paused_process_holds_a_partition(tmp_path, spark) -> None:
    url = f"file://{tmp_path}"
    with fabric.connect(url) as fab:
        fab.create_topic("t", partitions=1)
        with fab.producer() as producer:
            producer.send("t", b"before").get(timeout=60)
        lock = tmp_path / "t" / "0" / ".lock"
        writer = (spark.sql("SELECT CAST('v' AS BINARY) AS value").write.format("fabric").option("url", url)
                  .option("topic", "t").option("transaction.timeout.ms", "1000").mode("append"))
        holder = PausedHolder(lock)
        try:
            _, error, took = outcome(writer.save)
            assert error is not None and "kill -CONT" in str(error) and f"process {holder.process.pid}" in str(error)
            assert took < HANG_S / 2
        finally:
            holder.kill()
        writer.save()
        assert values(fab, "t") == [b"before", b"v"]


def test_a_services_requests_wait_for_no_paused_process_holding_a_lock_in_its_directory(coordinators, tmp_path,
                                                                                        protocol_kit):
    """A coordinator service's event loop waits for no lock: with a paused `file://` process holding the lock of
    partition t-0 and that of a group's offsets partition, both in the service's directory, every other request
    is answered meanwhile (a produce to t-1, another group's commit, a fetch); a produce to t-0 and a commit of
    that group end within storage.lock.REQUEST_WAIT_S, naming the process, and nothing of them is written."""
    service = coordinators()
    with fabric.connect(service.url()) as served:
        served.create_topic("t", partitions=2)
    stalled, free = "g-stalled", next(f"g{n}" for n in range(100) if offsets_partition(f"g{n}")
                                      != offsets_partition("g-stalled"))
    connection = ProtocolConnection(service.status().protocol_address, None, None, 30.0, wire.exception_of)

    def produce(partition: int, value: bytes) -> int:
        return connection.send("produce", {"topic": "t", "partition": partition},
                               produce_payload(protocol_kit.rows(value)))
    for request in (produce(0, b"a"), produce(1, b"b")):
        connection.wait(request, HANG_S)
    for group in (stalled, free):  # (the offsets partitions' lock files exist)
        connection.call("commit_offsets", {"group": group, "offsets": [["t", 0, 1]]})
    locks = [tmp_path / "data" / "t" / "0" / ".lock",
             tmp_path / "data" / "__fabric" / "__consumer_offsets" / str(offsets_partition(stalled)) / ".lock"]
    holders = [PausedHolder(path) for path in locks]
    served = fabric.connect(service.url("timeout_ms=120000"))  # (the service's bound ends the call, not this)
    try:
        began = time.monotonic()
        published = {TopicPartition("t", 0): [protocol_kit.rows(b"p")]}
        publish = Outcome(lambda: served.cluster.publish("txn", published))  # (over Flight)
        waiting = [produce(0, b"stalled"),
                   connection.send("commit_offsets", {"group": stalled, "offsets": [["t", 0, 0]]})]
        assert int(bytes(connection.wait(produce(1, b"c"), HANG_S)[0])) == 1
        connection.call("commit_offsets", {"group": free, "offsets": [["t", 1, 2]]})
        fetch = {"topic": "t", "partition": 1, "offset": 0, "max_bytes": 1 << 20}
        assert [r.batch.num_rows for r in payloads.fetched_of(*connection.call("fetch", fetch))] == [1, 1]
        for request, holder, path in zip(waiting, holders, locks, strict=True):
            with pytest.raises(RequestTimedOutError) as error:
                connection.wait(request, HANG_S)
            assert_names_holder(error.value, holder, path)
        assert_names_holder(publish.result()[1], holders[0], locks[0])
        assert time.monotonic() - began < HANG_S
    finally:
        for holder in holders:
            holder.kill()
        served.close()
    assert int(bytes(connection.wait(produce(0, b"after"), HANG_S)[0])) == 1  # the stalled one was not written
    with fabric.connect(service.url()) as served:
        assert served.consumer(group_id=stalled).committed(TopicPartition("t", 0)) == 1
    connection.close()


@pytest.mark.parametrize("shared", [False, True])
def test_a_lock_wait_within_waiting_until_ends_at_its_deadline(tmp_path, shared: bool) -> None:
    from fabric.storage.lock import PartitionLock, waiting_until
    path = tmp_path / ".lock"
    path.touch()
    holder = PausedHolder(path, shared)
    try:
        lock = PartitionLock(str(path))
        with waiting_until(time.monotonic() + 0.2), pytest.raises(RequestTimedOutError, match="kill -CONT"):
            lock.__enter__()
        assert not lock.held
    finally:
        holder.kill()
    with waiting_until(time.monotonic() + 60), lock:
        assert lock.held


WRITER = r"""
import sys
from fabric.coordinator.sqlite_store import SqliteCoordinator
with SqliteCoordinator(sys.argv[1])._tx() as db:
    db.execute("UPDATE topics SET config='{\"retention.ms\": \"5\"}' WHERE name='t'")
    print("writing", flush=True)
    sys.stdin.read()
"""


def test_a_writer_killed_mid_transaction_leaves_readers_caching_again(tmp_path):
    """A writer SIGKILLed in its transaction leaves its version marked in flight, which no reader may cache under;
    the next reader finds no process holding the lock and settles it, so the metadata is cached again (not read
    from the database on every call for good), and the killed write is not seen."""
    path = str(tmp_path / "m.db")
    reader = sqlite_store.SqliteCoordinator(path)
    try:
        reader.create_topic("t", 1, {}, None)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
        assert reader.topic("t") is not reader.topic("t")  # a write in flight: nothing kept
        writer.kill()
        writer.wait(60)
        reader.topic("t")  # finds the dead writer's version and settles it
        assert reader.topic("t") is reader.topic("t") and reader.topic("t").config == {}
    finally:
        reader.close()


def test_commits_a_loop_defers_for_a_paused_lock_holder_land_in_order_or_end_at_the_bound(tmp_path, monkeypatch):
    """On an event loop (without_waiting) the local offsets topic defers a batch whose partition's lock a paused
    process holds to a thread that waits for it; a later batch of the partition joins it, even once the lock is
    free, so they land in the order they came. Past commit_batch's bound, a deferred batch's callers hear who
    holds the lock, and nothing of theirs is written."""
    from fabric.coordinator import commit_batch
    from fabric.coordinator.commit_batch import Queued
    from fabric.coordinator.offsets_log import LocalOffsetsLog
    from fabric.coordinator.offsets_records import encoded, offset_rows
    from fabric.storage.lock import without_waiting

    offsets = LocalOffsetsLog(str(tmp_path / "offsets"))
    landed: list[tuple[str, int]] = []

    def commit(group: str) -> Queued:
        rows = offset_rows(group, {TopicPartition("t", 0): 1}, "", 0)
        return Queued(encoded(rows, time.time_ns() // 1000), lambda: None,
                      lambda offset: landed.append((group, offset)))

    def write(*queued: Queued) -> None:
        with without_waiting():
            offsets.write_queued(0, list(queued))
    write(commit("first"))  # (the lock file exists)
    lock = tmp_path / "offsets" / "0" / ".lock"
    holder = PausedHolder(lock)
    try:
        deferred, joined = commit("deferred"), commit("joined")
        assert outcome(lambda: write(deferred))[1] is None  # it returned, the loop free
        assert not deferred.done.done()
        holder.kill()
        write(joined)
        for queued in (deferred, joined):
            assert queued.done.result(HANG_S) is None
        assert landed == [("first", 0), ("deferred", 1), ("joined", 2)]
        monkeypatch.setattr(commit_batch, "REQUEST_WAIT_S", 0.5)
        holder = PausedHolder(lock)
        late = commit("late")
        write(late)
        with pytest.raises(RequestTimedOutError) as error:
            late.done.result(HANG_S)
        assert_names_holder(error.value, holder, lock)
    finally:
        holder.kill()
    write(commit("after"))
    assert landed[-1] == ("after", 3)
