"""The one interface clients use to reach storage and the coordinator.

Implementations: `fabric.client.embedded.EmbeddedCluster` (a local directory, in-process) and
`fabric.client.remote.RemoteCluster` (the coordinator service, over Arrow Flight). Producers, consumers, the
CLI and the Spark sources and sinks only ever call this.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Callable, ContextManager, Mapping, Sequence

import pyarrow as pa

from fabric.common.errors import FabricError, InvalidConfigError
from fabric.common.records import TIMESTAMP_TYPES
from fabric.common.types import (
    ClusterDescription,
    Fetched,
    LeaderAndIsr,
    NodeInfo,
    OpenTransaction,
    PartitionRegistration,
    PartitionState,
    ProducerBatch,
    ProducerIdentity,
    ProducerState,
    TopicInfo,
    TopicPartition,
    TopicRecovery,
    TransactionalOffsets,
)
from fabric.coordinator.interface import Coordinator
from fabric.storage import frame
from fabric.storage.batch_encoding import Rows
from fabric.storage.cleaner import CleanReport
from fabric.storage.encoder import FrameEncoder as FrameEncoder  # part of this interface
from fabric.storage.lock import waiting_until


class PendingAppend:
    """An append whose answer is awaited: `wait()` gives the first row's offset (or raises the append's error),
    once; `cancel()` drops an answer nobody will wait for. This one makes the append only when waited on."""

    def __init__(self, make: Callable[[], int], cancel: Callable[[], None] = lambda: None) -> None:
        self.wait, self.cancel = make, cancel

    @classmethod
    def failed(cls, error: BaseException) -> PendingAppend:
        """An append that could not be started: waiting raises `error`."""
        def fail() -> int:
            raise error
        return cls(fail)


class Cluster(ABC):
    """Storage plus coordinator, as a client sees them."""

    coordinator: Coordinator
    url: str
    concurrent_appends = False  # whether appends to several partitions gain from being in flight together
    pipelined_appends = False  # whether start_append sends an append before its answer is waited for
    appends_in_process = False  # whether append writes local files in this process (the partition locks its own)

    @abstractmethod
    def create_topic(self, name: str, partitions: int, config: Mapping[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        """Register the topic and create its partitions."""

    def create_replicated_topic(self, name: str, partitions: int, replication_factor: int,
                                config: Mapping[str, str], value_schema: pa.Schema | None) -> TopicInfo:
        """Create a topic whose partitions the controller places on data nodes, `replication_factor` replicas
        each; only a cluster with data nodes has them (this refuses with the fix)."""
        raise InvalidConfigError(
            f"a replication factor needs a cluster with data nodes (fabric://coordinator:port with `fabric node "
            f"start` nodes); {type(self).__name__} {self.url!r} keeps each partition in one directory: create the "
            "topic without replication_factor")

    def nodes(self) -> list[NodeInfo]:
        """The data nodes with their liveness (none outside a cluster with data nodes)."""
        return []

    def describe_cluster(self, refresh: bool = False) -> ClusterDescription:
        """The controller's view of the nodes and replicated partitions (empty outside a cluster with nodes)."""
        return ClusterDescription(0, (), {})

    def elect_leaders(self, election: str, partitions: Sequence[TopicPartition] = ()) -> dict[TopicPartition,
                                                                                              LeaderAndIsr]:
        """Ask the controller for a preferred or unclean leader election (only a cluster with data nodes has
        one; this refuses with the fix)."""
        raise InvalidConfigError(f"leader elections need a cluster with data nodes; {type(self).__name__} "
                                 f"{self.url!r} has one replica per partition")

    def reassign_partition(self, topic: str, partition: int, replicas: Sequence[int]) -> PartitionRegistration:
        """Ask the controller to move a replicated partition to `replicas` (only a cluster with data nodes has
        them; this refuses with the fix)."""
        raise InvalidConfigError(f"reassigning replicas needs a cluster with data nodes; {type(self).__name__} "
                                 f"{self.url!r} keeps each partition in one directory")

    def describe_partition(self, topic: str, partition: int) -> PartitionState:
        """partition_state() for describing: an offline replicated partition is described (leader None, offsets
        -1) instead of refused."""
        return self.partition_state(topic, partition)

    @abstractmethod
    def delete_topic(self, name: str) -> None:
        """Remove the topic's metadata, data and group offsets."""

    @abstractmethod
    def create_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow the topic to `total` partitions."""

    @abstractmethod
    def recover_topics(self, names: Sequence[str] | None = None) -> list[TopicRecovery]:
        """Register topic directories the metadata does not know (lost metadata) from their data; configs are
        not in the data, so recovered topics get the defaults. Returns what was done with each directory."""

    @abstractmethod
    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        """Commit a group's next offsets, each checked against its partition's [log start, log end]; the
        generation and member id fence a group member's commit as Coordinator.commit_offsets does."""

    @abstractmethod
    def append(self, topic: str, partition: int, rows: Rows, codec: str = "none", acks: str = "all",
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> int:
        """Append stored rows (or their message, as a maker in this process laid it out) to a partition; returns
        the first row's offset. `acks` ("0", "1", "all") says when
        a replicated partition's leader answers: after its own append, or once the in-sync replicas have it. An
        idempotent producer (producer_id from init_producer_id, and the partition's sequence of the first row)
        is not written twice by a retry: the retry answers the offset of the first write."""

    def start_append(self, topic: str, partition: int, rows: pa.RecordBatch, codec: str = "none",
                     acks: str = "all", producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1
                     ) -> PendingAppend:
        """`append`, sent now where the cluster has `pipelined_appends` (appends of one partition started one after
        another reach its leader, and are written, in that order) and answered through the PendingAppend; by
        default made when the PendingAppend is waited on."""
        return PendingAppend(lambda: self.append(topic, partition, rows, codec, acks, producer_id, producer_epoch,
                                                 base_sequence))

    @abstractmethod
    def init_producer_id(self) -> ProducerIdentity:
        """A new idempotent producer's id, unique in the fabric, and its epoch."""

    @abstractmethod
    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int,
              end_offset: int | None = None, max_wait_ms: int = 0, client_rack: str | None = None,
              isolation_level: str = "read_committed") -> list[Fetched]:
        """Committed rows from `offset` (at least one batch if any), up to ~max_bytes, below end_offset; at the
        end of the partition, the server holds the fetch up to `max_wait_ms` for records to arrive. A reader in
        `client_rack` reads a replicated partition from an in-sync replica in its rack, if there is one.
        read_committed (Kafka's isolation.level) reads a replicated partition below its last stable offset and
        skips aborted transactions; read_uncommitted reads to the high watermark. Offsets a reader does not get
        (markers, aborted records) are gaps: the last batch may be empty, at the offset to read from next."""

    @abstractmethod
    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """Log start/end offsets, segment count and bytes of one partition."""

    @abstractmethod
    def offset_for_time(self, topic: str, partition: int, timestamp_us: int) -> int | None:
        """Earliest offset with timestamp >= timestamp_us, or None if there is none."""

    @abstractmethod
    def offset_after_records(self, topic: str, partition: int, offset: int, count: int,
                             end_offset: int | None = None, isolation_level: str = "read_committed") -> int:
        """The offset after the first `count` records a fetch from `offset` would return (with `isolation_level`),
        below `end_offset` (default: the end a fetch reads to), or that end if there are fewer: compaction's gaps,
        markers and aborted records take offsets but are not counted. How the Spark source makes
        maxOffsetsPerTrigger count real records."""

    @abstractmethod
    def enforce_retention(self, topic: str) -> int:
        """Apply retention.ms / retention.bytes now; returns the number of segments deleted."""

    @abstractmethod
    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Kafka's DeleteRecords: move the partition's log start offset up to `before_offset` (-1: the high
        watermark), deleting the records below it; returns the new log start offset (the low watermark)."""

    @abstractmethod
    def compact_topic(self, topic: str) -> list[CleanReport]:
        """Roll every partition's active segment and compact everything cleanable now; a report per partition.
        InvalidConfigError for a topic whose cleanup.policy does not compact."""

    @abstractmethod
    def publish(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                codec: str = "none") -> bool:
        """Append to several partitions atomically under transaction id `txn`, at most once.

        Readers see all of it or none of it; returns False (and writes nothing) if `txn` already
        committed, which is how a replayed Spark batch is skipped."""

    def publish_transaction(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.RecordBatch]],
                            codec: str = "none", offsets: TransactionalOffsets | None = None,
                            timeout_ms: int = 60_000) -> dict[TopicPartition, list[int]] | None:
        """A producer transaction's commit: publish() of `parts` plus, with `offsets`, the group's offsets, all
        visible together or not at all; the base offset of each batch of each partition, or None (nothing
        written) if `txn` had committed already (another producer with the same transactional id: this one is
        fenced). `timeout_ms`: its transaction.timeout.ms where it runs on partition leaders (a publish has none:
        it is atomic)."""
        raise InvalidConfigError(f"producer transactions need an embedded fabric (file:///dir) or a coordinator "
                                 f"service; {type(self).__name__} {self.url!r} has none")

    def frame_encoder(self, topic: str, codec: str = "none") -> FrameEncoder:
        """An encoder of `topic`'s stored rows as sealed frames for publish_frames / publish_files: the Spark
        sink's tasks encode once, and the driver appends the bytes as they are."""
        info = self.coordinator.topic(topic)
        timestamp_type = TIMESTAMP_TYPES[info.settings["message.timestamp.type"]]
        return FrameEncoder(info.stored_schema, timestamp_type, codec)

    def publish_frames(self, txn: str, parts: Mapping[TopicPartition, Sequence[pa.Buffer]]) -> bool:
        """publish() for buffers of whole frames from a frame_encoder, laid end to end (a staged file; schema
        frames are skipped). This default decodes and re-encodes; EmbeddedCluster appends them as they are."""
        batches = {}
        for (topic, p), buffers in parts.items():
            schema = self.coordinator.topic(topic).stored_schema
            batches[(topic, p)] = [frame.decode_batch(payload, schema) for buf in buffers
                                   for header, payload in frame.split_frames(buf) if not header.is_schema]
        return self.publish(txn, batches)

    def lock_waits_within(self, seconds: float) -> ContextManager[None]:
        """Inside the block, this thread waits at most `seconds` for a lock of the fabric's files that another
        process holds (one paused by SIGSTOP holds it for good), then RequestTimedOutError naming that process.
        Only a fabric whose files this process writes (file://) takes such locks; a server's are its own."""
        return waiting_until(time.monotonic() + seconds)

    def publish_files(self, txn: str, parts: Mapping[TopicPartition, Sequence[str]]) -> bool:
        """publish_frames() for staged files (a schema frame, then frames based from 0) in a directory this
        cluster shares with the caller; EmbeddedCluster adopts large ones as segments instead of copying."""
        buffers: dict[TopicPartition, list[pa.Buffer]] = {}
        for key, paths in parts.items():
            for path in paths:
                with pa.memory_map(path, "r") as mapped:
                    buffers.setdefault(key, []).append(mapped.read_buffer())
        return self.publish_frames(txn, buffers)

    def replicated(self, topic: str) -> bool:
        """True if the topic's partitions are replicated by data nodes (so it takes transactions, not publish)."""
        return False

    def transactional_append(self, topic: str, partition: int, rows: pa.RecordBatch, producer: ProducerBatch,
                             transactional_id: str, codec: str = "none") -> int:
        """Append stored rows as part of `producer`'s transaction of `transactional_id` on the partition (Kafka's
        transactional produce; the producer joined the transaction with the partition first, which the leader
        verifies): invisible to read_committed readers until write_markers ends it; a retry is not written
        twice. Only replicated partitions take transactions; elsewhere this refuses with the fix."""
        raise InvalidConfigError(f"transactions need a replicated topic on a cluster with data nodes; "
                                 f"{type(self).__name__} {self.url!r} publishes whole batches instead (publish)")

    def write_markers(self, topic: str, partition: int, transactional_id: str,
                      commit: Sequence[tuple[int, int]], abort: Sequence[tuple[int, int]]) -> None:
        """End the transactions of (producer id, epoch) writers on a replicated partition, committed or aborted
        (Kafka's WriteTxnMarkers), once the coordinator decided (TransactionRecord). Idempotent."""
        raise self._no_transactions()

    def describe_producers(self, topic: str, partition: int) -> list[ProducerState]:
        """The producers of a replicated partition and their open transactions, at its leader (Kafka's
        DescribeProducers): those with a transaction open first, oldest first, then the others, the last to write
        first; elsewhere this refuses with the fix."""
        raise self._no_transactions()

    def abort_open_transaction(self, topic: str, partition: int, start_offset: int) -> OpenTransaction:
        """Abort the transaction open on a replicated partition from `start_offset`, at its leader, whatever the
        coordinator knows of it (needs cluster_action on the cluster; fabric.client.hanging_transactions checks
        that it hangs first); the transaction ended."""
        raise self._no_transactions()

    def _no_transactions(self) -> InvalidConfigError:
        return InvalidConfigError(f"transactions need a replicated topic on a cluster with data nodes; "
                                  f"{type(self).__name__} {self.url!r} has none")

    def staging_dir(self, sink_id: str, batch: str | None = None) -> str:
        """Where the Spark sink stages a batch's frames (a directory its tasks and driver share): only an
        embedded fabric has one; this refuses with the fix."""
        raise FabricError(
            f"the fabric Spark sink stages batches in the fabric's directory, which a {type(self).__name__} "
            "does not have; write to an embedded fabric URL (file:///dir), or to a cluster with data nodes, where "
            "batches are transactions on the partition leaders")

    def close(self) -> None:
        """Release files and connections."""
        self.coordinator.close()
