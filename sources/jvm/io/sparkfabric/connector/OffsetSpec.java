package io.sparkfabric.connector;

import java.io.Serializable;
import java.util.Map;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** Where a read starts or ends, as format("fabric") takes it: earliest, latest, group (the committed offsets of
 *  groupId), offsets (Kafka's JSON, -2 earliest and -1 latest), timestamp (one for every partition) or timestamps
 *  (JSON per partition); `<prefix>Timestamp` wins over `<prefix>OffsetsByTimestamp` over `<prefix>Offsets`.
 *  `given` is the option's text, as errors quote it. */
record OffsetSpec(String kind, Map<TopicPartition, Long> offsets, long timestampMs, String given)
        implements Serializable {
    static final long EARLIEST = -2;
    static final long LATEST = -1;

    static OffsetSpec of(String kind) {
        return new OffsetSpec(kind, Map.of(), 0, kind);
    }

    /** The spec `prefix` ("starting", "ending") the options give, or null where they give none. */
    static OffsetSpec parse(CaseInsensitiveStringMap options, String prefix) {
        String single = options.get(prefix + "Timestamp");
        if (single != null) {
            try {
                return new OffsetSpec("timestamp", Map.of(), Long.parseLong(single.strip()), single);
            } catch (NumberFormatException e) {
                throw OptionError.invalid(prefix + "Timestamp", single,
                                          "must be milliseconds since the epoch, e.g. 1767225600000");
            }
        }
        String byTimestamp = options.get(prefix + "OffsetsByTimestamp");
        if (byTimestamp != null) {
            return new OffsetSpec("timestamps",
                                  PartitionJson.parse(prefix + "OffsetsByTimestamp", byTimestamp, "timestamps"), 0,
                                  byTimestamp);
        }
        String name = prefix + "Offsets";
        String text = options.get(name);
        if (text == null) {
            return null;
        }
        String given = text.strip();
        String kind = given.toLowerCase();
        if (kind.equals("earliest") || kind.equals("latest") || kind.equals("group")) {
            if (kind.equals("group") && prefix.equals("ending")) {
                throw OptionError.invalid(name, given, "'group' is only a starting position; use latest or JSON "
                                                      + "offsets");
            }
            return new OffsetSpec(kind, Map.of(), 0, given);
        }
        if (!given.startsWith("{")) {
            throw OptionError.invalid(name, given, "use earliest, latest, group or JSON offsets like "
                                                  + "{\"topicA\":{\"0\":23,\"1\":-2}}");
        }
        Map<TopicPartition, Long> offsets = PartitionJson.parse(name, given, "offsets");
        offsets.forEach((tp, offset) -> {
            if (offset < EARLIEST) {
                throw OptionError.invalid(name, given, tp + ": offsets are >= 0, or -2 (earliest) / -1 (latest)");
            }
        });
        return new OffsetSpec("offsets", offsets, 0, given);
    }

    /** Refuses what a batch read cannot do with this spec of option `prefix`: start at latest, end at earliest. */
    void checkBatch(String prefix) {
        String never = prefix.equals("starting") ? "latest" : "earliest";
        String name = prefix + "Offsets";
        if (kind.equals(never)) {
            String what = prefix.equals("starting") ? "start at latest" : "end at earliest";
            String instead = prefix.equals("starting") ? "earliest" : "latest";
            throw OptionError.invalid(name, given, "a batch query cannot " + what + " (it would read nothing); use "
                                                   + instead + " or JSON offsets");
        }
        long special = prefix.equals("starting") ? LATEST : EARLIEST;
        offsets.forEach((tp, offset) -> {
            if (kind.equals("offsets") && offset == special) {
                throw OptionError.invalid(name, given, tp + ": a batch query cannot use " + offset + " in " + name);
            }
        });
    }
}
