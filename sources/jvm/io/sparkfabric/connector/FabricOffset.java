package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/** A streaming read's position: the next offset of each partition of the topic, in the JSON Spark's Kafka source and
 *  format("fabric") write to the checkpoint ({"topic": {"0": 23, "1": 5}}). */
final class FabricOffset extends Offset {
    final String topic;
    final SortedMap<Integer, Long> offsets;

    FabricOffset(String topic, Map<Integer, Long> offsets) {
        this.topic = topic;
        this.offsets = new TreeMap<>(offsets);
    }

    @Override
    public String json() {
        ObjectNode partitions = ProtocolClient.JSON.createObjectNode();
        offsets.forEach((partition, offset) -> partitions.put(Integer.toString(partition), offset));
        ObjectNode out = ProtocolClient.JSON.createObjectNode();
        out.set(topic, partitions);
        return out.toString();
    }

    /** The offsets of `topic` in a checkpoint's JSON (other topics' are none of this read's). */
    static FabricOffset parse(String json, String topic) {
        try {
            JsonNode partitions = ProtocolClient.JSON.readTree(json).path(topic);
            Map<Integer, Long> offsets = new TreeMap<>();
            for (Map.Entry<String, JsonNode> entry : partitions.properties()) {
                offsets.put(Integer.parseInt(entry.getKey()), entry.getValue().asLong());
            }
            return new FabricOffset(topic, offsets);
        } catch (IOException e) {
            throw new UncheckedIOException("a checkpoint's offsets are not Kafka's JSON offsets: " + json, e);
        }
    }
}
