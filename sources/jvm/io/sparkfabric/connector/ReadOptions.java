package io.sparkfabric.connector;

import java.io.Serializable;
import java.util.Set;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The options of a read, checked as the Python source checks them: url (else $FABRIC_URL), subscribe (one topic),
 *  startingOffsets and endingOffsets ("earliest" or "latest"; null: the read's default), includeHeaders, and for a
 *  stream maxOffsetsPerTrigger (0: none) and failOnDataLoss. */
record ReadOptions(FabricUrl url, String topic, String starting, String ending, boolean headers,
                   long maxOffsetsPerTrigger, boolean failOnDataLoss) implements Serializable {
    private static final Set<String> KNOWN = Set.of("url", "subscribe", "startingoffsets", "endingoffsets",
                                                    "includeheaders", "maxoffsetspertrigger", "failondataloss",
                                                    "path");

    static ReadOptions of(CaseInsensitiveStringMap options) {
        for (String name : options.asCaseSensitiveMap().keySet()) {
            if (!KNOWN.contains(name.toLowerCase())) {
                throw new IllegalArgumentException("unknown option " + name + " of format(\"fabric-jvm\"); it takes "
                    + "url, subscribe, startingOffsets, endingOffsets, includeHeaders, maxOffsetsPerTrigger and "
                    + "failOnDataLoss");
            }
        }
        String url = options.getOrDefault("url", System.getenv("FABRIC_URL"));
        String topic = options.get("subscribe");
        if (topic == null || topic.isEmpty() || topic.contains(",")) {
            throw new IllegalArgumentException("option subscribe must name one topic, got " + topic);
        }
        long maxOffsets;
        try {
            maxOffsets = Long.parseLong(options.getOrDefault("maxOffsetsPerTrigger", "0").trim());
        } catch (NumberFormatException e) {
            maxOffsets = -1;
        }
        if (maxOffsets < 0 || (maxOffsets == 0 && options.containsKey("maxOffsetsPerTrigger"))) {
            throw new IllegalArgumentException("option maxOffsetsPerTrigger must be a positive number of offsets, got "
                                               + options.get("maxOffsetsPerTrigger"));
        }
        return new ReadOptions(FabricUrl.parse(url), topic, position(options, "startingOffsets"),
                               position(options, "endingOffsets"), bool(options, "includeHeaders", false), maxOffsets,
                               bool(options, "failOnDataLoss", true));
    }

    private static boolean bool(CaseInsensitiveStringMap options, String name, boolean otherwise) {
        String value = options.getOrDefault(name, Boolean.toString(otherwise)).trim().toLowerCase();
        if (!value.equals("true") && !value.equals("false")) {
            throw new IllegalArgumentException("option " + name + " must be true or false, got " + value);
        }
        return value.equals("true");
    }

    private static String position(CaseInsensitiveStringMap options, String name) {
        String value = options.get(name);
        if (value == null) {
            return null;
        }
        value = value.trim().toLowerCase();
        if (!value.equals("earliest") && !value.equals("latest")) {
            throw new IllegalArgumentException("option " + name + " must be earliest or latest, got " + value);
        }
        return value;
    }
}
