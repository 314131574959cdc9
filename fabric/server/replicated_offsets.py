"""The offsets topic replicated on the data nodes (Kafka's `__consumer_offsets`): the OffsetsLog of a coordinator
instance in a cluster, and the loader that serves the partitions the instance is given.

`ReplicatedOffsetsLog` keeps the records in a replicated, compacted internal topic on the nodes, created by the
controller at the first group request (as Kafka creates it at the first FindCoordinator: over the nodes alive then,
not at start, when only the first few nodes of a cluster may have registered; the loader is woken to create and
load it, and the request answered CoordinatorUnavailableError, retriable, meanwhile) with
`offsets.topic.replication.factor` replicas, min.insync.replicas min(2, that) and
segments of offsets.topic.segment.bytes, which each node compacts (COORDINATOR_NOT_AVAILABLE, a
CoordinatorUnavailableError, while fewer nodes are alive). Each partition has one writer, the instance serving
it (fabric.server.offsets_ownership): each commit goes to the leader of the group's partition with acks=all, as an
idempotent producer whose id is fixed (OFFSETS_PRODUCER_ID, outside every block of ids init_producer_id hands out:
the nodes take it only from a principal with cluster_action, fabric.server.producer_owners) and whose epoch is the
one the instance was given the partition under. So a deposed owner's late append is refused by the nodes themselves
(InvalidProducerEpochError, answered as CoordinatorUnavailableError: the client retries at the partition's
instance), and a retry after a lost answer or a leader change is recognised by its sequence instead of being
written twice. An append whose outcome is unknown (the leader did not answer in time) is sent again, with its
sequence, before the partition's next one. Commits that reach a partition while its append is in flight go
together in its next append (group commit, fabric.server.group_commit): concurrent commits of groups sharing a
partition share one acks=all round trip.

`OffsetsLoader` serves what it is given (partition -> epoch): it takes those partitions (OffsetsTopic.
take_leadership: the leadership record with their producer epoch on each, which fences the previous owner, then
each read to its high watermark, then, when it takes the whole topic, the offsets of an earlier local topic
migrated once, then the offsets committed producer transactions of their groups left pending applied:
coordinator.transaction_offsets), retried in the background until it succeeds; their offsets are served only
after. What it is no longer given stops being served at once.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from typing import Any, Callable, Iterator, Sequence

import msgspec
import pyarrow as pa

from fabric.common.errors import (
    CoordinatorUnavailableError,
    FabricError,
    InvalidProducerEpochError,
    InvalidTopicError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from fabric.common.protocol import messages, payloads
from fabric.common.protocol.loop_connection import LoopConnection
from fabric.common.types import CommittedOffset, PartitionState, TopicPartition
from fabric.coordinator.commit_batch import Queued
from fabric.coordinator.offsets_records import (
    CONFIG,
    GROUPS,
    LEADER_KEY,
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    SEGMENT_BYTES,
    VALUE,
    encoded,
    migrated_key,
)
from fabric.coordinator.offsets_topic import OffsetsTopic
from fabric.coordinator.producer_ids import OFFSETS_PRODUCER_ID
from fabric.coordinator.topic_group_store import TopicGroupStore
from fabric.coordinator.transaction_offsets import TransactionOffsets
from fabric.server.connection import ENV_CA, Connection, RemoteOptions
from fabric.server.controller_driver import ControllerDriver
from fabric.server.group_commit import GroupCommit
from fabric.server.leader_calls import LeaderCalls
from fabric.server.offsets_on_loop import LoopAppends
from fabric.server.partition_ops import SHORT_MAX
from fabric.storage.batch_encoding import Encoded
from fabric.storage.producer_state import SEQUENCE_MAX

log = logging.getLogger(__name__)
FETCH_BYTES = 4 << 20


class NotDemandedError(CoordinatorUnavailableError):
    """The offsets topic does not exist and no group request has asked for it yet (the nodes may still be
    registering): a new cluster's normal state, which the loader waits out quietly until the first group request
    wakes it."""


class ReplicatedOffsetsLog:
    """The offsets topic's partitions on the data nodes, written by this instance while it runs `controller`
    (whose store has the topic's metadata), with `connection`'s token and TLS (fabric.server.leader_calls);
    `timeout_s` bounds one append's retries."""

    shared = False

    def __init__(self, controller: ControllerDriver, replication_factor: int, connection: Connection,
                 segment_bytes: int = SEGMENT_BYTES, timeout_s: float = 30.0) -> None:
        self.store, self.controller = controller.store, controller
        self.leaders = LeaderCalls(controller, connection, timeout_s)
        self.replication_factor, self.segment_bytes, self.timeout_s = replication_factor, segment_bytes, timeout_s
        self.partitions = OFFSETS_PARTITIONS
        self._epochs = [-1] * self.partitions  # the producer epoch of this instance's appends, per partition
        self._sequences = [0] * self.partitions
        # per partition: an append whose outcome is unknown (sequence, rows, what to tell once written)
        self._unresolved: list[tuple[int, Encoded, Callable[[int], None]] | None] = [None] * self.partitions
        self._locks = [threading.Lock() for _ in range(self.partitions)]
        self._commits = [GroupCommit(lock, functools.partial(self.write, p)) for p, lock in enumerate(self._locks)]
        self._on_loop = LoopAppends(self)
        self._markers = {migrated_key("offsets"), migrated_key(GROUPS)}
        self._migrated: set[bytes] = set()  # the migration records read in partition 0
        self._demanded = False  # a group request came: the topic may be created
        self.on_demand: Callable[[], None] = lambda: None  # the loader's wake-up (OffsetsLoader.wake)

    # -- the topic and its leaders ------------------------------------------------------------------------
    def demand(self) -> None:
        """A group request found the offsets it needs still loading: the topic may now be created, over the
        nodes alive now; the loader is woken to do it."""
        if not self._demanded:
            self._demanded = True
            self.on_demand()

    def exists(self) -> bool:
        """Whether the controller's store has the topic (until the first group request it is not created)."""
        try:
            self.store.topic(OFFSETS_TOPIC)
        except UnknownTopicError:
            return False
        return True

    def _ensure_topic(self) -> None:
        """Create the topic through the controller unless it exists, once a group request asked for it (demand);
        COORDINATOR_NOT_AVAILABLE until then, and while fewer nodes are alive than its replication factor."""
        try:
            info = self.store.topic(OFFSETS_TOPIC)
        except UnknownTopicError:
            pass
        else:
            if info.partitions != self.partitions:
                raise InvalidTopicError(
                    f"topic {OFFSETS_TOPIC} has {info.partitions} partitions, {self.partitions} expected (the group "
                    "-> partition map depends on it); it was not created by a coordinator: delete it")
            return
        alive = sum(n.alive for n in self.controller.describe_cluster().nodes)
        shortfall = (f"the {OFFSETS_TOPIC} topic needs {self.replication_factor} live data nodes "
                     f"(offsets.topic.replication.factor) and {alive} are alive; group offsets are available once "
                     "enough nodes have registered (start more, or lower offsets.topic.replication.factor)"
                     ) if alive < self.replication_factor else ""
        if not self._demanded:  # (the shortfall named first: what a group request that comes now must hear)
            raise NotDemandedError(shortfall or f"the {OFFSETS_TOPIC} topic does not exist yet: the first group "
                                   "request has it created, over the data nodes alive then; retry")
        if shortfall:
            raise CoordinatorUnavailableError(shortfall)
        # compacted by each node segment by segment (docs/compaction.md): its closed segments are what is cleaned
        config = {**CONFIG, "min.insync.replicas": str(min(2, self.replication_factor)),
                  "segment.bytes": str(self.segment_bytes)}
        try:
            self.controller.create_topic(OFFSETS_TOPIC, self.partitions, self.replication_factor, config, VALUE)
            log.info("created the %s topic on the data nodes: %d partitions, replication factor %d", OFFSETS_TOPIC,
                     self.partitions, self.replication_factor)
        except TopicExistsError:
            pass  # created meanwhile
        self.leaders.forget()

    def _at_leader(self, partition: int, kind: str, args: dict[str, Any], payload: payloads.Payload = b""
                   ) -> tuple[msgspec.Raw, payloads.Payload]:
        """Request `kind` of the partition at its leader (LeaderCalls): its result and payload; a fenced producer
        epoch is CoordinatorUnavailableError (this instance was deposed), as is a partition not placed yet."""
        try:
            return self.leaders.call(OFFSETS_TOPIC, partition, kind,
                                     {"topic": OFFSETS_TOPIC, "partition": partition, **args}, payload)
        except (InvalidProducerEpochError, UnknownPartitionError) as exc:
            fenced = self.fenced(exc, partition)
            assert fenced is not None
            raise fenced from None

    def fenced(self, exc: BaseException, partition: int) -> CoordinatorUnavailableError | None:
        """What an append's failure `exc` tells the caller if it says this instance may not write the partition
        now (its producer epoch fenced: deposed; the partition not placed yet); None for any other failure."""
        if isinstance(exc, InvalidProducerEpochError):
            return CoordinatorUnavailableError(
                f"this coordinator instance (epoch {self._epochs[partition]}) was deposed: a newer one took "
                f"{OFFSETS_TOPIC}-{partition}; nothing was written, retry at the instance serving it")
        if isinstance(exc, UnknownPartitionError):
            return CoordinatorUnavailableError(f"{OFFSETS_TOPIC}-{partition} is not placed on the nodes yet; retry")
        return None

    # -- the OffsetsLog --------------------------------------------------------------------------------------
    def read(self, partition: int, start: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(offset, batch) of the partition from `start` to its high watermark, read at its leader."""
        result, _ = self._at_leader(partition, "partition_state", {})
        state: PartitionState = messages.decode_result(result, PartitionState)
        position, end = max(start, state.start_offset), state.end_offset
        while position < end:
            fetched = payloads.fetched_of(*self._at_leader(partition, "fetch", {
                "offset": position, "max_bytes": FETCH_BYTES, "end_offset": end}))
            if not fetched:
                raise CoordinatorUnavailableError(f"{OFFSETS_TOPIC}-{partition} returned nothing at offset {position} "
                                                  f"below its high watermark {end}; retry")
            for run in fetched:
                if partition == 0:
                    self._migrated.update(k for k in run.batch.column(1).to_pylist() if k in self._markers)
                yield run.offset, run.batch
                position = run.offset + run.batch.num_rows

    def _produce_args(self, partition: int, sequence: int) -> dict[str, Any]:
        """The arguments of an acks=all append to the partition as sequence `sequence` of the offsets producer."""
        return {"codec": "none", "acks": "all", "timeout_ms": int(self.timeout_s * 1000),
                "producer_id": OFFSETS_PRODUCER_ID, "producer_epoch": self._epochs[partition],
                "base_sequence": sequence}

    def _send(self, partition: int, sequence: int, rows: Encoded) -> int:
        """Append `rows` at the leader with acks=all as sequence `sequence` of the offsets producer; its offset."""
        result, _ = self._at_leader(partition, "produce", self._produce_args(partition, sequence),
                                    payloads.message_stream(rows.schema, [rows.payload]))
        offset: int = messages.decode_result(result, int)
        return offset

    def resolve(self, partition: int) -> None:
        """Send again the partition's append whose outcome is unknown, if any, with its sequence (lock held), and
        tell its callers where it landed; it stays unknown if this fails."""
        unresolved = self._unresolved[partition]
        if unresolved is not None:
            sequence, earlier, told = unresolved
            told(self._send(partition, sequence, earlier))
            self._unresolved[partition] = None
            self.sent(partition, sequence, earlier.num_rows)

    def write(self, partition: int, rows: Encoded, written: Callable[[int], None]) -> None:
        """Send `rows` as the partition's next sequence (lock held), after an earlier append whose outcome was
        unknown; kept as unknown again if this fails."""
        self.resolve(partition)
        sequence = self._sequences[partition]
        try:
            offset = self._send(partition, sequence, rows)
        except CoordinatorUnavailableError:
            raise  # deposed or not placed: nothing was written
        except FabricError:
            self.unresolved(partition, sequence, rows, written)
            raise
        self.sent(partition, sequence, rows.num_rows)
        written(offset)

    def sent(self, partition: int, sequence: int, count: int) -> None:
        """The append of `count` rows as `sequence` was acknowledged (lock held): the next sequence follows it."""
        self._sequences[partition] = (sequence + count) % (SEQUENCE_MAX + 1)

    def unresolved(self, partition: int, sequence: int, rows: Encoded, told: Callable[[int], None]) -> None:
        """The append of `rows` as `sequence` failed with its outcome unknown (lock held): it is sent again, with
        that sequence, before the partition's next append (`resolve`); `told` hears where it landed."""
        self._unresolved[partition] = (sequence, rows, told)

    def append(self, partition: int, rows: Encoded, validate: Callable[[], None],
               written: Callable[[int], None]) -> None:
        """validate() and append `rows` under the partition's lock; appends that arrive meanwhile go together in
        the next one (fabric.server.group_commit), each caller answered once its rows are acknowledged."""
        self._commits[partition].submit(rows, validate, written)

    def write_queued(self, partition: int, queued: list[Queued]) -> None:
        """On a server's event loop: append the rows of `queued` (coordinator.commit_batch) in order, sent from the
        loop (fabric.server.offsets_on_loop); each caller's `done` is settled once its rows are acknowledged."""
        self._on_loop.write(partition, queued)

    # -- for the appends sent from the loop (fabric.server.offsets_on_loop) ---------------------------------
    def lock(self, partition: int) -> threading.Lock:
        """The partition's write lock: every append holds it, from its check to its acknowledgement."""
        return self._locks[partition]

    def route_on_loop(self, partition: int) -> tuple[LoopConnection, dict[str, Any], int] | None:
        """The running loop's connection to the partition's leader, the arguments of its next append and that
        append's sequence (lock held), with nothing asked of anyone; None while an earlier append's outcome is
        unknown or the leader or the connection is not known (LeaderCalls.on_loop)."""
        if self._unresolved[partition] is not None:
            return None
        found = self.leaders.on_loop(OFFSETS_TOPIC, partition)
        if found is None:
            return None
        connection, quoted = found
        sequence = self._sequences[partition]
        return connection, {"topic": OFFSETS_TOPIC, "partition": partition,
                            **self._produce_args(partition, sequence), **quoted}, sequence

    def appends(self) -> dict[str, int]:
        """How many commit appends the loop sent itself (`loop`) and handed to a worker (`worker`), since start."""
        return dict(self._on_loop.counts)

    @staticmethod
    def name(partition: int) -> str:
        return f"{OFFSETS_TOPIC}-{partition}"

    def take_leadership(self, epoch: int, partitions: Sequence[int]) -> None:
        """Create the topic if needed, then append the leadership record with producer epoch `epoch` (sequence
        0) to each of `partitions`: the nodes refuse older epochs' appends to them from then on."""
        if not 0 <= epoch <= SHORT_MAX:
            raise CoordinatorUnavailableError(f"epoch {epoch} does not fit a producer epoch (0 to {SHORT_MAX}); the "
                                              f"{OFFSETS_TOPIC} topic cannot be fenced with it")
        self._ensure_topic()
        if 0 in partitions:
            self._migrated = set()  # read again with partition 0
        for partition in partitions:
            with self._locks[partition]:
                self._epochs[partition] = epoch
                self._sequences[partition], self._unresolved[partition] = 0, None
                self.write(partition, encoded([(LEADER_KEY, None)], time.time_ns() // 1000), lambda offset: None)

    def migrated(self) -> bool:
        """Whether partition 0, as this instance last loaded it, says the earlier stores' offsets and groups were
        moved in."""
        return self._markers <= self._migrated

    @contextlib.contextmanager
    def migrating(self, what: str = "offsets") -> Iterator[bool]:
        """Whether an earlier store's `what` (the local offsets, or GROUPS: the store's group states) are still to
        be moved in: a migration record in partition 0 says they were (read when the topic was loaded); appended
        once the block ends without error."""
        key = migrated_key(what)
        pending = key not in self._migrated
        yield pending
        if pending:
            with self._locks[0]:
                self.write(0, encoded([(key, None)], time.time_ns() // 1000), lambda offset: None)
            self._migrated.add(key)


class OffsetsLoader:
    """Loads and serves the partitions of `topic` this instance is given (`want`: partition -> epoch) in a
    background thread that retries until they are loaded, and stops serving those it loses at once; `on_loaded`
    is told each time a load succeeded. Standalone, the controller gives it every partition under its epoch
    (`started` / `stopped`); with ZooKeeper, fabric.server.offsets_ownership does."""

    def __init__(self, topic: OffsetsTopic, on_loaded: Callable[[], None] = lambda: None) -> None:
        self.topic, self.on_loaded = topic, on_loaded
        self._wanted: dict[int, int] = {}
        self._loaded: dict[int, int] = {}
        self._changed = threading.Condition()
        self._woken = False  # wake() was called since the last failed load
        self._thread = threading.Thread(target=self._run, name="offsets-loader", daemon=True)
        self._thread.start()

    def started(self, epoch: int) -> None:
        self.want(dict.fromkeys(range(self.topic.partitions), epoch))

    def stopped(self) -> None:
        self.want({})

    def want(self, wanted: dict[int, int]) -> None:
        """Serve exactly `wanted`'s partitions, each under its epoch: those no longer wanted (or wanted under
        another epoch) stop being served now, the others once loaded."""
        with self._changed:
            self._wanted = dict(wanted)
            lost = [p for p, epoch in self._loaded.items() if self._wanted.get(p) != epoch]
            for p in lost:
                del self._loaded[p]
            if lost:
                self.topic.resign(lost)
            self._changed.notify_all()

    def wake(self) -> None:
        """Try a failed load again now, not after its backoff (a group request asked for the topic)."""
        with self._changed:
            self._woken = True
            self._changed.notify_all()

    def _missing(self) -> dict[int, list[int]]:
        """The wanted partitions not loaded yet, by epoch (lock held)."""
        by_epoch: dict[int, list[int]] = {}
        for p, epoch in sorted(self._wanted.items()):
            if self._loaded.get(p) != epoch:
                by_epoch.setdefault(epoch, []).append(p)
        return by_epoch

    def _run(self) -> None:
        failure, delay = "", 0.1
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._missing()))
                epoch, partitions = min(self._missing().items())
            try:
                self.topic.take_leadership(epoch, partitions)
            except Exception as exc:  # noqa: BLE001 (the loader must survive; it retries)
                waiting = isinstance(exc, NotDemandedError)  # (not a failure: until then it looks every 2 s)
                if str(exc) != failure:
                    log.log(logging.INFO if waiting else logging.WARNING, "loading the group offsets of %d "
                            "partition(s) (epoch %d) %s: %s", len(partitions), epoch,
                            "waits for the first group request" if waiting else "failed, retrying", exc)
                failure = str(exc)
                with self._changed:
                    woken = self._changed.wait_for(lambda: self._woken, 2.0 if waiting else delay)
                    self._woken = False
                delay = 0.1 if woken else min(delay * 2, 2.0)  # (woken: the next backoff starts short again)
                continue
            failure, delay = "", 0.1
            with self._changed:
                kept = [p for p in partitions if self._wanted.get(p) == epoch]
                self._loaded.update(dict.fromkeys(kept, epoch))
                dropped = [p for p in partitions if p not in kept]  # given away while they loaded
                if dropped:
                    self.topic.resign(dropped)
            self.on_loaded()


def node_connection(tls: bool, token: str | None) -> Connection:
    """The options of calls to the data nodes (fabric.server.peer_calls), with the instance's own `token`
    (connection.server_token: it needs write on the offsets topic) and the CA ($FABRIC_TLS_CA) nodes use towards
    each other; TLS when the instance itself serves TLS."""
    return Connection(RemoteOptions((), token, tls,  # no coordinator addresses: only client(node address) is used
                                    os.environ.get(ENV_CA) or None, 30.0))


def install(store: TransactionOffsets, controller: ControllerDriver, replication_factor: int, tls: bool,
            token: str | None, segment_bytes: int = SEGMENT_BYTES) -> OffsetsLoader:
    """Keep `store`'s group offsets and group states in the replicated offsets topic from now on (created with
    `segment_bytes` segments), served where its loader is told to (fabric.server.offsets_ownership.share_out); the
    offsets of the store's local topic (and through it, of older stores) and the group states its own group store
    kept are migrated into it once."""
    local = store.offsets_topic
    def legacy() -> Iterator[tuple[str, TopicPartition, CommittedOffset]]:
        for group in local.groups():
            for tp, committed in local.committed(group).items():
                yield group, tp, committed
    replicated = ReplicatedOffsetsLog(controller, replication_factor, node_connection(tls, token), segment_bytes)
    topic = OffsetsTopic(replicated, legacy, roll_forward=store.roll_forward_offsets)
    store.use_offsets_topic(topic)
    store.use_group_store(TopicGroupStore(topic, store.group_store))  # loaded with the offsets, migrated once
    loader = OffsetsLoader(topic)
    replicated.on_demand = loader.wake
    return loader
