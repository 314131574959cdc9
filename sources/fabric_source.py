"""The fabric Spark source: `spark.read.format("fabric")` and `spark.readStream.format("fabric")`.

Thin on purpose: options (sources/options.py), offsets (sources/offsets.py) and planning happen on the
driver; tasks call sources/reading.py, which reads through the Cluster like every other client.

On a cluster (Spark standalone, YARN, Kubernetes) tasks run in executors of their own, so what they need travels
in the pickled reader and partitions: the URL and the rack are resolved on the driver into SourceOptions and the
ReadPlan. The driver side of a Python data source runs in a planner Python worker of the driver, which sees the
`url` option and the driver's environment ($FABRIC_URL) but no Spark conf, except through
fabric.spark.session.use_fabric_confs, which fabric.spark's sessions and jobs call (see fabric/spark/options.py).

Placement: pyspark 4.3's Python data source API gives an InputPartition no preferred locations, so Spark cannot
schedule a task next to a replica of its partition the way Spark's Kafka source prefers executors. Tasks read from
the nearest in-sync replica instead (KIP-392, fetch from follower) by their rack: option clientRack, else conf
spark.fabric.clientRack (passed on by use_fabric_confs), else $FABRIC_CLIENT_RACK on the task's executor (set it
in each worker's environment, or for all with spark.executorEnv.FABRIC_CLIENT_RACK). A task whose replica there is
behind reads from the leader, and a task that meets a leader change retries within itself (sources/reading.py)
instead of failing.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from fabric.client.cluster import Cluster
from fabric.common.errors import FabricError, OffsetOutOfRangeError
from fabric.common.records import output_schema
from fabric.sources.offsets import (
    OffsetRange,
    Offsets,
    byte_limit,
    checked_start,
    current_partitions,
    current_states,
    from_json,
    rate_limit,
    report_data_loss,
    resolve,
    split_ranges,
    states,
    to_json,
    vanished,
)
from fabric.sources.options import (
    ENDING_OPTIONS,
    SUBSCRIPTIONS,
    SourceOptions,
    Subscription,
    generated_group_id,
    parse_source_options,
)
from fabric.sources.reading import RangePartition, ReadPlan, cluster_for, read_range
from fabric.spark.options import get_option

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

log = logging.getLogger(__name__)


def value_schema_of(cluster: Cluster, subscription: Subscription) -> pa.Schema | None:
    """The typed value schema shared by the subscribed topics (None for plain topics)."""
    schemas: dict[str, pa.Schema | None] = {}
    for topic, _ in current_partitions(cluster, subscription):
        schemas.setdefault(topic, cluster.coordinator.topic(topic).value_schema)
    distinct = list({None if s is None else s.serialize().to_pybytes(): s for s in schemas.values()}.values())
    if len(distinct) > 1:
        described = "; ".join(f"{t}: {'plain (binary value)' if s is None else s.names}" for t, s in schemas.items())
        raise FabricError(f"the subscribed topics have different value schemas ({described}); "
                          "read topics with different schemas in separate queries")
    return distinct[0] if distinct else None


def spark_schema(value_schema: pa.Schema | None, include_headers: bool) -> StructType:
    """Kafka's record columns; a typed topic has its value fields in place of `value`. The metadata columns
    are declared non-nullable, as they never are null: Spark then skips their null checks row by row."""
    values = [StructField("value", BinaryType())] if value_schema is None else \
        list(from_arrow_schema(value_schema).fields)
    fields = [StructField("key", BinaryType()), *values, StructField("topic", StringType(), False),
              StructField("partition", IntegerType(), False), StructField("offset", LongType(), False),
              StructField("timestamp", TimestampType(), False), StructField("timestampType", IntegerType(), False)]
    return StructType(fields + ([StructField("headers", HEADERS)] if include_headers else []))


def source_schema(options: Mapping[str, Any]) -> StructType:
    """The default schema of a read; options without a subscription (a write) get the plain schema."""
    if all(get_option(options, name) is None for name in SUBSCRIPTIONS):
        return spark_schema(None, include_headers=False)
    streaming = all(get_option(options, name) is None for name in ENDING_OPTIONS)
    opts = parse_source_options(options, streaming=streaming)
    return spark_schema(value_schema_of(cluster_for(opts.url), opts.subscription), opts.include_headers)


def read_plan(opts: SourceOptions, schema: StructType) -> ReadPlan:
    """What tasks need; checks the query's columns exist (a user schema may pick a subset, in any order)."""
    value_schema = value_schema_of(cluster_for(opts.url), opts.subscription)
    output_schema(value_schema, schema.fieldNames())
    return ReadPlan(opts.url, value_schema, to_arrow_schema(schema, timezone="UTC"), opts.fail_on_data_loss,
                    opts.client_rack)


def _read(plan: ReadPlan, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    return read_range(plan, partition.value) if isinstance(partition, RangePartition) else iter(())


def _tasks(ranges: list[OffsetRange], opts: SourceOptions) -> list[InputPartition]:
    return [RangePartition(r) for r in split_ranges(ranges, opts.min_partitions)]


class FabricBatchReader(DataSourceReader):
    """Batch read: startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=False)
        self.plan = read_plan(self.opts, schema)

    def partitions(self) -> Sequence[InputPartition]:
        cluster = cluster_for(self.opts.url)
        now = states(cluster, current_partitions(cluster, self.opts.subscription))
        start = resolve(cluster, self.opts.starting, now, self.opts, "startingOffsets")
        end = resolve(cluster, self.opts.ending, now, self.opts, "endingOffsets")
        ranges = []
        for tp, state in now.items():
            begin = checked_start(tp, start[tp], state, self.opts.fail_on_data_loss)
            if end[tp] < begin:
                raise FabricError(f"{tp[0]}-{tp[1]}: the starting offset {begin} is after the ending offset "
                                  f"{end[tp]}; fix startingOffsets/endingOffsets (or their timestamps)")
            ranges.append(OffsetRange(tp[0], tp[1], begin, end[tp]))
        return _tasks(ranges, self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.plan, partition)


class FabricStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch read with admission control; offsets are Spark Kafka's JSON {"topic":{"0":23}}."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.opts = parse_source_options(options, streaming=True)
        self.plan = read_plan(self.opts, schema)
        self.target: Offsets | None = None  # end offsets of a trigger(availableNow=True) run
        self.group_id = self._group_id()  # where processed offsets are committed (None: nowhere)
        self.group_position: Offsets | None = None  # what was last committed to group_id
        self.last_batch = time.monotonic()  # when the last batch was planned (or this run began): maxTriggerDelay

    def _group_id(self) -> str | None:
        """groupId, else a new `<groupIdPrefix>-<uuid>` for this run of the query (as Kafka's source makes one)."""
        if self.opts.group_id is not None:
            if self.opts.group_id_prefix is not None:
                log.warning("option groupIdPrefix is ignored: groupId %s is set", self.opts.group_id)
            return self.opts.group_id
        if self.opts.group_id_prefix is None:
            return None
        group = generated_group_id(self.opts.group_id_prefix)
        log.info("committing this query's offsets to the generated group %s (option groupIdPrefix)", group)
        return group

    @property
    def cluster(self) -> Cluster:
        return cluster_for(self.opts.url)

    def initialOffset(self) -> dict:
        now = states(self.cluster, current_partitions(self.cluster, self.opts.subscription))
        return to_json(resolve(self.cluster, self.opts.starting, now, self.opts, "startingOffsets"))

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {tp: s.end_offset for tp, s in
                       states(self.cluster, current_partitions(self.cluster, self.opts.subscription)).items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        """One limit (pyspark's API has no composite limit): latestOffset applies the other options too (_limits)."""
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.max_bytes_per_trigger:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        previous = from_json(start)
        self._commit_group(previous)  # Spark plans the next batch only once the one ending at start is done
        gone, now = current_states(self.cluster, self.opts.subscription, previous, self.opts.fail_on_data_loss)
        begin = {tp: min(max(previous.get(tp, s.start_offset), s.start_offset), s.end_offset)
                 for tp, s in now.items()}
        end = {tp: s.end_offset for tp, s in now.items()}
        if self.target is not None:  # availableNow: nothing past what existed when the run began
            end = {tp: max(begin[tp], min(e, self.target.get(tp, begin[tp]))) for tp, e in end.items()}
        min_rows, max_rows, max_bytes = self._limits(limit)
        if min_rows and self._waits_for_more(begin, end, min_rows):
            return start
        if max_rows:
            end = rate_limit(self.cluster, begin, end, max_rows)
        if max_bytes:
            end = byte_limit(begin, end, max_bytes, now)
        if end != begin:
            self.last_batch = time.monotonic()
        kept = {tp: o for tp, o in previous.items() if tp[0] not in gone}
        lost = vanished(self.cluster, kept)  # a topic re-created with fewer partitions: partitions() reports them
        return to_json({**{tp: o for tp, o in kept.items() if tp not in lost}, **end})

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None, int | None]:
        """(minimum offsets, maximum records, maximum bytes) of a trigger: the limit Spark passes, and the options
        it cannot carry (pyspark's API has no composite limit); none with ReadAllAvailable (Trigger.Once)."""
        if isinstance(limit, ReadAllAvailable):
            return None, None, None
        return (limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_offsets_per_trigger,
                limit.max_rows if isinstance(limit, ReadMaxRows) else self.opts.max_offsets_per_trigger,
                limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.opts.max_bytes_per_trigger)

    def _waits_for_more(self, begin: Offsets, end: Offsets, min_offsets: int) -> bool:
        """minOffsetsPerTrigger: fewer new offsets than that wait for more, until maxTriggerDelay has passed since
        the last batch. Counted in offsets, as Kafka's source counts them (gaps and transaction markers count),
        and never in a trigger(availableNow=True) run, which must end."""
        if self.target is not None:
            return False
        waited_ms = (time.monotonic() - self.last_batch) * 1000
        return sum(end[tp] - begin[tp] for tp in end) < min_offsets and waited_ms < self.opts.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict | None:
        """The partitions' ends, for the query's metrics; None if a topic went away while they were read (the
        next latestOffset reports the deletion as the data loss it is, so a metric does not fail the query)."""
        try:
            partitions = current_partitions(self.cluster, self.opts.subscription, self._missing_topics())
            return to_json({tp: s.end_offset for tp, s in states(self.cluster, partitions).items()})
        except FabricError:
            if self._missing_topics():
                return None
            raise

    def _missing_topics(self) -> frozenset[str]:
        existing = set(self.cluster.coordinator.list_topics())
        return frozenset(t for t in self.opts.subscription.topic_names(self.cluster) if t not in existing)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        lost = vanished(self.cluster, {*begin, *stop})
        if lost:
            report_data_loss(f"partitions {', '.join(f'{t}-{p}' for t, p in sorted(lost))} no longer exist (was "
                             "the topic deleted, or re-created with fewer partitions?)", self.opts.fail_on_data_loss)
        now = states(self.cluster, [tp for tp in stop if tp not in lost])
        ranges = []
        for tp, last in stop.items():
            if tp in lost:
                continue
            first = begin.get(tp, 0)
            if not now[tp].end_offset < first <= last:  # (else a range planned before its log got shorter, a batch
                # replayed after its topic was re-created: the task reports what is gone, and the next batch, whose
                # start is then past the end, reads the new log from its start, once)
                first = checked_start(tp, first, now[tp], self.opts.fail_on_data_loss)
            ranges.append(OffsetRange(tp[0], tp[1], min(first, last), last))
        return _tasks(ranges, self.opts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.plan, partition)

    def commit(self, end: dict) -> None:
        """Spark finished the batch ending at `end`: show it as the consumer group's position (if any)."""
        self._commit_group(from_json(end))

    def _commit_group(self, done: Offsets) -> None:
        """Commit processed offsets to groupId (or groupIdPrefix's group) so `fabric groups describe` shows the
        query's lag (the checkpoint, not the group, decides where a restarted query resumes)."""
        if self.group_id is not None and done and done != self.group_position:
            try:
                self.cluster.commit_offsets(self.group_id, done)
            except OffsetOutOfRangeError as exc:  # retention overtook the batch: the next commit shows the lag
                log.warning("group %s: offsets not committed: %s", self.group_id, exc)
                return
            self.group_position = done
