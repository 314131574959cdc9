package io.sparkfabric.connector;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** Which topics (or exact partitions) a read covers: exactly one of subscribe (comma-separated topics),
 *  subscribePattern (a Java regex over the cluster's topic names, matched anew at every micro-batch, as Kafka's
 *  source does) or assign (JSON {"topicA":[0,1]}), as format("fabric") takes them. */
record Subscription(String kind, List<String> topics, Pattern pattern, SortedSet<TopicPartition> assigned)
        implements Serializable {
    static final List<String> OPTIONS = List.of("subscribe", "subscribePattern", "assign");

    static Subscription of(CaseInsensitiveStringMap options) {
        List<String> given = new ArrayList<>();
        for (String name : OPTIONS) {
            if (options.get(name) != null) {
                given.add(name);
            }
        }
        if (given.size() != 1) {
            throw new IllegalArgumentException("the fabric source needs exactly one of 'subscribe' (comma-separated "
                + "topics), 'subscribePattern' (a regex) or 'assign' (JSON like {\"topicA\":[0,1]}); got "
                + (given.isEmpty() ? "none" : String.join(", ", given)));
        }
        String kind = given.get(0);
        String text = options.get(kind);
        if (kind.equals("subscribe")) {
            Set<String> topics = new LinkedHashSet<>();
            for (String topic : text.split(",")) {
                if (!topic.isBlank()) {
                    topics.add(Names.topic(topic.strip()));
                }
            }
            if (topics.isEmpty()) {
                throw OptionError.invalid(kind, text, "name at least one topic, e.g. subscribe=orders,payments");
            }
            return new Subscription(kind, List.copyOf(topics), null, new TreeSet<>());
        }
        if (kind.equals("subscribePattern")) {
            try {
                return new Subscription(kind, List.of(), Pattern.compile(text), new TreeSet<>());
            } catch (PatternSyntaxException e) {
                throw OptionError.invalid(kind, text, "not a valid regular expression (" + e.getDescription() + ")");
            }
        }
        SortedSet<TopicPartition> assigned = new TreeSet<>(PartitionJson.parse(kind, text, "partitions").keySet());
        return new Subscription(kind, List.of(), null, assigned);
    }

    /** The topics covered now, of the cluster's `existing` ones (a pattern is matched anew on every call). */
    List<String> topicNames(List<String> existing) {
        if (pattern != null) {
            return existing.stream().filter(t -> pattern.matcher(t).matches()).sorted().toList();
        }
        if (!assigned.isEmpty()) {
            return assigned.stream().map(TopicPartition::topic).distinct().toList();
        }
        return topics;
    }

    /** Whether the read covers `partition` of `topic` (of the topics topicNames gave). */
    boolean covers(String topic, int partition) {
        return assigned.isEmpty() || assigned.contains(new TopicPartition(topic, partition));
    }

    /** The subscription in a few words, for the scan's description and errors. */
    String describe() {
        return pattern != null ? "topics matching " + pattern.pattern()
            : !assigned.isEmpty() ? "partitions " + assigned : "topic " + String.join(",", topics);
    }
}
