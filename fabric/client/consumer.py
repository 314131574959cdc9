"""The consumer: Kafka's poll/seek/commit API, returning Records or whole Arrow tables.

Positions are next offsets to read, per assigned partition. With a group_id, a partition without a
position starts at the group's committed offset, else at auto_offset_reset; commit() stores positions in
the coordinator, where `fabric groups describe` and every other consumer of the group see them.
With a group_id, subscribe() makes the consumer a group member (fabric/membership.py): the group splits the
partitions among its members and commits carry the member's generation. subscribe(pattern=...) follows the topics
whose names match, created later ones included. Partitions come back as fabric.TopicPartition objects; calls
naming partitions take kafka-python's and confluent-kafka's forms too (fabric.client.partition_args).
"""
from __future__ import annotations

import logging
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa

from fabric.client import partition_args
from fabric.client.client_metrics import ConsumerCounts, Metrics
from fabric.client.cluster import Cluster
from fabric.client.fetch_buffer import FetchBuffer, FetchedRun
from fabric.client.lookups import Lookups
from fabric.client.membership import Callback, GroupMember, GroupMetadata
from fabric.client.offset_store import OffsetStore
from fabric.client.rebalance_callbacks import RebalanceCallbacks
from fabric.client.serializers import Deserializer, Deserializers
from fabric.client.topic_partition import TopicPartition as NamedPartition
from fabric.client.topic_partition import named, named_keys, with_offsets
from fabric.common import checks
from fabric.common.config import CONSUMER_SETTINGS, client_config
from fabric.common.errors import (
    CommitFailedError,
    FabricError,
    InvalidArgumentError,
    InvalidConfigError,
    MembershipError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
)
from fabric.common.names import INTERNAL_PREFIX, validate_group, validate_topic
from fabric.common.records import Record, output_schema
from fabric.common.types import TopicPartition

METADATA_REFRESH_S = 1.0
log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.005
ITERATOR_POLL_S = 0.1  # how often iterating the consumer looks whether it was closed
SCHEMA_MAX_AGE_S = 5.0  # a topic deleted and created again with another schema is seen within this time

CommitCallback = Callable[[dict[NamedPartition, int], "BaseException | None"], Any]


class Consumer(Lookups):
    """Reads records from assigned or subscribed topic partitions of one cluster. `key_deserializer` /
    `value_deserializer` (kafka-python's) turn each non-null key / value of the Records poll() returns."""

    def __init__(self, cluster: Cluster, *topics: str, group_id: str | None = None,
                 on_assign: Callback | None = None, on_revoke: Callback | None = None,
                 key_deserializer: Deserializer | None = None, value_deserializer: Deserializer | None = None,
                 **config: Any) -> None:
        self.cluster = cluster
        if "group.id" in config:  # (confluent-kafka's config dict names the group with the rest)
            dotted = config.pop("group.id")
            if group_id is not None and dotted != group_id:
                raise InvalidConfigError(f"group_id={group_id!r} and group.id={dotted!r} differ; give one")
            group_id = dotted
        self.group_id = validate_group(group_id) if group_id is not None else None
        self._deserializers = Deserializers(key_deserializer, value_deserializer)
        self.config = client_config("consumer", CONSUMER_SETTINGS, config)
        self._callbacks = RebalanceCallbacks.own(on_assign, on_revoke, group_id)
        self._member: GroupMember | None = None
        self._subscription: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self._pattern_at = 0.0
        self._paused: set[TopicPartition] = set()
        self._committer: ThreadPoolExecutor | None = None  # commit_async's one thread, started on first use
        self._assignment: list[TopicPartition] = []
        self._positions: dict[TopicPartition, int] = {}
        self._store = OffsetStore(self.config["enable_auto_offset_store"])
        self._buffer = FetchBuffer()  # fetched, not yet handed out
        self._schemas: dict[str, tuple[float, pa.Schema | None]] = {}  # topic -> (when read, value schema)
        self._next = 0
        self._metadata_at = 0.0
        self._last_auto_commit = time.monotonic()
        self._closed = False
        self._counts = ConsumerCounts()
        if topics:
            self.subscribe(list(topics))

    # -- assignment --------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str = (), pattern: str | None = None, *, on_assign: Any = None,
                  on_revoke: Any = None, on_lost: Any = None, listener: Any = None) -> None:
        """Consume every partition of these topics (a str is one topic; new partitions are picked up as they
        appear), or of every topic whose name matches the regular expression `pattern` (re.match, as Kafka's
        pattern subscription; topics created later are picked up within a second; internal topics, named
        __*, never match). An empty list unsubscribes, as in Kafka. Rebalance callbacks given here, confluent-kafka's
        or kafka-python's listener, replace the consumer's (fabric.client.rebalance_callbacks)."""
        callbacks = RebalanceCallbacks.given(self, on_assign, on_revoke, on_lost, listener, self.group_id)
        if callbacks is not None:
            self._callbacks = callbacks
        if pattern is not None:
            if topics:
                raise InvalidArgumentError("subscribe() takes topics or pattern=, not both")
            if not isinstance(pattern, str):
                raise InvalidArgumentError(f"pattern must be a regular expression string such as '^orders-.*', "
                                           f"got {type(pattern).__name__}")
            try:
                self._pattern = re.compile(pattern)
            except re.error as exc:
                raise InvalidArgumentError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
            self._follow_pattern(force=True)
            self._refresh_assignment(force=True)
            return None
        names = [topics] if isinstance(topics, str) else topics
        if not isinstance(names, Iterable):
            raise InvalidArgumentError(f"subscribe() takes a list of topic names, got {type(topics).__name__}")
        wanted = list(dict.fromkeys(validate_topic(t) for t in names))
        for topic in wanted:  # all exist, or nothing changes
            self.cluster.coordinator.topic(topic)
        if not wanted:
            return self.unsubscribe()
        self._pattern = None
        self._subscribe(wanted)
        self._refresh_assignment(force=True)
        return None

    def _subscribe(self, topics: list[str]) -> None:
        self._subscription = topics
        self._metadata_at = 0.0  # the assignment follows at once: assignment() never lags subscription()
        if self.group_id is not None:  # the group coordinator splits the partitions among its members
            self._join_group(self.group_id)

    def _follow_pattern(self, force: bool = False) -> None:
        """Subscribe to the topics the pattern matches now (listed at most every METADATA_REFRESH_S)."""
        if self._pattern is None or (not force and time.monotonic() - self._pattern_at < METADATA_REFRESH_S):
            return
        self._pattern_at = time.monotonic()
        matched = sorted(t for t in self.cluster.coordinator.list_topics()
                         if not t.startswith(INTERNAL_PREFIX) and self._pattern.match(t))
        if matched == self._subscription:
            return
        if matched:
            self._subscribe(matched)
        else:
            self._subscription = []
            self._leave_group()
            self._set_assignment([])

    def _join_group(self, group_id: str) -> None:
        if self._member is not None:
            self._member.subscribe(self._subscription)
            return
        c = self.config
        self._member = GroupMember(
            self.cluster.coordinator, group_id, self._subscription,
            strategy=c["partition_assignment_strategy"], instance_id=c["group_instance_id"],
            client_id=c["client_id"], session_timeout_ms=c["session_timeout_ms"],
            heartbeat_interval_ms=c["heartbeat_interval_ms"], max_poll_interval_ms=c["max_poll_interval_ms"],
            on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)

    def _leave_group(self) -> None:
        if self._member is not None:
            self._member.close()
            self._member = None

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        if self._member is not None:
            self._set_assignment(self._member.assignment())
        self._callbacks.assigned(partitions)

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        """Before giving them up: commit what the offset store has of them (with auto-commit on), tell the app."""
        if self.config["enable_auto_commit"]:
            positions = self._store.committable(self._consumed_positions())
            mine = {tp: positions[tp] for tp in partitions if tp in positions}
            if mine:
                self._try_commit(mine)
        self._callbacks.revoked(partitions)
        self._set_assignment([tp for tp in self._assignment if tp not in partitions])

    def _lost(self, partitions: list[TopicPartition]) -> None:
        self._callbacks.lost(partitions)
        self._set_assignment([tp for tp in self._assignment if tp not in partitions])

    def group_metadata(self) -> GroupMetadata:
        """Which group generation this consumer is a member of, and as whom (e.g. to log or fence its work)."""
        if self.group_id is None:
            raise FabricError("group_metadata() needs a consumer created with group_id=...")
        member = self._member
        return GroupMetadata(self.group_id, member.generation if member else -1, member.member_id if member else "",
                             self.config["group_instance_id"])

    consumer_group_metadata = group_metadata  # confluent-kafka's name (for send_offsets_to_transaction)

    def unsubscribe(self) -> None:
        """Stop consuming: leave the group (if a member) and drop the assignment."""
        self._subscription, self._pattern = [], None
        self._leave_group()
        self._set_assignment([])

    def subscription(self) -> list[str]:
        return list(self._subscription)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these (topic, partition) pairs; replaces any subscription. A TopicPartition carrying
        an offset (confluent-kafka's TopicPartition(topic, partition, offset)) is read from that offset."""
        wanted = partition_args.partition_list(partitions, "assign()")
        for topic, p in wanted:
            info = self.cluster.coordinator.topic(topic)
            if not 0 <= p < info.partitions:
                raise UnknownPartitionError(f"topic {topic!r} has no partition {p}")
        self._subscription, self._pattern = [], None
        self._leave_group()
        self._set_assignment(wanted)
        for tp in wanted:
            if tp.offset is not None:
                self.seek(tp)

    def assignment(self) -> list[NamedPartition]:
        """The partitions this consumer reads now."""
        return named(self._assignment)

    def _set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        self._assignment = [NamedPartition(*tp) for tp in sorted(set(partitions))]
        self._paused &= set(self._assignment)  # a partition assigned again starts unpaused, as in Kafka
        self._positions = {tp: o for tp, o in self._positions.items() if tp in self._assignment}
        self._store.keep(self._assignment)
        self._buffer.drop(lambda tp: tp not in self._positions)

    # -- flow control ------------------------------------------------------------------------------
    def pause(self, *partitions: Any) -> None:
        """Stop fetching from these assigned partitions (poll returns none of their records) until resume();
        their positions stay where the application got to. Lost when a rebalance moves them. Takes
        pause(tp1, tp2) (kafka-python) or pause([tp1, tp2]) (confluent-kafka)."""
        wanted = partition_args.partitions(partitions, "pause()")
        self._check_assigned(wanted, "pause()")
        consumed = self._consumed_positions()
        for tp in wanted:
            if tp in consumed:
                self._positions[tp] = consumed[tp]  # records fetched but not handed out are fetched again later
        self._buffer.drop(lambda tp: tp in wanted)
        self._paused.update(wanted)

    def resume(self, *partitions: Any) -> None:
        """Fetch from these paused partitions again: resume(tp1, tp2) or resume([tp1, tp2])."""
        wanted = partition_args.partitions(partitions, "resume()")
        self._check_assigned(wanted, "resume()")
        self._paused.difference_update(wanted)

    def paused(self) -> set[NamedPartition]:
        """The partitions pause() stopped."""
        return set(named(self._paused))

    def _check_assigned(self, partitions: Sequence[TopicPartition], what: str) -> None:
        missing = [tp for tp in partitions if tp not in self._assignment]
        if missing:
            raise UnknownPartitionError(f"{what}: {missing} not assigned to this consumer (assigned: "
                                        f"{list(self._assignment)})")

    def _refresh_assignment(self, force: bool = False) -> None:
        self._follow_pattern()
        if self._member is not None:  # the group decides; callbacks update the assignment
            self._member.poll()
            return
        if not self._subscription or (not force and time.monotonic() - self._metadata_at < METADATA_REFRESH_S):
            return
        self._metadata_at = time.monotonic()
        tps = [(t, p) for t in self._subscription for p in range(self.cluster.coordinator.topic(t).partitions)]
        if tps != self._assignment:
            known = set(self._assignment)
            self._set_assignment(tps)
            for tp in tps:  # partitions added while we run are read from their start
                if tp not in known and not force:
                    self._positions[tp] = self._partition_state(tp).start_offset

    # -- positions ---------------------------------------------------------------------------------
    def position(self, partition: Any, *more: Any) -> Any:
        """The offset of the next record poll() will return from the partition (Kafka's position): records
        fetched ahead and still buffered here do not move it. position(tp) or position(topic, partition) answer
        the offset; position([tp, ...]) (confluent-kafka's) a dict of TopicPartitions carrying theirs."""
        if partition_args.is_list((partition, *more)):
            return with_offsets({tp: self.position(tp) for tp in partition_args.partition_list(partition,
                                                                                              "position()")})
        tp = partition_args.one((partition, *more), "position()", or_list=True)
        self._fetch_position(tp)
        return self._consumed_positions()[tp]

    def highwater(self, partition: Any, *more: Any) -> int | None:
        """The last known high watermark of an assigned partition (kafka-python's highwater: the offset the
        next record written will get), from this consumer's offset lookups and fetches; None before any."""
        tp = partition_args.one((partition, *more), "highwater()")
        self._check_assigned([tp], "highwater()")
        return self._counts.highwater.get(tp)

    def _fetch_position(self, tp: TopicPartition) -> int:
        """Where the next fetch of an assigned partition starts (past the records buffered here)."""
        if tp not in self._assignment:
            raise UnknownPartitionError(f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        if tp not in self._positions:
            self._positions[tp] = self._initial_position(tp)
        return self._positions[tp]

    def seek(self, partition: Any, offset: Any = None, *more: Any) -> None:
        """Read the partition from `offset` next: seek(tp, offset) (kafka-python), seek(TopicPartition(topic,
        partition, offset)) (confluent-kafka) or seek(topic, partition, offset); confluent-kafka's logical offsets
        too (OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED: Lookups._logical)."""
        tp, offset = partition_args.seek_target(partition, offset, more)
        self._fetch_position(tp)
        self._positions[tp] = offset if offset >= 0 else self._logical(tp, offset)
        self._buffer.drop(lambda pending: pending == tp)

    def seek_to_beginning(self, *partitions: Any) -> None:
        """Read these partitions (default: every assigned one) from their first record next."""
        for tp in partition_args.partitions(partitions, "seek_to_beginning()") or self._assignment:
            self.seek(tp, self._partition_state(tp).start_offset)

    def seek_to_end(self, *partitions: Any) -> None:
        """Read these partitions (default: every assigned one) from their end next: only records written later."""
        for tp in partition_args.partitions(partitions, "seek_to_end()") or self._assignment:
            self.seek(tp, self._partition_state(tp).end_offset)

    # -- fetching ----------------------------------------------------------------------------------
    def _fetch(self, max_bytes: int, wait_ms: int = 0) -> list[FetchedRun]:
        """One pass over the assigned partitions, round robin, from the current positions; the first partition
        of the pass may be held up to `wait_ms` by the server for records to arrive (long polling)."""
        out: list[FetchedRun] = []
        n = len(self._assignment)
        for i in range(n):
            if max_bytes <= 0:
                break
            tp = self._assignment[(self._next + i) % n]
            if tp in self._paused:
                continue
            position = self._fetch_position(tp)
            self._counts.fetches += 1
            try:
                fetched = self.cluster.fetch(tp[0], tp[1], position, max_bytes, max_wait_ms=wait_ms if i == 0 else 0,
                                             client_rack=self.config["client_rack"] or None,
                                             isolation_level=self.config["isolation_level"])
            except OffsetOutOfRangeError:
                self._positions[tp] = self._reset(tp)
                continue
            if not fetched:
                self._counts.saw_end(tp, position)  # nothing more to read: the position is the end
                continue
            for f in fetched:
                if f.batch.num_rows:  # an empty batch only moves the position past a gap
                    out.append(FetchedRun.of(tp, f.offset, f.batch, f.timestamp_type))
                    max_bytes -= out[-1].nbytes
            self._positions[tp] = fetched[-1].offset + fetched[-1].batch.num_rows
            self._counts.saw_end(tp, self._positions[tp])
        self._next = (self._next + 1) % max(n, 1)
        return out

    def _value_schema(self, topic: str) -> pa.Schema | None:
        """The topic's value schema, asked of the coordinator at most every SCHEMA_MAX_AGE_S (not on every poll:
        on fabric:// that is a network call)."""
        cached = self._schemas.get(topic)
        if cached is None or time.monotonic() - cached[0] > SCHEMA_MAX_AGE_S:
            cached = self._schemas[topic] = (time.monotonic(), self.cluster.coordinator.topic(topic).value_schema)
        return cached[1]

    def _wait(self, timeout: float, attempt: Callable[[int], list[FetchedRun]]) -> list[FetchedRun]:
        """Call `attempt(wait_ms)` until it returns records or `timeout` seconds pass. With one partition assigned
        every pass long-polls (the server answers as soon as it has records); with several, the first pass holds
        none and later ones at most IDLE_WAIT_S, so no partition's records wait long behind another's hold. A
        retriable error (the coordinator failing over, the group rebalancing) is retried after
        retry_backoff_ms while time is left, then raised.

        Every pass first takes the group member's poll step, even when the buffer answers, as Kafka's consumer runs
        its coordinator's poll on every poll(): the member counts as polling (max_poll_interval_ms), and a
        rebalance or eviction is acted on (callbacks run, buffered records of partitions it lost are dropped)
        before anything is handed out. The step sends nothing unless something is due (a join under way; a
        subscription's metadata refresh, at most every METADATA_REFRESH_S)."""
        deadline = time.monotonic() + max(timeout, 0)
        wait_ms = self._long_poll_ms(deadline) if len(self._assignment) == 1 else 0
        while True:
            try:
                self._refresh_assignment()
                result = attempt(wait_ms)
            except FabricError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    self._counts.errors += 1
                    raise
                self._counts.retries += 1
                log.info("poll: %s; retrying", exc)
                time.sleep(min(self.config["retry_backoff_ms"] / 1000, max(deadline - time.monotonic(), 0)))
                continue
            if result or time.monotonic() >= deadline:
                self._counts.handed_out(result)
                self._maybe_auto_commit()
                return result
            if not self._assignment:  # nothing to long-poll on yet (e.g. joining a group)
                time.sleep(min(IDLE_WAIT_S, max(deadline - time.monotonic(), 0)))
            wait_ms = self._long_poll_ms(deadline)

    def _long_poll_ms(self, deadline: float) -> int:
        """How long the server may hold the next pass: up to fetch_max_wait_ms with one partition assigned,
        IDLE_WAIT_S with several, never past `deadline`."""
        most = self.config["fetch_max_wait_ms"] if len(self._assignment) == 1 else int(IDLE_WAIT_S * 1000)
        left_ms = (deadline - time.monotonic()) * 1000  # (inf for poll(timeout=math.inf): capped before int())
        return most if left_ms >= most else max(int(left_ms), 0)

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> list[Record]:
        """Up to `max_records` (kafka-python's; default max_poll_records) records, waiting up to `timeout` seconds
        for the first."""
        self._check_open()
        timeout = checks.timeout(timeout, "poll() timeout")
        most = self.config["max_poll_records"] if max_records is None else \
            checks.integer(max_records, "poll() max_records", 1, checks.INT_MAX)

        def attempt(wait_ms: int) -> list[FetchedRun]:
            if not self._buffer:
                self._buffer.extend(self._fetch(self.config["fetch_max_bytes"], wait_ms))
            return self._buffer.take(most)
        return self._deserializers.apply([r for run in self._wait(timeout, attempt) for r in run.records()])

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Record]:
        """confluent-kafka's consume(): up to `num_messages` records, waiting up to `timeout` seconds (-1: as
        long as it takes) for the first."""
        most = checks.integer(num_messages, "consume() num_messages", 1, checks.INT_MAX)
        if timeout != -1:
            return self.poll(checks.timeout(timeout, "consume() timeout (or -1: as long as it takes)"), most)
        while not (records := self.poll(ITERATOR_POLL_S, most)):
            pass
        return records

    def poll_batch(self, timeout: float = 0.0, columns: list[str] | None = None) -> pa.Table:
        """The next committed records as one Arrow table (up to fetch_max_bytes), no per-record work.

        `columns` picks a subset of the output columns (e.g. typed value fields) to build."""
        self._check_open()
        timeout = checks.timeout(timeout, "poll_batch() timeout")
        if isinstance(columns, str):
            raise InvalidArgumentError(f"columns takes a list of column names; use columns=[{columns!r}]")
        value_schema = self._value_schema(self._assignment[0][0]) if self._assignment else None
        first = output_schema(value_schema, columns)  # unknown columns are refused before any record is taken
        runs = self._wait(timeout, lambda wait_ms: self._buffer.take_all()
                          or self._fetch(self.config["fetch_max_bytes"], wait_ms))
        if not runs:
            return first.empty_table()
        schemas = {topic: output_schema(self._value_schema(topic), columns) for topic in {run.tp[0] for run in runs}}
        return pa.Table.from_batches([run.output(schemas[run.tp[0]]) for run in runs])

    # -- commits -----------------------------------------------------------------------------------
    def _consumed_positions(self) -> dict[TopicPartition, int]:
        """Positions of what the application has been given (excluding records still buffered)."""
        positions = dict(self._positions)
        positions.update(self._buffer.first_offsets())
        return positions

    def commit(self, offsets: Any = None, *, asynchronous: bool = False, message: Record | None = None
               ) -> dict[NamedPartition, int] | None:
        """Commit the given next-offsets (an empty dict commits nothing), or the current positions, for this
        consumer's group: commit({tp: offset}) (kafka-python), or as confluent-kafka: commit(offsets=[
        TopicPartition(topic, partition, offset)]), commit(record) (the offset after it), asynchronous=True.
        What a commit that waited committed, by partition (None from one in the background)."""
        offsets = partition_args.commit_offsets(offsets, message)
        if asynchronous:
            self.commit_async(offsets)
            return None
        chosen, call = self._commit_call(offsets, "commit()")
        call()
        self._last_auto_commit = time.monotonic()
        return named_keys(chosen)

    def store_offsets(self, message: Record | None = None, offsets: Any = None) -> None:
        """confluent-kafka's store_offsets(record) / (offsets=[...]): what commits commit (client.offset_store)."""
        self._store.store(message, offsets, self._assignment)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: CommitCallback | None = None) -> Future[None]:
        """commit() on a background thread: returns at once with a Future (its exception a CommitFailedError
        or the commit's error); `callback(offsets, error or None)` runs when it is done (kafka-python's
        signature). Commits are sent in call order; close() waits for them."""
        chosen, call = self._commit_call(offsets, "commit_async()")
        if callback is not None and not callable(callback):
            raise InvalidArgumentError("commit_async(callback=...) must be a function of (offsets, error)")
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="fabric-commit")
        future = self._committer.submit(call)
        if callback is not None:
            sent = named_keys(chosen)
            future.add_done_callback(lambda done: callback(sent, done.exception()))
        self._last_auto_commit = time.monotonic()
        return future

    def _commit_call(self, offsets: dict[TopicPartition, int] | None, what: str
                     ) -> tuple[dict[TopicPartition, int], Callable[[], None]]:
        """What a commit of `offsets` (else the consumed positions) commits, and the call sending it with this
        member's generation, checked and ready to send."""
        if self.group_id is None:
            raise FabricError(f"{what} needs a consumer created with group_id=...")
        group, member = self.group_id, self._member
        generation, member_id = (member.generation, member.member_id) if member else (-1, "")
        offsets, notes = partition_args.split_metadata(offsets, what) if offsets is not None else (None, {})
        chosen = checks.by_partition(offsets, what, checks.offset) if offsets is not None \
            else self._store.committable(self._consumed_positions())

        def send() -> None:
            try:
                for note, some in partition_args.by_metadata(chosen, notes).items():
                    self.cluster.commit_offsets(group, some, note, generation=generation, member_id=member_id)
                    self._counts.commits += 1
            except MembershipError as exc:
                if member is None:  # a plain commit while the group has members: the error says why
                    raise
                raise CommitFailedError(
                    f"commit failed: group {group!r} rebalanced since this consumer joined generation "
                    f"{generation}, so its partitions may belong to another member now ({exc}). poll() again to "
                    "rejoin; records since the last successful commit will be delivered again") from exc
        return chosen, send

    def _try_commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit, but a stale generation only means the next owner re-reads from the last commit, and a position
        retention has overtaken (below the log start) is reset by the next fetch and committed then."""
        try:
            self.commit(offsets)
        except CommitFailedError:
            self._last_auto_commit = time.monotonic()
        except OffsetOutOfRangeError as exc:
            log.warning("auto-commit of group %s skipped: %s", self.group_id, exc)
            self._last_auto_commit = time.monotonic()

    def committed(self, partitions: Any = None, *more: Any) -> Any:
        """The group's committed next-offsets: committed(tp) or committed(topic, partition) answer one partition's,
        or None (kafka-python's); committed([tp, ...]) or committed() (the assignment) a dict of them, whose
        TopicPartition keys carry their offsets too (confluent-kafka's list of TopicPartition)."""
        if self.group_id is None:
            raise FabricError("committed() needs a consumer created with group_id=...")
        given = (partitions, *more)
        one = partitions is not None and not partition_args.is_list(given)
        wanted: Sequence[TopicPartition]
        if one:
            wanted = [partition_args.one(given, "committed()", or_list=True)]
        else:
            wanted = partition_args.partition_list(partitions, "committed()") if partitions is not None \
                else self._assignment
        stored = self.cluster.coordinator.committed(self.group_id)
        offsets = {tp: (stored[tp].offset if tp in stored else None) for tp in wanted}
        return offsets[wanted[0]] if one else with_offsets(offsets, {tp: c.metadata for tp, c in stored.items()})

    def _maybe_auto_commit(self) -> None:
        if (self.group_id is not None and self.config["enable_auto_commit"] and self._positions
                and time.monotonic() - self._last_auto_commit >= self.config["auto_commit_interval_ms"] / 1000):
            self._try_commit()

    def _check_open(self) -> None:
        if self._closed:
            raise FabricError("the consumer is closed; create a new one")

    def close(self, autocommit: bool = True) -> None:
        """Commit (with auto-commit on, unless `autocommit=False`, kafka-python's) and stop; a group member
        commits as it revokes, then leaves."""
        if not autocommit:
            self.config["enable_auto_commit"] = False  # (the member's revocation as it leaves commits by it too)
        if self._committer is not None:
            self._committer.shutdown(wait=True)  # the async commits sent so far land first
        if not self._closed and self.group_id is not None and self.config["enable_auto_commit"] \
                and self._positions and self._member is None:
            self.commit()
        self._leave_group()
        self._closed = True

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __iter__(self) -> Iterator[Record]:
        """Iterate records, as kafka-python's consumer does: until closed, or until consumer_timeout_ms pass
        without a record (default: forever)."""
        idle_s = self.config["consumer_timeout_ms"] / 1000
        deadline = time.monotonic() + idle_s
        while not self._closed and (left := deadline - time.monotonic()) > 0:
            for record in self.poll(min(left, ITERATOR_POLL_S)):
                yield record
                deadline = time.monotonic() + idle_s

    def metrics(self) -> Metrics:
        """What this consumer did, as kafka-python's metrics(): {group: {metric name: value}}, with Kafka's
        names (records-consumed-total, bytes-consumed-total, records-lag per partition, ...)."""
        positions = self._consumed_positions()
        return self._counts.report({tp: positions[tp] for tp in self._assignment if tp in positions},
                                   len(self._assignment))

