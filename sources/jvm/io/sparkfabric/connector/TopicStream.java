package io.sparkfabric.connector;

import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** A micro-batch read of the subscribed topics (a pattern's matched anew at every batch; a new partition read from
 *  its start): each batch reads from where the last ended to the partitions' ends at planning, within the
 *  stream's admission limits (Admission; a trigger(availableNow) run stops at the ends it began with), each progress
 *  carries Kafka's three offsets-behind-latest metrics, and each batch done is committed as groupId's offsets (or
 *  those of a group `<groupIdPrefix>-<uuid>` of this run), for tools to show the stream's lag. A topic deleted
 *  while the stream reads it is data loss (DataLoss). Under trigger(realTime=...) each batch's tasks read on as
 *  records come, for the batch's duration (RecordRows). */
final class TopicStream implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics,
                                   SupportsRealTimeMode {
    private static final Logger LOG = LoggerFactory.getLogger(TopicStream.class);
    private final ReadOptions options;
    private final Layout layout;
    private final Planner planner;
    private final String group;  // where batches done are committed (null: nowhere)
    private Map<TopicPartition, Long> latest;  // the partitions' ends when the last batch was planned
    private Map<TopicPartition, Long> target;  // a trigger(availableNow) run's ends
    private Map<TopicPartition, Long> committed;  // what was last committed to the group
    private long lastBatchMs = System.currentTimeMillis();  // when the last batch was planned (minOffsetsPerTrigger)

    TopicStream(ReadOptions options, Layout layout) {
        this.options = options;
        this.layout = layout;
        this.planner = new Planner(options.url());
        this.group = options.groupId() != null ? options.groupId()
            : options.groupIdPrefix() != null ? options.groupIdPrefix() + "-" + UUID.randomUUID() : null;
    }

    /** The partitions read now, after reading the partitions of `read` (null: at the start, nothing yet). */
    private Planner.Snapshot now(Map<TopicPartition, Long> read) {
        Set<String> topics = read == null ? null : new TreeSet<>(read.keySet().stream().map(TopicPartition::topic)
                                                                     .toList());
        return Planner.unchecked("read the partitions of " + options.subscription().describe(),
                                 () -> planner.snapshot(options.subscription(), topics, options.failOnDataLoss()));
    }

    @Override
    public Offset initialOffset() {
        return new FabricOffset(Planner.unchecked("find the starting offsets", () -> Positions.resolve(
            options.starting(true), now(null), planner, options, "startingOffsets")));
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return Admission.defaultLimit(options);
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        target = now(null).ends();
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        commit(start);  // Spark plans the next batch once the one ending at `start` is done; it may not commit the last
        Map<TopicPartition, Long> from = ((FabricOffset) start).offsets;
        Planner.Snapshot snapshot = now(from);
        latest = snapshot.ends();
        Map<TopicPartition, Long> begin = new TreeMap<>();
        Map<TopicPartition, Long> end = new TreeMap<>();
        Map<TopicPartition, Double> perRecord = new HashMap<>();
        for (Planner.PartitionAt at : snapshot.partitions()) {
            long first = Math.min(Math.max(from.getOrDefault(at.tp(), at.start()), at.start()), at.end());
            long last = target == null ? at.end()
                                       : Math.max(first, Math.min(at.end(), target.getOrDefault(at.tp(), first)));
            begin.put(at.tp(), first);
            end.put(at.tp(), last);
            perRecord.put(at.tp(), at.end() > at.start() ? Math.max((double) at.bytes() / (at.end() - at.start()), 1)
                                                         : 1.0);
        }
        Admission admits = Admission.of(limit);
        if (target == null && admits.waits(begin, end, System.currentTimeMillis() - lastBatchMs)) {
            return start;
        }
        admits.cap(begin, end, perRecord);
        if (!end.equals(begin)) {
            lastBatchMs = System.currentTimeMillis();
        }
        return new FabricOffset(end);
    }

    @Override
    public Offset reportLatestOffset() {
        return latest == null ? null : new FabricOffset(latest);
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("the fabric stream plans with latestOffset(start, limit)");
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        Map<TopicPartition, Long> from = ((FabricOffset) start).offsets;
        List<FabricInputPartition> tasks = Ranges.tasks(now(from), from, ((FabricOffset) end).offsets, layout,
                                                        options);
        return tasks.toArray(new InputPartition[0]);
    }

    /** A real-time batch's tasks: each partition read from `start` on, as records come, until the batch's time is
     *  up; where each stopped is its end (mergeOffsets). */
    @Override
    public InputPartition[] planInputPartitions(Offset start) {
        Map<TopicPartition, Long> from = ((FabricOffset) start).offsets;
        return Ranges.open(now(from), from, layout, options).toArray(new InputPartition[0]);
    }

    @Override
    public Offset mergeOffsets(PartitionOffset[] offsets) {
        Map<TopicPartition, Long> out = new TreeMap<>();
        for (PartitionOffset offset : offsets) {
            RecordRows.Position at = (RecordRows.Position) offset;
            out.merge(at.tp(), at.next(), Math::max);
        }
        return new FabricOffset(out);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new TopicScan.Readers();
    }

    @Override
    public Offset deserializeOffset(String json) {
        return FabricOffset.parse(json);
    }

    @Override
    public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
        Map<String, String> out = new HashMap<>();
        if (latest == null || latestConsumedOffset.isEmpty() || latest.isEmpty()) {
            return out;
        }
        Map<TopicPartition, Long> consumed = ((FabricOffset) latestConsumedOffset.get()).offsets;
        long min = Long.MAX_VALUE;
        long max = Long.MIN_VALUE;
        long sum = 0;
        for (Map.Entry<TopicPartition, Long> e : latest.entrySet()) {
            long behind = e.getValue() - consumed.getOrDefault(e.getKey(), 0L);
            min = Math.min(min, behind);
            max = Math.max(max, behind);
            sum += behind;
        }
        out.put("minOffsetsBehindLatest", Long.toString(min));
        out.put("maxOffsetsBehindLatest", Long.toString(max));
        out.put("avgOffsetsBehindLatest", Double.toString((double) sum / latest.size()));
        return out;
    }

    /** Spark finished the batch ending at `end`: its offsets become the group's (the checkpoint, not the group,
     *  decides where a restarted query resumes). */
    @Override
    public void commit(Offset end) {
        Map<TopicPartition, Long> done = ((FabricOffset) end).offsets;
        if (group == null || done.isEmpty() || done.equals(committed)) {
            return;
        }
        try {
            planner.commit(group, done);
            committed = done;
        } catch (FabricException e) {
            if (!"OffsetOutOfRangeError".equals(e.type())) {
                throw new IllegalStateException("cannot commit the offsets of group " + group + ": " + e.getMessage(),
                                                e);
            }
            LOG.warn("group {}: offsets not committed: {}", group, e.getMessage());  // the next commit shows the lag
        } catch (Exception e) {
            throw new IllegalStateException("cannot commit the offsets of group " + group + ": " + e.getMessage(), e);
        }
    }

    @Override
    public void stop() {
        try {
            planner.close();
        } catch (IOException e) {
            LOG.warn("closing the stream's connections: {}", e.getMessage());
        }
    }

    /** What a query's progress names the source (its `description`). */
    @Override
    public String toString() {
        return "fabric JVM reader: " + options.subscription().describe();
    }
}
