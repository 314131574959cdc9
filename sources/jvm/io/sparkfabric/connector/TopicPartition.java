package io.sparkfabric.connector;

import java.io.Serializable;
import java.util.Comparator;

/** One partition of one topic: how a read with several topics keys its offsets (Kafka's TopicPartition). */
record TopicPartition(String topic, int partition) implements Comparable<TopicPartition>, Serializable {
    private static final Comparator<TopicPartition> ORDER =
        Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition);

    @Override
    public int compareTo(TopicPartition other) {
        return ORDER.compare(this, other);
    }

    @Override
    public String toString() {
        return topic + "-" + partition;
    }
}
