package io.sparkfabric.connector;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReadMinRows;

/** How much one micro-batch admits (Spark's ReadLimits, as Kafka's source applies them): at least minRows new
 *  offsets unless maxTriggerDelayMs has passed since the last batch (0: no minimum), at most maxRows offsets and
 *  about maxBytes bytes (0: no maximum), each maximum shared out by the partitions' backlogs. */
record Admission(long minRows, long maxTriggerDelayMs, long maxRows, long maxBytes) {

    /** The read limit of `options`: all of their limits, composed where there are several. */
    static ReadLimit defaultLimit(ReadOptions options) {
        List<ReadLimit> limits = new ArrayList<>();
        if (options.minOffsetsPerTrigger() > 0) {
            limits.add(ReadLimit.minRows(options.minOffsetsPerTrigger(), options.maxTriggerDelayMs()));
        }
        if (options.maxOffsetsPerTrigger() > 0) {
            limits.add(ReadLimit.maxRows(options.maxOffsetsPerTrigger()));
        }
        if (options.maxBytesPerTrigger() > 0) {
            limits.add(ReadLimit.maxBytes(options.maxBytesPerTrigger()));
        }
        return limits.isEmpty() ? ReadLimit.allAvailable()
            : limits.size() == 1 ? limits.get(0) : ReadLimit.compositeLimit(limits.toArray(new ReadLimit[0]));
    }

    /** What `limit` admits (ReadAllAvailable, as Trigger.Once passes it: everything). */
    static Admission of(ReadLimit limit) {
        Admission out = new Admission(0, 0, 0, 0);
        for (ReadLimit one : limit instanceof CompositeReadLimit composite ? composite.getReadLimits()
                                                                             : new ReadLimit[] {limit}) {
            if (one instanceof ReadMinRows min) {
                out = new Admission(min.minRows(), min.maxTriggerDelayMs(), out.maxRows, out.maxBytes);
            } else if (one instanceof ReadMaxRows max) {
                out = new Admission(out.minRows, out.maxTriggerDelayMs, max.maxRows(), out.maxBytes);
            } else if (one instanceof ReadMaxBytes bytes) {
                out = new Admission(out.minRows, out.maxTriggerDelayMs, out.maxRows, bytes.maxBytes());
            }
        }
        return out;
    }

    /** Whether a batch of [begin, end) waits for more: fewer than minRows offsets, and less than maxTriggerDelayMs
     *  since the last batch (`waitedMs`). */
    boolean waits(Map<TopicPartition, Long> begin, Map<TopicPartition, Long> end, long waitedMs) {
        return minRows > 0 && total(begin, end, Map.of()) < minRows && waitedMs < maxTriggerDelayMs;
    }

    /** `end` capped at maxRows offsets in all and about maxBytes bytes (each partition's bytes per record from its
     *  log's size, `perRecord`): each partition's share in proportion to its backlog, floored, or rounded up below
     *  one, so every backlog moves (Kafka's rule, in offsets as Kafka counts them). */
    void cap(Map<TopicPartition, Long> begin, Map<TopicPartition, Long> end, Map<TopicPartition, Double> perRecord) {
        if (maxRows > 0) {
            share(begin, end, Map.of(), maxRows);
        }
        if (maxBytes > 0) {
            share(begin, end, perRecord, maxBytes);
        }
    }

    private static void share(Map<TopicPartition, Long> begin, Map<TopicPartition, Long> end,
                              Map<TopicPartition, Double> weight, long most) {
        double total = total(begin, end, weight);
        if (total <= most) {
            return;
        }
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            long size = e.getValue() - begin.get(e.getKey());
            if (size > 0) {
                double share = most * (size * weight.getOrDefault(e.getKey(), 1.0) / total)
                               / weight.getOrDefault(e.getKey(), 1.0);
                e.setValue(begin.get(e.getKey()) + (long) (share < 1 ? Math.ceil(share) : Math.floor(share)));
            }
        }
    }

    private static double total(Map<TopicPartition, Long> begin, Map<TopicPartition, Long> end,
                                Map<TopicPartition, Double> weight) {
        double total = 0;
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            total += (e.getValue() - begin.get(e.getKey())) * weight.getOrDefault(e.getKey(), 1.0);
        }
        return total;
    }
}
