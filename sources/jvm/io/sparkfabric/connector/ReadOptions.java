package io.sparkfabric.connector;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The options of a read, format("fabric")'s (sources/options.py), checked and refused with its words: url or
 *  kafka.bootstrap.servers (else $FABRIC_URL), the subscription, where to start and end (null: the read's default), the stream's admission
 *  limits (0: none), minPartitions (0: none), failOnDataLoss, includeHeaders, the group the stream commits to and
 *  the readers' rack (clientRack, else conf spark.fabric.clientRack; null: each task's $FABRIC_CLIENT_RACK: Racks).
 *  `streamingOnly` holds the
 *  admission options given, which a batch read refuses. */
record ReadOptions(FabricUrl url, Subscription subscription, OffsetSpec starting, OffsetSpec ending,
                   String timestampStrategy, long maxOffsetsPerTrigger, long minOffsetsPerTrigger,
                   long maxTriggerDelayMs, long maxBytesPerTrigger, int minPartitions, boolean failOnDataLoss,
                   boolean headers, String groupId, String groupIdPrefix, String clientRack,
                   Map<String, String> streamingOnly)
        implements Serializable {
    static final String BOOTSTRAP = "kafka.bootstrap.servers";  // Spark Kafka's, the one kafka.* option taken
    private static final List<String> KNOWN = List.of(
        "subscribe", "subscribePattern", "assign", "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp",
        "url", BOOTSTRAP, "startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
        "maxBytesPerTrigger", "minPartitions", "failOnDataLoss", "includeHeaders", "groupId", "groupIdPrefix",
        "clientRack");
    private static final List<String> STREAMING_ONLY = List.of("maxOffsetsPerTrigger", "minOffsetsPerTrigger",
                                                               "maxTriggerDelay", "maxBytesPerTrigger");
    private static final long DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000L;  // Kafka's source's, 15m
    private static final int GENERATED_GROUP_SUFFIX = 37;  // "-" and a uuid, appended to groupIdPrefix
    // Spark's time strings (JavaUtils.timeStringAsMs): a whole number and a unit, milliseconds when none is given
    private static final Pattern DURATION = Pattern.compile("(\\d+)\\s*(us|ms|s|m|min|h|d)?");
    private static final Map<String, String> KAFKA_EQUIVALENTS = Map.of(
        "group.id", "use option 'groupId' instead (the group the query commits its offsets to), or 'groupIdPrefix'",
        "client.rack", "use option 'clientRack' instead",
        "isolation.level", "the source always reads committed records only (read_committed); remove it");

    static ReadOptions of(CaseInsensitiveStringMap options) {
        refuseUnknown(options);
        String groupId = options.get("groupId") == null ? null : Names.group(options.get("groupId"));
        OffsetSpec starting = OffsetSpec.parse(options, "starting");
        if (starting != null && starting.kind().equals("group") && groupId == null) {
            throw OptionError.invalid("startingOffsets", "group", "set option 'groupId' to the consumer group to "
                + "start from (groupIdPrefix names a new group each run, which has no offsets)");
        }
        long minOffsets = positive(options, "minOffsetsPerTrigger");
        if (minOffsets == 0 && options.get("maxTriggerDelay") != null) {
            throw OptionError.invalid("maxTriggerDelay", options.get("maxTriggerDelay"), "bounds how long "
                + "minOffsetsPerTrigger makes a trigger wait; set minOffsetsPerTrigger too");
        }
        String strategy = options.getOrDefault("startingOffsetsByTimestampStrategy", "error").strip().toLowerCase();
        if (!strategy.equals("error") && !strategy.equals("latest")) {
            throw OptionError.invalid("startingOffsetsByTimestampStrategy", strategy, "must be error or latest");
        }
        Map<String, String> streamingOnly = new LinkedHashMap<>();
        for (String name : STREAMING_ONLY) {
            if (options.get(name) != null) {
                streamingOnly.put(name, options.get(name));
            }
        }
        return new ReadOptions(FabricUrl.parse(url(options)),
                               Subscription.of(options), starting, OffsetSpec.parse(options, "ending"), strategy,
                               positive(options, "maxOffsetsPerTrigger"), minOffsets,
                               durationMs(options, "maxTriggerDelay"), positive(options, "maxBytesPerTrigger"),
                               (int) Math.min(Integer.MAX_VALUE, positive(options, "minPartitions")),
                               bool(options, "failOnDataLoss", true), bool(options, "includeHeaders", false), groupId,
                               groupIdPrefix(options), clientRack(options), Map.copyOf(streamingOnly));
    }

    /** The fabric's URL, in format("fabric")'s order (fabric.spark.options.resolve_url): option url or
     *  kafka.bootstrap.servers (optionUrl), else the session's conf spark.fabric.url, else $FABRIC_URL, else
     *  ./fabric-data (a directory: file://). */
    static String url(CaseInsensitiveStringMap options) {
        String url = optionUrl(options);
        if (url == null && SparkSession.getActiveSession().isDefined()) {
            url = SparkSession.getActiveSession().get().conf().get("spark.fabric.url", null);
        }
        url = url != null ? url : System.getenv("FABRIC_URL");
        return url != null ? url : "./fabric-data";
    }

    /** The readers' rack fixed on the driver: option clientRack, else the session's conf spark.fabric.clientRack. */
    private static String clientRack(CaseInsensitiveStringMap options) {
        String option = options.get("clientRack");
        if (option != null) {
            return Racks.checked(option, "fabric source option 'clientRack'");
        }
        String conf = SparkSession.getActiveSession().isDefined()
            ? SparkSession.getActiveSession().get().conf().get(Racks.CONF, null) : null;
        return conf == null ? null : Racks.checked(conf, "Spark conf " + Racks.CONF);
    }

    /** groupIdPrefix, checked so that the group ids made from it are valid. */
    private static String groupIdPrefix(CaseInsensitiveStringMap options) {
        String prefix = options.get("groupIdPrefix");
        if (prefix == null) {
            return null;
        }
        if (prefix.isBlank()) {
            throw OptionError.invalid("groupIdPrefix", prefix, "must not be empty");
        }
        try {
            Names.group(prefix + "-".repeat(GENERATED_GROUP_SUFFIX));
        } catch (IllegalArgumentException e) {
            throw OptionError.invalid("groupIdPrefix", prefix.substring(0, Math.min(80, prefix.length())),
                                      "the group ids made from it (<prefix>-<uuid>) are invalid: " + e.getMessage());
        }
        return prefix;
    }

    /** Where the read starts: startingOffsets, else earliest for a batch and latest for a stream. */
    OffsetSpec starting(boolean streaming) {
        return starting != null ? starting : OffsetSpec.of(streaming ? "latest" : "earliest");
    }

    /** Where a batch read ends: endingOffsets, else latest. */
    OffsetSpec endingOrLatest() {
        return ending != null ? ending : OffsetSpec.of("latest");
    }

    /** Refuses what a batch read cannot take: a stream's admission options, a start at latest, an end at earliest. */
    void checkBatch() {
        streamingOnly.forEach((name, value) -> {
            throw OptionError.invalid(name, value, "applies to streaming queries only (readStream)");
        });
        starting(false).checkBatch("starting");
        endingOrLatest().checkBatch("ending");
    }

    /** Refuses an end given to a stream. */
    void checkStream() {
        if (ending != null) {
            throw new IllegalArgumentException("endingOffsets/endingTimestamp apply to batch queries only "
                + "(spark.read); a streaming query reads until it is stopped (or use trigger(availableNow=True))");
        }
    }

    /** The fabric the options name: url, or kafka.bootstrap.servers (host:port[,host:port]) as the fabric:// URL of
     *  those coordinator services, a value with a scheme kept as it is (fabric.client.url.bootstrap_url's rule);
     *  refused where the servers are not host:port pairs, or where the two name different fabrics. */
    static String optionUrl(CaseInsensitiveStringMap options) {
        String url = options.get("url");
        String servers = options.get(BOOTSTRAP);
        if (servers == null) {
            return url;
        }
        String named = servers;
        if (!servers.contains("://")) {
            List<String> listed = new ArrayList<>();
            for (String server : servers.split(",", -1)) {
                String address = server.strip();
                int colon = address.lastIndexOf(':');
                String port = colon < 0 ? "" : address.substring(colon + 1);
                if (colon < 1 || port.isEmpty() || !port.chars().allMatch(Character::isDigit)) {
                    throw new IllegalArgumentException("option '" + BOOTSTRAP + "': bootstrap servers are "
                        + "host:port[,host:port] (a coordinator service's), got '" + servers + "'; or name the "
                        + "fabric by URL: file:///dir for an embedded one");
                }
                listed.add(address);
            }
            named = "fabric://" + String.join(",", listed);
        }
        if (url != null && !url.equals(named)) {
            throw new IllegalArgumentException("options 'url' and '" + BOOTSTRAP + "' name different fabrics; give one "
                + "of them (" + BOOTSTRAP + " host:port[,host:port] is url fabric://host:port[,host:port])");
        }
        return named;
    }

    private static void refuseUnknown(CaseInsensitiveStringMap options) {
        List<String> kafka = new ArrayList<>();
        List<String> unknown = new ArrayList<>();
        for (String name : options.asCaseSensitiveMap().keySet()) {
            String lower = name.toLowerCase();
            if (lower.startsWith("kafka.") && !lower.equals(BOOTSTRAP)) {
                kafka.add("'" + name + "': " + KAFKA_EQUIVALENTS.getOrDefault(lower.substring("kafka.".length()),
                    "a Kafka client config with no fabric equivalent; remove it"));
            } else if (!lower.equals("path") && KNOWN.stream().noneMatch(known -> known.equalsIgnoreCase(name))) {
                unknown.add("'" + name + "'");
            }
        }
        if (!kafka.isEmpty()) {
            kafka.sort(null);
            throw new IllegalArgumentException("the fabric source has no Kafka client to pass 'kafka.' options to; "
                                               + String.join("; ", kafka));
        }
        if (!unknown.isEmpty()) {
            unknown.sort(null);
            throw new IllegalArgumentException("unknown fabric source option(s) [" + String.join(", ", unknown)
                                               + "]; known options: " + String.join(", ", KNOWN));
        }
    }

    private static long positive(CaseInsensitiveStringMap options, String name) {
        String text = options.get(name);
        if (text == null) {
            return 0;
        }
        try {
            long value = Long.parseLong(text.strip());
            if (value >= 1) {
                return value;
            }
        } catch (NumberFormatException e) {
            // refused below
        }
        throw OptionError.invalid(name, text, "must be a positive whole number");
    }

    private static long durationMs(CaseInsensitiveStringMap options, String name) {
        String text = options.get(name);
        if (text == null) {
            return DEFAULT_MAX_TRIGGER_DELAY_MS;
        }
        Matcher match = DURATION.matcher(text.strip().toLowerCase());
        if (!match.matches()) {
            throw OptionError.invalid(name, text, "must be a duration such as 500ms, 30s, 5m, 1h or 1d (a bare "
                                                  + "number is milliseconds)");
        }
        long amount = Long.parseLong(match.group(1));
        String unit = match.group(2) == null ? "ms" : match.group(2);
        return switch (unit) {
            case "us" -> amount / 1000;
            case "s" -> amount * 1000;
            case "m", "min" -> amount * 60_000;
            case "h" -> amount * 3_600_000;
            case "d" -> amount * 86_400_000;
            default -> amount;
        };
    }

    private static boolean bool(CaseInsensitiveStringMap options, String name, boolean otherwise) {
        String text = options.get(name);
        if (text == null) {
            return otherwise;
        }
        String value = text.strip().toLowerCase();
        if (!value.equals("true") && !value.equals("false")) {
            throw OptionError.invalid(name, text, "must be true or false");
        }
        return value.equals("true");
    }
}
