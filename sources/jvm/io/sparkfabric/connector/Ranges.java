package io.sparkfabric.connector;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** The tasks of a read from `from` to `until`, as format("fabric") makes them (sources/offsets.py): a start that
 *  retention overtook, or past the end, is data loss (DataLoss; without failOnDataLoss, read from the log start);
 *  empty ranges are no task; with minPartitions, large ranges are split so there are at least that many tasks, each
 *  range into parts in proportion to its size (Kafka's source's rule). */
final class Ranges {
    private Ranges() {
    }

    static List<FabricInputPartition> tasks(Planner.Snapshot now, Map<TopicPartition, Long> from,
                                            Map<TopicPartition, Long> until, Layout layout, ReadOptions options) {
        List<FabricInputPartition> whole = new ArrayList<>();
        long total = 0;
        for (Planner.PartitionAt at : now.partitions()) {
            Long last = until.get(at.tp());
            if (last == null) {
                continue;
            }
            long first = from.getOrDefault(at.tp(), at.start());
            if (!(at.end() < first && first <= last)) {  // (else a range planned before its log got shorter, a batch
                // replayed after its topic was re-created: the task reports what is gone, and the next batch, whose
                // start is then past the end, reads the new log from its start, once; sources/fabric_source.py)
                first = checkedStart(at, first, options.failOnDataLoss());
            }
            if (last > first) {
                whole.add(Planner.Snapshot.task(options, at, first, last, layout));
                total += last - first;
            }
        }
        int wanted = options.minPartitions();
        if (wanted == 0 || whole.size() >= wanted) {
            return whole;
        }
        List<FabricInputPartition> split = new ArrayList<>();
        for (FabricInputPartition task : whole) {
            long size = task.until() - task.from();
            long parts = Math.min(size, Math.max(1, (long) Math.ceil((double) size * wanted / total)));
            for (long i = 0; i < parts; i++) {
                split.add(task.range(task.from() + size * i / parts, task.from() + size * (i + 1) / parts));
            }
        }
        return split;
    }

    /** A real-time batch's tasks: each partition read from `from` (checked as above) on, with no end, one task
     *  each (a real-time task holds its slot for the batch: minPartitions does not split them). */
    static List<FabricInputPartition> open(Planner.Snapshot now, Map<TopicPartition, Long> from, Layout layout,
                                           ReadOptions options) {
        List<FabricInputPartition> tasks = new ArrayList<>();
        for (Planner.PartitionAt at : now.partitions()) {
            long first = checkedStart(at, from.getOrDefault(at.tp(), at.start()), options.failOnDataLoss());
            tasks.add(Planner.Snapshot.task(options, at, first, Long.MAX_VALUE, layout));
        }
        return tasks;
    }

    /** Where reading `at` really starts: `start`, or its log start when retention deleted offsets in between or
     *  `start` is past its end (a topic re-created), if failOnDataLoss is false. */
    static long checkedStart(Planner.PartitionAt at, long start, boolean failOnDataLoss) {
        String lost;
        if (start < at.start()) {
            lost = DataLoss.deleted(at.tp(), start, at.start());
        } else if (start > at.end()) {
            lost = "offset " + start + " of topic '" + at.tp().topic() + "' partition " + at.tp().partition()
                + " is past its end " + at.end() + " (was the topic deleted and re-created?)";
        } else {
            return start;
        }
        DataLoss.report(lost, failOnDataLoss);
        return at.start();
    }
}
