package io.sparkfabric.connector;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/** A micro-batch read of the topic: each batch reads from where the last ended to the partitions' ends at planning
 *  (at most maxOffsetsPerTrigger offsets, shared out by backlog as Kafka's source does; a trigger(availableNow)
 *  run stops at the ends it began with), and each progress carries Kafka's three offsets-behind-latest metrics.
 *  Under trigger(realTime=...) each batch's tasks read on as records come, for the batch's duration (RecordRows). */
final class TopicStream implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics,
                                   SupportsRealTimeMode {
    private final ReadOptions options;
    private final Layout layout;
    private final Planner planner;
    private Map<Integer, Long> latest;  // the partitions' ends when the last batch was planned
    private Map<Integer, Long> target;  // a trigger(availableNow) run's ends

    TopicStream(ReadOptions options, Layout layout) {
        if (options.ending() != null) {
            throw new IllegalArgumentException("option endingOffsets is for batch reads: a stream reads on");
        }
        this.options = options;
        this.layout = layout;
        this.planner = new Planner(options.url());
    }

    private Planner.Snapshot now() {
        return Planner.unchecked("read the partitions of topic " + options.topic(),
                                 () -> planner.snapshot(options.topic()));
    }

    private static Map<Integer, Long> ends(Planner.Snapshot snapshot) {
        Map<Integer, Long> out = new HashMap<>();
        snapshot.partitions().forEach(at -> out.put(at.partition(), at.end()));
        return out;
    }

    @Override
    public Offset initialOffset() {
        Planner.Snapshot snapshot = now();
        Map<Integer, Long> out = new HashMap<>();
        boolean earliest = "earliest".equals(options.starting());  // a stream starts at the end by default
        snapshot.partitions().forEach(at -> out.put(at.partition(), earliest ? at.start() : at.end()));
        return new FabricOffset(options.topic(), out);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return options.maxOffsetsPerTrigger() > 0 ? ReadLimit.maxRows(options.maxOffsetsPerTrigger())
                                                  : ReadLimit.allAvailable();
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        target = ends(now());
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        Planner.Snapshot snapshot = now();
        Map<Integer, Long> from = ((FabricOffset) start).offsets;
        latest = ends(snapshot);
        Map<Integer, Long> begin = new HashMap<>();
        Map<Integer, Long> end = new HashMap<>();
        for (Planner.PartitionAt at : snapshot.partitions()) {
            long first = Math.min(Math.max(from.getOrDefault(at.partition(), at.start()), at.start()), at.end());
            long last = target == null ? at.end() : Math.max(first, Math.min(at.end(),
                                                                             target.getOrDefault(at.partition(), first)));
            begin.put(at.partition(), first);
            end.put(at.partition(), last);
        }
        if (limit instanceof ReadMaxRows rows) {
            cap(begin, end, rows.maxRows());
        }
        return new FabricOffset(options.topic(), end);
    }

    /** At most `maxRows` offsets in all, each partition's share in proportion to its backlog: floored, or rounded up
     *  below one, so every backlog moves (Kafka's rule, in offsets as Kafka counts them). */
    private static void cap(Map<Integer, Long> begin, Map<Integer, Long> end, long maxRows) {
        long total = 0;
        for (Map.Entry<Integer, Long> e : end.entrySet()) {
            total += e.getValue() - begin.get(e.getKey());
        }
        if (total <= maxRows) {
            return;
        }
        for (Map.Entry<Integer, Long> e : end.entrySet()) {
            long size = e.getValue() - begin.get(e.getKey());
            if (size > 0) {
                double share = maxRows * ((double) size / total);
                e.setValue(begin.get(e.getKey()) + (long) (share < 1 ? Math.ceil(share) : Math.floor(share)));
            }
        }
    }

    @Override
    public Offset reportLatestOffset() {
        return latest == null ? null : new FabricOffset(options.topic(), latest);
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("the fabric stream plans with latestOffset(start, limit)");
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        return tasks(start, ((FabricOffset) end).offsets);
    }

    /** A real-time batch's tasks: each partition read from `start` on, as records come, until the batch's time is
     *  up; where each stopped is its end (mergeOffsets). */
    @Override
    public InputPartition[] planInputPartitions(Offset start) {
        return tasks(start, null);
    }

    @Override
    public Offset mergeOffsets(PartitionOffset[] offsets) {
        Map<Integer, Long> out = new HashMap<>();
        for (PartitionOffset offset : offsets) {
            RecordRows.Position at = (RecordRows.Position) offset;
            out.merge(at.partition(), at.next(), Math::max);
        }
        return new FabricOffset(options.topic(), out);
    }

    /** The tasks reading each partition from `start` to `until` (null: open tasks, no end), the offsets that
     *  retention deleted in between reported as lost (failOnDataLoss) or skipped. */
    private InputPartition[] tasks(Offset start, Map<Integer, Long> until) {
        Planner.Snapshot snapshot = now();
        Map<Integer, Long> from = ((FabricOffset) start).offsets;
        List<InputPartition> tasks = new ArrayList<>();
        for (Planner.PartitionAt at : snapshot.partitions()) {
            Long last = until == null ? Long.valueOf(Long.MAX_VALUE) : until.get(at.partition());
            if (last == null) {
                continue;
            }
            long wanted = from.getOrDefault(at.partition(), at.start());
            if (wanted < at.start()) {
                Planner.unchecked("plan the read of topic " + options.topic(), () -> {
                    DataLoss.report(DataLoss.deleted(options.topic(), at.partition(), wanted, at.start()),
                                    options.failOnDataLoss());
                    return null;
                });
            }
            long first = Math.max(wanted, at.start());
            tasks.add(snapshot.task(options, at, first, Math.max(first, last), layout));
        }
        return tasks.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new TopicScan.Readers();
    }

    @Override
    public Offset deserializeOffset(String json) {
        return FabricOffset.parse(json, options.topic());
    }

    @Override
    public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
        Map<String, String> out = new HashMap<>();
        if (latest == null || latestConsumedOffset.isEmpty() || latest.isEmpty()) {
            return out;
        }
        Map<Integer, Long> consumed = ((FabricOffset) latestConsumedOffset.get()).offsets;
        long min = Long.MAX_VALUE;
        long max = Long.MIN_VALUE;
        long sum = 0;
        for (Map.Entry<Integer, Long> e : latest.entrySet()) {
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

    @Override
    public void commit(Offset end) {
    }

    @Override
    public void stop() {
    }
}
