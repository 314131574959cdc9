package io.sparkfabric.connector;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/** An OffsetSpec made offsets of the partitions read, as format("fabric") makes them (sources/offsets.py
 *  `resolve`): a partition the spec leaves out starts at earliest or ends at latest; a group's committed offset is
 *  capped at the end; a time's offset is the first record at or after it, else (per the strategy, for a start) an
 *  error or the end. */
final class Positions {
    private Positions() {
    }

    /** The offsets `spec` of option `option` ("startingOffsets", "endingOffsets") means in `now`. */
    static Map<TopicPartition, Long> resolve(OffsetSpec spec, Planner.Snapshot now, Planner planner,
                                             ReadOptions options, String option) throws Exception {
        boolean starting = option.startsWith("starting");
        Map<TopicPartition, Planner.PartitionAt> read = new TreeMap<>();
        now.partitions().forEach(at -> read.put(at.tp(), at));
        List<TopicPartition> unknown = spec.offsets().keySet().stream().filter(tp -> !read.containsKey(tp)).toList();
        if (!unknown.isEmpty()) {
            throw new IllegalArgumentException(option + " names partitions " + unknown + " the query does not read; "
                                               + "it reads " + read.keySet());
        }
        Map<TopicPartition, Long> committed = spec.kind().equals("group")
            ? planner.committed(options.groupId(), new TreeSet<>(read.keySet().stream().map(TopicPartition::topic)
                                                                     .toList()))
            : Map.of();
        Map<TopicPartition, Long> out = new TreeMap<>();
        for (Planner.PartitionAt at : read.values()) {
            long fallback = starting ? at.start() : at.end();
            long unnamed = starting ? OffsetSpec.EARLIEST : OffsetSpec.LATEST;
            long offset = switch (spec.kind()) {
                case "earliest" -> at.start();
                case "latest" -> at.end();
                case "group" -> committed.containsKey(at.tp()) ? Math.min(committed.get(at.tp()), at.end())
                                                                : fallback;
                case "offsets" -> given(spec.offsets().getOrDefault(at.tp(), unnamed), at, option);
                default -> {  // "timestamp", "timestamps"
                    Long time = spec.kind().equals("timestamp") ? Long.valueOf(spec.timestampMs())
                                                                : spec.offsets().get(at.tp());
                    yield time == null ? fallback
                                       : byTime(planner, at, time, starting ? options.timestampStrategy() : "latest",
                                                option);
                }
            };
            out.put(at.tp(), offset);
        }
        return out;
    }

    private static long given(long offset, Planner.PartitionAt at, String option) {
        if (offset == OffsetSpec.EARLIEST) {
            return at.start();
        }
        if (offset == OffsetSpec.LATEST) {
            return at.end();
        }
        if (offset > at.end()) {
            throw new IllegalArgumentException(option + ": offset " + offset + " of " + at.tp() + " is past its end "
                + "offset " + at.end() + "; use an offset <= " + at.end() + " or -1 (latest)");
        }
        return offset;
    }

    private static long byTime(Planner planner, Planner.PartitionAt at, long timeMs, String strategy, String option)
            throws Exception {
        Long found = planner.offsetForTime(at, timeMs);
        if (found != null) {
            return found;
        }
        if (strategy.equals("error")) {
            throw new IllegalArgumentException(option + ": no record in " + at.tp() + " has a timestamp >= " + timeMs
                + " ms; pick an earlier timestamp or set startingOffsetsByTimestampStrategy=latest to start such "
                + "partitions at their end");
        }
        return at.end();
    }
}
