"""FlakyCluster: a real cluster (embedded, service or node cluster) whose data calls fail on demand, for the
client tests of retries and idempotence."""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa

from fabric.client.cluster import Cluster, PendingAppend
from fabric.common.errors import ClientTimeoutError, FabricError
from fabric.common.types import (
    Fetched,
    PartitionState,
    ProducerIdentity,
    TopicInfo,
    TopicPartition,
    TopicRecovery,
    TransactionalOffsets,
)
from fabric.server.connection import time_left
from fabric.storage.cleaner import CleanReport

HANG_S = 60.0  # how long a hung call takes outside any call_deadline


class FlakyCluster(Cluster):
    """A real cluster whose append or fetch raise a chosen error on their first N calls (as a
    coordinator failing over, a rebalance or a refusal would), or make the call and then raise it (an answer
    lost on the way back), counting every call."""

    def __init__(self, inner: Cluster) -> None:
        self.inner, self.coordinator, self.url = inner, inner.coordinator, inner.url
        self.concurrent_appends, self.pipelined_appends = inner.concurrent_appends, inner.pipelined_appends
        self.in_flight = self.most_in_flight = 0  # appends started and not yet answered (now, and at most)
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()  # the errors of started appends, by class
        self._failures: dict[str, list[Any]] = {}
        self._meeting: threading.Barrier | None = None
        self._lock = threading.Lock()
        self._hangs: Counter[str] = Counter()
        self._before: tuple[int, Callable[[], object]] | None = None

    def before_append(self, number: int, action: Callable[[], object]) -> None:
        """Run `action` in the appending thread just before the `number`th started append (counted in
        calls["append"]) is made: e.g. a leader killed at a chosen point of a run, however fast the run goes."""
        self._before = (number, action)

    def hang(self, method: str, times: int) -> None:
        """Make the next `times` calls of `method` take all the time their caller gives them (call_deadline), then
        raise ClientTimeoutError, as a server that never answers."""
        self._hangs[method] = times

    def meet(self, parties: int, timeout_s: float = 60.0) -> None:
        """Make the next `parties` appends wait for each other before they are made (threading.Barrier): appends
        made one after another never all get there, and each fails with BrokenBarrierError after `timeout_s`."""
        self._meeting = threading.Barrier(parties, action=self._met, timeout=timeout_s)

    def _met(self) -> None:
        self._meeting = None

    def fail(self, method: str, times: int, error: FabricError, after: bool = False,
             then: Callable[[], object] = lambda: None) -> None:
        """Make the next `times` calls of `method` ("append", "fetch" or "publish_transaction") raise `error`
        (`after`: once the call was made, and `then()` has run, e.g. a leader killed while the answer was on its
        way)."""
        self._failures[method] = [times, error, after, then]

    def _call(self, method: str, *args: Any) -> Any:
        meeting = self._meeting if method == "append" else None
        if meeting is not None:
            meeting.wait()
        with self._lock:  # (appends to several partitions may come together)
            self.calls[method] += 1
            failure = self._failures.get(method)
            failing = bool(failure and failure[0] > 0)
            if failing:
                failure[0] -= 1
            hanging = not failing and self._hangs[method] > 0
            if hanging:
                self._hangs[method] -= 1
        if hanging:
            time.sleep(time_left(HANG_S))
            raise ClientTimeoutError(f"{method} did not answer in time")
        if failing:
            self._failing(failure, method, args)
        return getattr(self.inner, method)(*args)

    def _failing(self, failure: list[Any], method: str, args: tuple[Any, ...]) -> Any:
        """Raise the failure's error; with `after`, once the call was made and then() has run."""
        if failure[2]:
            getattr(self.inner, method)(*args)
            failure[3]()
        raise failure[1]

    def append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none", acks: str = "all",
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> int:
        return self._call("append", topic, partition, rows, codec, acks, producer_id, producer_epoch, base_sequence)

    def start_append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none",
                     acks: str = "all", producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1
                     ) -> PendingAppend:
        """The inner cluster's append started now, counted in `in_flight` until answered, its error counted in
        `errors`. An append that is to fail takes its failure now and is made when waited on (the appends
        started after it go ahead of it); while appends are to hang or meet, one made when waited on (as
        `append`, which does that)."""
        args = (topic, partition, rows, codec, acks, producer_id, producer_epoch, base_sequence)
        with self._lock:
            failure = self._failures.get("append")
            failing = bool(failure and failure[0] > 0)
            if failing:
                failure[0] -= 1
            special = self._meeting is not None or self._hangs["append"] > 0
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if not special:
                self.calls["append"] += 1
            before = self._before if self._before and self._before[0] == self.calls["append"] else None
            if before is not None:
                self._before = None
        try:
            if before is not None:
                before[1]()
            if failing:
                pending = PendingAppend(lambda: self._failing(failure, "append", args))
            else:
                pending = super().start_append(*args) if special else self.inner.start_append(*args)
        except BaseException:
            self._answered()
            raise

        def answer() -> int:
            try:
                return pending.wait()
            except FabricError as exc:
                with self._lock:
                    self.errors[type(exc).__name__] += 1
                raise
            finally:
                self._answered()

        def cancel() -> None:
            pending.cancel()
            self._answered()
        return PendingAppend(answer, cancel)

    def _answered(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def init_producer_id(self) -> ProducerIdentity:
        return self.inner.init_producer_id()

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None, max_wait_ms: int = 0, client_rack: str | None = None,
              isolation_level: str = "read_committed") -> list[Fetched]:
        return self._call("fetch", topic, partition, offset, max_bytes, end_offset, max_wait_ms, client_rack,
                          isolation_level)

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        return self.inner.create_topic(name, partitions, config, value_schema)

    def delete_topic(self, name: str) -> None:
        self.inner.delete_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        return self.inner.create_partitions(name, total)

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        return self.inner.partition_state(topic, partition)

    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        return self.inner.offset_for_time(topic, partition, timestamp_us)

    def offset_after_records(self, topic: str, partition: int, offset: int, count: int,
                             end_offset: int | None = None, isolation_level: str = "read_committed") -> int:
        return self.inner.offset_after_records(topic, partition, offset, count, end_offset, isolation_level)

    def enforce_retention(self, topic: str) -> int:
        return self.inner.enforce_retention(topic)

    def compact_topic(self, topic: str) -> list[CleanReport]:
        return self.inner.compact_topic(topic)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        return self.inner.delete_records(topic, partition, before_offset)

    def publish(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                codec: str = "none") -> bool:
        return self.inner.publish(txn, parts, codec)

    def publish_transaction(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                            codec: str = "none", offsets: TransactionalOffsets | None = None,
                            timeout_ms: int = 60_000) -> dict[TopicPartition, int] | None:
        return self._call("publish_transaction", txn, parts, codec, offsets, timeout_ms)

    def recover_topics(self, names: Sequence[str] | None = None) -> list[TopicRecovery]:
        return self.inner.recover_topics(names)

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        self.inner.commit_offsets(group, offsets, metadata, generation, member_id)
