package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/** The driver's side of a read: the topic's partitions, where each is read (its leader, or the coordinator for a
 *  topic kept in its own directory) and the offsets to read, from the cluster's metadata over the fabric protocol
 *  (`topic`, `describe_cluster`, `partition_state`: docs/protocol.md). */
final class Planner {
    static final int TIMEOUT_MS = 30_000;

    private final FabricUrl url;
    private final Map<String, String> protocolAddresses = new HashMap<>();  // Flight address -> protocol address
    private String coordinatorAddress;  // the protocol address of the active coordinator instance
    private JsonNode cluster;  // its describe_cluster answer

    Planner(FabricUrl url) {
        this.url = url;
    }

    /** What Spark's interfaces let a planning step throw: `step`'s result, its checked failure as an
     *  IllegalStateException saying `what` could not be done and why. */
    static <T> T unchecked(String what, Callable<T> step) {
        try {
            return step.call();
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException("cannot " + what + ": " + e.getMessage(), e);
        }
    }

    /** The columns of a read of `options`' topic (its metadata read), its failure named. */
    static Layout layout(ReadOptions options) {
        return unchecked("read the metadata of topic " + options.topic(), () -> {
            try (ProtocolClient coordinator = new Planner(options.url()).coordinator()) {
                return layout(topicInfo(coordinator, options.topic()), options.headers());
            }
        });
    }

    private static JsonNode topicInfo(ProtocolClient coordinator, String topic) throws IOException {
        ObjectNode name = ProtocolClient.args();
        name.put("name", topic);
        return coordinator.call("topic", name).result();
    }

    private static Layout layout(JsonNode info, boolean headers) throws IOException {
        JsonNode schema = info.path("value_schema");
        return Layout.of(schema.isNull() || schema.isMissingNode() ? null : schema.asText(), headers);
    }

    /** Where one partition is read now: its offsets, its reader's protocol address and leader epoch (-1: the
     *  coordinator's), the hosts of its in-sync replicas. */
    record PartitionAt(int partition, long start, long end, String address, int epoch, String[] hosts) { }

    /** The topic as it is now: its id and every partition's place and offsets. */
    record Snapshot(String topic, String topicId, List<PartitionAt> partitions) {
        /** The task of `options` reading [from, until) of `at` (until Long.MAX_VALUE: on, as records come) into the
         *  columns of `layout`. */
        FabricInputPartition task(ReadOptions options, PartitionAt at, long from, long until, Layout layout) {
            return new FabricInputPartition(options.url(), topic, at.partition(), from, Math.max(from, until),
                                            at.address(), at.epoch(), topicId, at.hosts(), layout,
                                            options.failOnDataLoss());
        }
    }

    /** The tasks reading the topic of `options` from `starting` to `ending` ("earliest" or "latest" each) into
     *  `layout`. */
    List<FabricInputPartition> plan(ReadOptions options, String starting, String ending, Layout layout)
            throws Exception {
        Snapshot now = snapshot(options.topic());
        List<FabricInputPartition> tasks = new ArrayList<>();
        for (PartitionAt at : now.partitions()) {
            tasks.add(now.task(options, at, "latest".equals(starting) ? at.end() : at.start(),
                               "earliest".equals(ending) ? at.start() : at.end(), layout));
        }
        return tasks;
    }

    /** `topic` now, from the coordinator's metadata and each partition's leader (or the coordinator, for a topic
     *  it keeps in its own directory); a leader or coordinator moving or down is retried (Retries). */
    Snapshot snapshot(String topic) throws Exception {
        return Retries.retrying("read the partitions of topic " + topic, () -> current(topic));
    }

    /** `topic` now, asked once. */
    private Snapshot current(String topic) throws Exception {
        try (ProtocolClient coordinator = coordinator()) {
            JsonNode info = topicInfo(coordinator, topic);
            Map<Integer, JsonNode> nodes = new HashMap<>();
            for (JsonNode node : cluster.path("nodes")) {
                nodes.put(node.path("id").asInt(), node);
            }
            Map<Integer, JsonNode> replicated = new HashMap<>();
            for (JsonNode p : cluster.path("partitions")) {
                if (topic.equals(p.path("topic").asText())) {
                    replicated.put(p.path("partition").asInt(), p);
                }
            }
            String topicId = info.path("topic_id").asText("");
            List<PartitionAt> partitions = new ArrayList<>();
            for (int partition = 0; partition < info.path("partitions").asInt(); partition++) {
                JsonNode registration = replicated.get(partition);
                if (registration == null) {  // kept in the coordinator's directory: it serves the partition
                    JsonNode state = coordinator.call("partition_state", partitionArgs(topic, partition)).result();
                    partitions.add(new PartitionAt(partition, state.path("start_offset").asLong(),
                                                   state.path("end_offset").asLong(), coordinatorAddress, -1,
                                                   new String[0]));
                    continue;
                }
                if (registration.path("leader").isNull()) {
                    throw new FabricException("LeaderNotAvailableError", "partition " + topic + "-" + partition
                        + " is offline: none of its in-sync replicas " + registration.path("isr") + " is alive");
                }
                JsonNode leader = nodes.get(registration.path("leader").asInt());
                String address = protocolAddress(leader.path("address").asText());
                int epoch = registration.path("leader_epoch").asInt();
                ObjectNode args = partitionArgs(topic, partition);
                args.put("leader_epoch", epoch);
                args.put("topic_id", topicId);
                JsonNode state;
                try (ProtocolClient node = ProtocolClient.connect(address, url.token, TIMEOUT_MS)) {
                    state = node.call("partition_state", args).result();
                } catch (FabricException e) {
                    throw e;
                } catch (IOException e) {  // no answer: a node restarted may serve the protocol on another port
                    protocolAddresses.values().remove(address);
                    throw e;
                }
                partitions.add(new PartitionAt(partition, state.path("start_offset").asLong(),
                                               state.path("end_offset").asLong(), address, epoch,
                                               hosts(registration, nodes)));
            }
            return new Snapshot(topic, topicId, partitions);
        }
    }

    /** Where `partition` of `topic` is read now (asked once), for a task whose leader moved; InconsistentTopicIdError
     *  if the topic is no longer the one of id `topicId` the task was planned on (deleted, and maybe re-created). */
    PartitionAt locate(String topic, int partition, String topicId) throws Exception {
        Snapshot now = current(topic);
        if (!now.topicId().equals(topicId)) {
            throw new FabricException("InconsistentTopicIdError", "topic " + topic + " was deleted while this query "
                + "read it (its id was " + topicId + ", now " + now.topicId() + "); start over from a new checkpoint "
                + "location");
        }
        for (PartitionAt at : now.partitions()) {
            if (at.partition() == partition) {
                return at;
            }
        }
        throw new FabricException("UnknownPartitionError", "topic " + topic + " has no partition " + partition
                                  + " any more");
    }

    private static ObjectNode partitionArgs(String topic, int partition) {
        ObjectNode args = ProtocolClient.args();
        args.put("topic", topic);
        args.put("partition", partition);
        return args;
    }

    /** The hosts of the partition's in-sync replicas that are alive, its leader first. */
    private static String[] hosts(JsonNode registration, Map<Integer, JsonNode> nodes) {
        List<String> out = new ArrayList<>();
        List<Integer> order = new ArrayList<>();
        order.add(registration.path("leader").asInt());
        for (JsonNode replica : registration.path("isr")) {
            if (!order.contains(replica.asInt())) {
                order.add(replica.asInt());
            }
        }
        for (int id : order) {
            JsonNode node = nodes.get(id);
            if (node != null && node.path("alive").asBoolean()) {
                String address = node.path("address").asText();
                String host = address.substring(0, address.lastIndexOf(':'));
                if (!out.contains(host)) {
                    out.add(host);
                }
            }
        }
        return out.toArray(new String[0]);
    }

    /** A connection to the active coordinator instance (a standby refuses with NotActiveCoordinator), its
     *  metadata read. */
    private ProtocolClient coordinator() throws Exception {
        Exception last = null;
        for (String flight : url.addresses) {
            ProtocolClient client = null;
            try {
                client = ProtocolClient.connect(protocolAddress(flight), url.token, TIMEOUT_MS);
                cluster = client.call("describe_cluster", ProtocolClient.args()).result();
                coordinatorAddress = protocolAddress(flight);
                return client;
            } catch (FabricException e) {
                if (client != null) {
                    client.close();
                }
                if (!"NotActiveCoordinator".equals(e.type())) {
                    throw e;
                }
                last = e;
            } catch (Exception e) {  // not answering: the next instance
                if (client != null) {
                    client.close();
                }
                last = e;
            }
        }
        throw new IOException("no coordinator answered at " + String.join(", ", url.addresses) + ": " + last, last);
    }

    private String protocolAddress(String flight) throws Exception {
        String known = protocolAddresses.get(flight);
        if (known == null) {
            int colon = flight.lastIndexOf(':');
            known = FlightDiscovery.protocolAddress(flight.substring(0, colon),
                                                    Integer.parseInt(flight.substring(colon + 1)), url.token,
                                                    TIMEOUT_MS);
            protocolAddresses.put(flight, known);
        }
        return known;
    }
}
