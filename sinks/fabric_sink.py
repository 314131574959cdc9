"""The fabric Spark sink: `df.write.format("fabric")` and exactly-once `df.writeStream.format("fabric")`.

Input columns, as Spark's Kafka sink: `value` (binary or string; a typed topic takes its value fields as
columns instead), optional `key` (binary or string), `headers` (array<struct<key: string, value: binary>>),
`partition` (int) and `timestamp`, and `topic` unless the `topic` option is set (the option wins, as
Kafka's). Options: `url` (else Spark conf spark.fabric.url, else $FABRIC_URL, else ./fabric-data), `topic`,
`transactionalId`, `compression.type` (none, lz4, zstd). Records are placed exactly as the Python
producer (and Kafka's Java producer) places them: murmur2 of the key, the `partition` column when set,
sticky partitions per task for null keys.

Guarantee (streaming): every input record appears in the output topics exactly once, whatever moment the
query is killed at (SIGKILL included, during the commit too) before it is restarted from its checkpoint,
and no reader ever sees records of a micro-batch that did not commit. How:

1. Tasks convert their rows to stored rows and append them, already encoded as on-disk frames, to staging
   files under <fabric root>/__fabric/staging/<sink id>/<batch id>/ (`sinks.staging`), one per (topic,
   partition), each laid out as a whole segment. Nothing is visible.
2. When every task succeeded, the driver publishes all the staged files with one
   `Cluster.publish_files(txn="<sink id>:<batch id>")` (`sinks.commit`): partitions are locked in a fixed
   order, frames are written past each high watermark under a pending-publish marker (a staged file of
   4 MiB or more is re-based in place and renamed into the partition as its next segment instead of being
   copied), the transaction id is committed in the coordinator, then the watermarks advance. Readers
   never read past a watermark.
   A crash before the coordinator commit leaves frames that the next writer truncates; a crash after it
   is rolled forward by the next writer. Publishing an already committed transaction id writes nothing.
   A replay may place null-key rows on other (sticky) partitions than the dead attempt did: before its
   commit, the publish truncates the dead attempt's frames in the partitions it does not write itself.
3. Spark replays the last uncommitted micro-batch with the same batch id after a restart; its transaction
   id is the same, so it is skipped if it had been published, and published once otherwise. Batch ids
   commit in order and only the latest is ever replayed, so the coordinator keeps one record per sink id
   (its highest published batch), not one per batch.

On a cluster with data nodes (fabric://, replicated topics) the same guarantee holds across machines and
node failures, by Kafka's transaction design instead of publish (sinks.transactional, docs/replication.md):
tasks stage locally, join the batch's transaction in the coordinator with the partitions they will write and
append to the partition leaders as transactions (replicated like any data, invisible to read_committed
readers); the driver's commit_transaction, naming the writers of the tasks that succeeded, is the commit
point; commit and abort markers then end each writer's transaction on each partition. Consumers and the Spark
source read committed data only, by default (isolation_level / the last stable offset).

The sink id must be the same across restarts of one query and differ between queries: it is the
`transactionalId` option when given, else "query-<id>" with the streaming query id Spark stores in the
checkpoint (read by the tasks from Spark's `sql.streaming.queryId` task property, which also carries the
batch id). A new checkpoint is a new query: its batches are never mistaken for an older query's.
Staged files are deleted after the publish and on abort. A batch `df.write` is published the same way,
atomically, in one transaction of its own.
"""
from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Iterator, Mapping

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from fabric.client.cluster import Cluster
from fabric.client.leader_transactions import abort_transaction, end_transaction
from fabric.client.url import open_cluster
from fabric.common.codecs import CODEC_NAMES
from fabric.common.config import INT_MAX
from fabric.common.errors import InvalidConfigError, SchemaMismatchError
from fabric.common.names import validate_topic
from fabric.common.records import to_storage
from fabric.sinks import transactional
from fabric.sinks.commit import checked_messages, publish_staged, remove_staged, sink_ids
from fabric.sinks.staging import StagedBatch, Stager
from fabric.spark.options import BOOTSTRAP_OPTION, get_option, refuse_kafka_options, resolve_url

SINK_OPTIONS = ("url", BOOTSTRAP_OPTION, "topic", "transactionalId", "compression.type", "transaction.timeout.ms")
SPARK_OPTIONS = ("checkpointLocation", "queryName", "path")  # Spark passes these along; the sink ignores them
KAFKA_EQUIVALENTS = {  # what to write instead of Spark Kafka's kafka.* producer configs
    "compression.type": "use option 'compression.type' instead",
    "transactional.id": "use option 'transactionalId' instead (every write is published atomically)",
    "transaction.timeout.ms": "use option 'transaction.timeout.ms' instead",
}
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class SinkConfig:
    """The validated options of one fabric write."""

    url: str
    topic: str | None
    transactional_id: str | None
    codec: str
    transaction_timeout_ms: int = transactional.TRANSACTION_TIMEOUT_MS

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> SinkConfig:
        """Check the options and the input columns on the driver, before any task runs."""
        refuse_kafka_options(options, "sink", KAFKA_EQUIVALENTS)
        known = {n.lower() for n in SINK_OPTIONS + SPARK_OPTIONS}
        unknown = sorted(k for k in options if k.lower() not in known)
        if unknown:
            raise InvalidConfigError(
                f"unknown fabric sink option(s) {unknown}; known options: {', '.join(SINK_OPTIONS)}")
        codec = (get_option(options, "compression.type") or "none").lower()
        if codec not in CODEC_NAMES:
            raise InvalidConfigError(f"invalid value {codec!r} for fabric sink option 'compression.type'; "
                                     f"use one of {', '.join(CODEC_NAMES)}")
        topic = get_option(options, "topic")
        txn_id = get_option(options, "transactionalId")
        if txn_id is not None and (not txn_id or ":" in txn_id or "/" in txn_id):
            raise InvalidConfigError(f"invalid fabric sink option transactionalId={txn_id!r}: use a non-empty "
                                     "name without ':' or '/' that stays the same across restarts")
        timeout = get_option(options, "transaction.timeout.ms")
        if timeout is not None and not (timeout.strip().isdigit() and 1 <= int(timeout) <= INT_MAX):
            raise InvalidConfigError(f"invalid value {timeout!r} for fabric sink option 'transaction.timeout.ms': use "
                                     "milliseconds from 1 up to the coordinator's transaction.max.timeout.ms (default "
                                     "900000), how long a batch on a cluster may stay uncommitted before it is aborted")
        config = cls(resolve_url(options), validate_topic(topic) if topic is not None else None, txn_id, codec,
                     transactional.TRANSACTION_TIMEOUT_MS if timeout is None else int(timeout))
        config.check_columns(schema)
        return config

    def check_columns(self, schema: StructType) -> None:
        """Fail early, naming the column, when the input cannot be written to the topic."""
        arrow = to_arrow_schema(schema, timezone="UTC")
        names = arrow.names
        if self.topic is None and "topic" not in names:
            raise SchemaMismatchError(
                f"the fabric sink needs a 'topic' column or the 'topic' option; the input has {names}")
        for name, ok, want in (("topic", pa.types.is_string, "string"),
                               ("partition", pa.types.is_integer, "an integer"),  # as Kafka's sink: a number would
                               ("timestamp", pa.types.is_timestamp,  # be taken as microseconds, not milliseconds
                                "a timestamp (for milliseconds since the epoch, timestamp_millis(ms))")):
            ignored = name == "topic" and self.topic is not None  # the option wins over the column, as Kafka's sink
            if name in names and not ignored and not ok(arrow.field(name).type):
                raise SchemaMismatchError(f"column {name!r} must be {want}, got {arrow.field(name).type}")
        if self.topic is not None:
            with contextlib.closing(open_cluster(self.url)) as cluster:
                info = cluster.coordinator.topic(self.topic)
            to_storage(arrow.empty_table(), info.value_schema, 0)


def _on_leaders(cluster: Cluster) -> bool:
    """True for a cluster with data nodes: batches are transactions on the partition leaders (sinks.transactional);
    else they are published from the fabric directory (sinks.commit)."""
    return bool(cluster.describe_cluster().nodes)


def _stage_task(config: SinkConfig, sink_id: str, batch: str, txn: str,
                iterator: Iterator[pa.RecordBatch]) -> StagedBatch:
    """Stage one task's rows (or only drain them, when `txn` was already published before a restart)."""
    with contextlib.closing(open_cluster(config.url)) as cluster:
        if cluster.coordinator.transaction_committed(txn):
            for _ in iterator:
                pass
            return StagedBatch(sink_id, batch)
        if _on_leaders(cluster):
            written = transactional.write_transaction(cluster, txn, config.topic, config.codec, iterator,
                                                      config.transaction_timeout_ms)
            return StagedBatch(sink_id, batch, writer=None if written is None else written[0])
        stager = Stager(cluster, cluster.staging_dir(sink_id, batch), config.topic, config.codec)
        for record_batch in iterator:
            stager.add(record_batch)
        return StagedBatch(sink_id, batch, stager.finish())


class FabricBatchWriter(DataSourceArrowWriter):
    """`df.write.format("fabric")`: appends the whole job atomically (one transaction of its own)."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool = False) -> None:
        if overwrite:  # as Spark's Kafka sink refuses it: appending instead would keep what the user meant to replace
            raise InvalidConfigError(
                "the fabric sink cannot overwrite a topic (a topic is an append-only log): write with "
                "mode('append'); to replace what a topic holds, delete its records first (fabric topics "
                "delete-records TOPIC --partition P --before-offset -1) or delete and re-create it")
        self.config = SinkConfig.parse(options, schema)
        self.sink_id = f"job-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedBatch:
        return _stage_task(self.config, self.sink_id, "job", self.sink_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with contextlib.closing(open_cluster(self.config.url)) as cluster:
            _commit(cluster, self.sink_id, None, messages, self.config.transaction_timeout_ms)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        with contextlib.closing(open_cluster(self.config.url)) as cluster:
            _abort(cluster, self.sink_id, None)


class FabricStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("fabric")`: each micro-batch is published exactly once (module docstring)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.config = SinkConfig.parse(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedBatch:
        context = TaskContext.get()
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        query = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        if batch is None or (query is None and self.config.transactional_id is None):
            raise InvalidConfigError("the fabric stream sink runs only inside a micro-batch streaming query "
                                     "(continuous triggers are not supported)")
        sink_id = self.config.transactional_id or f"query-{query}"
        return _stage_task(self.config, sink_id, batch, f"{sink_id}:{batch}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = sink_ids(messages)
        if any(batch != str(batchId) for _, batch in staged) or len(staged) > 1:
            raise InvalidConfigError(f"micro-batch {batchId} got commit messages of {sorted(staged)}")
        with contextlib.closing(open_cluster(self.config.url)) as cluster:
            for sink_id, batch in staged:
                _commit(cluster, sink_id, batch, messages, self.config.transaction_timeout_ms)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with contextlib.closing(open_cluster(self.config.url)) as cluster:
            for sink_id, batch in sink_ids(messages):
                _abort(cluster, sink_id, batch)


def _commit(cluster: Cluster, sink_id: str, batch: str | None, messages: list[WriterCommitMessage | None],
            timeout_ms: int) -> None:
    """Make batch `batch` of sink `sink_id` (None: a batch write, its own transaction) visible, once; on local
    files waiting at most `timeout_ms` (the sink's transaction.timeout.ms) for a lock another process holds."""
    txn = sink_id if batch is None else f"{sink_id}:{batch}"
    if _on_leaders(cluster):
        transactional.commit_transaction(cluster, txn, checked_messages(txn, messages))
        return
    with cluster.lock_waits_within(timeout_ms / 1000):  # a paused process holding a partition's lock fails the batch
        publish_staged(cluster, txn, messages)
    remove_staged(cluster, sink_id, batch)


def _abort(cluster: Cluster, sink_id: str, batch: str | None) -> None:
    """Discard what the tasks of a failed batch wrote: abort its writers' transactions, or delete staged files."""
    if _on_leaders(cluster) and batch is None:  # a batch write is never replayed: decide it, fencing late tasks
        abort_transaction(cluster, sink_id)
    elif _on_leaders(cluster):  # Spark replays the micro-batch under its id: its new writers join it then
        end_transaction(cluster, f"{sink_id}:{batch}")
    else:
        remove_staged(cluster, sink_id, batch)
