package io.sparkfabric.connector;

import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Pattern;

/** Topic and group names checked before a read, with the words of fabric.common.names: a name the fabric could
 *  never hold is named at once, not as a missing topic. */
final class Names {
    private static final int MAX_TOPIC_NAME = 249;
    private static final int MAX_GROUP = 1024;
    private static final Pattern LEGAL = Pattern.compile("[A-Za-z0-9._-]+");
    private static final String INTERNAL_PREFIX = "__";
    private static final Set<String> INTERNAL_TOPICS = Set.of("__consumer_offsets");

    private Names() {
    }

    static String topic(String name) {
        if (name.isEmpty() || name.length() > MAX_TOPIC_NAME) {
            throw new IllegalArgumentException("topic name must be 1 to " + MAX_TOPIC_NAME + " characters, got "
                                               + name.length());
        }
        if (name.equals(".") || name.equals("..")) {
            throw new IllegalArgumentException("topic name cannot be '" + name + "'; choose a name with other "
                                               + "characters");
        }
        if (!LEGAL.matcher(name).matches()) {
            Set<String> bad = new TreeSet<>();
            name.codePoints().mapToObj(Character::toString).filter(c -> !LEGAL.matcher(c).matches())
                .forEach(bad::add);
            throw new IllegalArgumentException("topic name '" + name + "' contains illegal characters ['"
                + String.join("', '", bad) + "']; use only ASCII letters, digits, '.', '_' and '-'");
        }
        if (name.startsWith(INTERNAL_PREFIX) && !INTERNAL_TOPICS.contains(name)) {
            throw new IllegalArgumentException("topic name '" + name + "' starts with '" + INTERNAL_PREFIX + "', which "
                + "is reserved for the fabric's internal data; rename it");
        }
        return name;
    }

    static String group(String id) {
        if (id.isEmpty()) {
            throw new IllegalArgumentException("group id must be a non-empty string, got ''; name the consumer group "
                                               + "(Kafka's group.id)");
        }
        if (id.length() > MAX_GROUP) {
            throw new IllegalArgumentException("group id is longer than " + MAX_GROUP + " characters; shorten it");
        }
        return id;
    }
}
