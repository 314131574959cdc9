package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/** Kafka's per-partition JSON options: {"topicA":{"0":23,"1":-2}} (offsets or timestamps) and, for assign,
 *  {"topicA":[0,1]}; refused as format("fabric") refuses them. */
final class PartitionJson {
    private PartitionJson() {
    }

    /** The partitions `text` maps, to their numbers (`leaf`: "offsets", "timestamps") or, for "partitions", to null. */
    static Map<TopicPartition, Long> parse(String option, String text, String leaf) {
        boolean partitions = leaf.equals("partitions");
        String example = partitions ? "{\"topicA\":[0,1]}" : "{\"topicA\":{\"0\":23,\"1\":-2}}";
        JsonNode parsed;
        try {
            parsed = ProtocolClient.JSON.readTree(text);
        } catch (IOException e) {
            throw OptionError.invalid(option, text, "expected JSON like " + example);
        }
        if (parsed == null || !parsed.isObject() || parsed.isEmpty()) {
            throw OptionError.invalid(option, text, "expected a non-empty JSON object like " + example);
        }
        Map<TopicPartition, Long> out = new TreeMap<>();
        for (Map.Entry<String, JsonNode> topic : parsed.properties()) {
            Names.topic(topic.getKey());
            JsonNode parts = topic.getValue();
            if (partitions ? !parts.isArray() : !parts.isObject()) {
                throw OptionError.invalid(option, text, "topic '" + topic.getKey()
                                          + "' is not mapped to its partitions as in " + example);
            }
            if (partitions && parts.isEmpty()) {  // it would read nothing of the topic, silently
                throw OptionError.invalid(option, text, "topic '" + topic.getKey() + "' lists no partitions: name "
                                          + "them, as in " + example + ", or leave the topic out");
            }
            List<Map.Entry<String, JsonNode>> items = new ArrayList<>();
            if (partitions) {
                parts.forEach(p -> items.add(Map.entry(p.asText(), p)));
            } else {
                items.addAll(parts.properties());
            }
            for (Map.Entry<String, JsonNode> item : items) {
                int partition;
                try {
                    partition = Integer.parseInt(item.getKey());
                } catch (NumberFormatException e) {
                    throw OptionError.invalid(option, text, "partition '" + item.getKey() + "' of topic '"
                                              + topic.getKey() + "' is not a number");
                }
                JsonNode value = item.getValue();
                if (partition < 0 || (!partitions && !(value.isIntegralNumber() && value.canConvertToLong()))) {
                    throw OptionError.invalid(option, text, topic.getKey() + "-" + item.getKey() + ": partitions "
                                              + "are numbers >= 0 and " + leaf + " are integers");
                }
                out.put(new TopicPartition(topic.getKey(), partition),
                        partitions ? null : value.asLong());
            }
        }
        return out;
    }
}
