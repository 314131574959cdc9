package io.sparkfabric.connector;

import java.io.Serializable;
import java.util.Set;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The options of a read, checked as the Python source checks them: url (else $FABRIC_URL), subscribe (one topic),
 *  startingOffsets and endingOffsets ("earliest" or "latest"). */
record ReadOptions(FabricUrl url, String topic, String starting, String ending) implements Serializable {
    private static final Set<String> KNOWN = Set.of("url", "subscribe", "startingoffsets", "endingoffsets", "path");

    static ReadOptions of(CaseInsensitiveStringMap options) {
        for (String name : options.asCaseSensitiveMap().keySet()) {
            if (!KNOWN.contains(name.toLowerCase())) {
                throw new IllegalArgumentException("unknown option " + name + " of format(\"fabric-jvm\"); it takes "
                    + "url, subscribe, startingOffsets and endingOffsets");
            }
        }
        String url = options.getOrDefault("url", System.getenv("FABRIC_URL"));
        String topic = options.get("subscribe");
        if (topic == null || topic.isEmpty() || topic.contains(",")) {
            throw new IllegalArgumentException("option subscribe must name one topic, got " + topic);
        }
        return new ReadOptions(FabricUrl.parse(url), topic, position(options, "startingOffsets", "earliest"),
                               position(options, "endingOffsets", "latest"));
    }

    private static String position(CaseInsensitiveStringMap options, String name, String otherwise) {
        String value = options.getOrDefault(name, otherwise).trim().toLowerCase();
        if (!value.equals("earliest") && !value.equals("latest")) {
            throw new IllegalArgumentException("option " + name + " must be earliest or latest, got " + value);
        }
        return value;
    }
}
