package io.sparkfabric.connector;

import org.apache.spark.sql.connector.read.InputPartition;

/** One task: the offsets [from, until) of one partition (until Long.MAX_VALUE: an open task of real-time mode,
 *  reading records as they come), read at `address` (the protocol address of the leader, or of the coordinator for
 *  a topic it keeps) under `leaderEpoch` (-1: the coordinator's) into the columns of `layout`; `hosts` are those of
 *  the in-sync replicas, leader first, where Spark prefers to run the task; a task with a rack (`rack`, fixed on the
 *  driver, else its executor's: Racks) reads from the one of `followers` in it. Offsets found lost fail it unless
 *  `failOnDataLoss` is false. */
record FabricInputPartition(FabricUrl url, String topic, int partition, long from, long until, String address,
                            int leaderEpoch, String topicId, String[] hosts, Racks.Follower[] followers, String rack,
                            Layout layout, boolean failOnDataLoss)
        implements InputPartition {
    /** Whether the task reads on, as records come, with no end (real-time mode). */
    boolean open() {
        return until == Long.MAX_VALUE;
    }

    @Override
    public String[] preferredLocations() {
        return hosts;
    }

    /** The same partition's task over [first, last) instead (minPartitions' splits). */
    FabricInputPartition range(long first, long last) {
        return new FabricInputPartition(url, topic, partition, first, last, address, leaderEpoch, topicId, hosts,
                                        followers, rack, layout, failOnDataLoss);
    }
}
