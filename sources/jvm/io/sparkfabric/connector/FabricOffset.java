package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;

/** A streaming read's position: the next offset of each partition of each topic read, in the JSON Spark's Kafka
 *  source and format("fabric") write to the checkpoint ({"topic": {"0": 23, "1": 5}}), which a single-topic
 *  checkpoint of an earlier JVM reader already is. */
final class FabricOffset extends Offset {
    final SortedMap<TopicPartition, Long> offsets;

    FabricOffset(Map<TopicPartition, Long> offsets) {
        this.offsets = new TreeMap<>(offsets);
    }

    @Override
    public String json() {
        ObjectNode out = ProtocolClient.JSON.createObjectNode();
        offsets.forEach((tp, offset) -> {
            JsonNode partitions = out.get(tp.topic());
            (partitions == null ? out.putObject(tp.topic()) : (ObjectNode) partitions)
                .put(Integer.toString(tp.partition()), offset);
        });
        return out.toString();
    }

    /** The offsets of a checkpoint's JSON. */
    static FabricOffset parse(String json) {
        try {
            Map<TopicPartition, Long> offsets = new TreeMap<>();
            for (Map.Entry<String, JsonNode> topic : ProtocolClient.JSON.readTree(json).properties()) {
                for (Map.Entry<String, JsonNode> entry : topic.getValue().properties()) {
                    offsets.put(new TopicPartition(topic.getKey(), Integer.parseInt(entry.getKey())),
                                entry.getValue().asLong());
                }
            }
            return new FabricOffset(offsets);
        } catch (IOException e) {
            throw new UncheckedIOException("a checkpoint's offsets are not Kafka's JSON offsets: " + json, e);
        }
    }
}
