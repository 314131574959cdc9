package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.Closeable;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Callable;

/** The driver's side of a read: the partitions of the topics read, where each is read (its leader, or the
 *  coordinator for a topic kept in its own directory) and their offsets, from the cluster's metadata over the fabric
 *  protocol (`list_topics`, `topic`, `describe_cluster`, `partition_state`, `offset_for_time`, `committed`:
 *  docs/protocol.md), and a stream's group commits (`commit_offsets`). */
final class Planner implements Closeable {
    static final int TIMEOUT_MS = 30_000;

    private final FabricUrl url;
    private final Map<String, String> protocolAddresses = new HashMap<>();  // Flight address -> protocol address
    private final Map<String, ProtocolClient> open = new HashMap<>();  // protocol address -> its connection
    private final Map<String, String> groupInstances = new HashMap<>();  // group -> Flight address serving it
    private String coordinatorAddress;  // the protocol address of the active coordinator instance
    private String coordinatorFlight;  // and its Flight address
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

    /** The columns of a read of `options`' topics, whose value schemas must be one (its failure named). */
    static Layout layout(ReadOptions options) {
        return unchecked("read the metadata of " + options.subscription().describe(), () -> {
            try (Planner planner = new Planner(options.url())) {
                planner.findCoordinator();
                Map<String, String> schemas = new TreeMap<>();  // topic -> its value schema ("": plain)
                for (String topic : planner.topics(options.subscription(), null, true)) {
                    JsonNode schema = planner.topicInfo(topic).path("value_schema");
                    schemas.put(topic, schema.isTextual() ? schema.asText() : "");
                }
                if (new HashSet<>(schemas.values()).size() > 1) {
                    List<String> described = new ArrayList<>();
                    for (Map.Entry<String, String> e : schemas.entrySet()) {
                        described.add(e.getKey() + ": " + (e.getValue().isEmpty() ? "plain (binary value)"
                            : "['" + String.join("', '", Layout.of(e.getValue(), false).valueFields()) + "']"));
                    }
                    throw new IllegalArgumentException("the subscribed topics have different value schemas ("
                        + String.join("; ", described) + "); read topics with different schemas in separate queries");
                }
                String schema = schemas.isEmpty() ? "" : schemas.values().iterator().next();
                return Layout.of(schema.isEmpty() ? null : schema, options.headers());
            }
        });
    }

    private JsonNode topicInfo(String topic) throws IOException {
        ObjectNode name = ProtocolClient.args();
        name.put("name", topic);
        return call(coordinatorAddress, "topic", name);
    }

    /** The topics `subscription` covers now. Those it names must exist, except in a stream that has `read` some
     *  (null: none yet): there those it names or has read that are gone were deleted while it read them, data loss
     *  (with `failOnDataLoss` false, the stream goes on without them). */
    private List<String> topics(Subscription subscription, Set<String> read, boolean failOnDataLoss)
            throws IOException {
        List<String> existing = new ArrayList<>();
        call(coordinatorAddress, "list_topics", ProtocolClient.args()).forEach(t -> existing.add(t.asText()));
        List<String> topics = subscription.topicNames(existing);
        SortedSet<String> gone = new TreeSet<>(subscription.pattern() == null ? topics : List.of());
        gone.removeAll(existing);
        if (read == null && !gone.isEmpty()) {
            throw new FabricException("UnknownTopicError", "topic(s) " + gone + " do not exist in the fabric at "
                + "fabric://" + String.join(",", url.addresses) + "; create them first (fabric topics create NAME), "
                + "fix the subscribe/assign option, or point the read at another fabric (option 'url', or "
                + "$FABRIC_URL in the driver's environment)");
        }
        if (read != null) {
            read.stream().filter(t -> !existing.contains(t)).forEach(gone::add);
        }
        for (String topic : gone) {
            DataLoss.report(DataLoss.topicDeleted(topic), failOnDataLoss);
        }
        return topics.stream().filter(t -> !gone.contains(t)).toList();
    }

    /** Where one partition is read now: its offsets and bytes, its reader's protocol address and leader epoch (-1:
     *  the coordinator's), its topic's id, the hosts of its in-sync replicas. */
    record PartitionAt(TopicPartition tp, long start, long end, long bytes, String address, int epoch,
                       String topicId, String[] hosts, Racks.Follower[] followers) { }

    /** The partitions read, as they are now. */
    record Snapshot(List<PartitionAt> partitions) {
        /** The task of `options` reading [from, until) of `at` (until Long.MAX_VALUE: on, as records come) into the
         *  columns of `layout`. */
        static FabricInputPartition task(ReadOptions options, PartitionAt at, long from, long until, Layout layout) {
            return new FabricInputPartition(options.url(), at.tp().topic(), at.tp().partition(), from,
                                            Math.max(from, until), at.address(), at.epoch(), at.topicId(), at.hosts(),
                                            at.followers(), options.clientRack(), layout, options.failOnDataLoss());
        }

        Map<TopicPartition, Long> ends() {
            Map<TopicPartition, Long> out = new TreeMap<>();
            partitions.forEach(at -> out.put(at.tp(), at.end()));
            return out;
        }
    }

    /** The partitions `subscription` covers now, from the coordinator's metadata and each partition's leader (or
     *  the coordinator, for a topic it keeps in its own directory); a topic it names must exist. */
    Snapshot snapshot(Subscription subscription) throws Exception {
        return snapshot(subscription, null, true);
    }

    /** The partitions a stream that has `read` topics (null: none yet) reads now: a topic it names or has read that
     *  is gone is data loss (`topics`). A leader or coordinator moving or down is retried (Retries). */
    Snapshot snapshot(Subscription subscription, Set<String> read, boolean failOnDataLoss) throws Exception {
        return Retries.retrying("read the partitions of " + subscription.describe(),
                                () -> current(subscription, read, failOnDataLoss));
    }

    /** Where `tp` is read now (asked once), for a task whose leader moved; InconsistentTopicIdError if its topic is
     *  no longer the one of id `topicId` the task was planned on (deleted, and maybe re-created). */
    PartitionAt locate(TopicPartition tp, String topicId) throws Exception {
        findCoordinator();
        String now = topicInfo(tp.topic()).path("topic_id").asText("");
        if (!now.equals(topicId)) {
            throw new FabricException("InconsistentTopicIdError", "topic " + tp.topic() + " was deleted while this "
                + "query read it (its id was " + topicId + ", now " + now + "); start over from a new checkpoint "
                + "location");
        }
        return at(tp, topicId, replicated().get(tp), nodes());
    }

    /** The cluster's nodes by id, from the last describe_cluster. */
    private Map<Integer, JsonNode> nodes() {
        Map<Integer, JsonNode> nodes = new HashMap<>();
        for (JsonNode node : cluster.path("nodes")) {
            nodes.put(node.path("id").asInt(), node);
        }
        return nodes;
    }

    /** The registrations of replicated partitions, from the last describe_cluster (a partition of a topic the
     *  coordinator keeps has none). */
    private Map<TopicPartition, JsonNode> replicated() {
        Map<TopicPartition, JsonNode> replicated = new HashMap<>();
        for (JsonNode p : cluster.path("partitions")) {
            replicated.put(new TopicPartition(p.path("topic").asText(), p.path("partition").asInt()), p);
        }
        return replicated;
    }

    /** The partitions read now, asked once. */
    private Snapshot current(Subscription subscription, Set<String> read, boolean failOnDataLoss) throws Exception {
        findCoordinator();
        Map<Integer, JsonNode> nodes = nodes();
        Map<TopicPartition, JsonNode> replicated = replicated();
        List<PartitionAt> partitions = new ArrayList<>();
        for (String topic : topics(subscription, read, failOnDataLoss)) {
            try {
                partitions.addAll(partitionsOf(topic, subscription, replicated, nodes));
            } catch (FabricException e) {  // listed a moment ago, deleted since: as `topics` finds a deletion
                if (read == null || !"UnknownTopicError".equals(e.type())) {
                    throw e;
                }
                DataLoss.report(DataLoss.topicDeleted(topic), failOnDataLoss);
            }
        }
        return new Snapshot(partitions);
    }

    /** The partitions of `topic` that `subscription` covers, now (UnknownTopicError if it was deleted meanwhile, at
     *  any of the calls). */
    private List<PartitionAt> partitionsOf(String topic, Subscription subscription,
                                           Map<TopicPartition, JsonNode> replicated, Map<Integer, JsonNode> nodes)
            throws Exception {
        JsonNode info = topicInfo(topic);
        int count = info.path("partitions").asInt();
        for (TopicPartition tp : subscription.assigned()) {
            if (tp.topic().equals(topic) && tp.partition() >= count) {
                throw new IllegalArgumentException("assign names " + tp + ", but topic '" + topic
                                                   + "' has partitions 0.." + (count - 1));
            }
        }
        List<PartitionAt> partitions = new ArrayList<>();
        for (int partition = 0; partition < count; partition++) {
            if (subscription.covers(topic, partition)) {
                TopicPartition tp = new TopicPartition(topic, partition);
                partitions.add(at(tp, info.path("topic_id").asText(""), replicated.get(tp), nodes));
            }
        }
        return partitions;
    }

    /** One partition now: at the coordinator when it has no `registration` (a topic it keeps), else at its leader. */
    private PartitionAt at(TopicPartition tp, String topicId, JsonNode registration, Map<Integer, JsonNode> nodes)
            throws Exception {
        if (registration == null) {
            JsonNode state = call(coordinatorAddress, "partition_state", partitionArgs(tp));
            return new PartitionAt(tp, state.path("start_offset").asLong(), state.path("end_offset").asLong(),
                                   state.path("size_bytes").asLong(), coordinatorAddress, -1, topicId, new String[0],
                                   new Racks.Follower[0]);
        }
        if (registration.path("leader").isNull()) {
            throw new FabricException("LeaderNotAvailableError", "partition " + tp + " is offline: none of its "
                + "in-sync replicas " + registration.path("isr") + " is alive");
        }
        JsonNode leader = nodes.get(registration.path("leader").asInt());
        String address = protocolAddress(leader.path("address").asText());
        int epoch = registration.path("leader_epoch").asInt();
        JsonNode state = call(address, "partition_state", leaderArgs(tp, epoch, topicId));
        return new PartitionAt(tp, state.path("start_offset").asLong(), state.path("end_offset").asLong(),
                               state.path("size_bytes").asLong(), address, epoch, topicId,
                               hosts(registration, nodes), followers(registration, nodes));
    }

    /** The partition's in-sync followers that are alive and have a rack, with their protocol addresses; one whose
     *  address cannot be learned now is left out (its tasks read from the leader). */
    private Racks.Follower[] followers(JsonNode registration, Map<Integer, JsonNode> nodes) {
        List<Racks.Follower> out = new ArrayList<>();
        for (JsonNode replica : registration.path("isr")) {
            JsonNode node = nodes.get(replica.asInt());
            if (replica.asInt() == registration.path("leader").asInt() || node == null
                    || !node.path("alive").asBoolean() || !node.path("rack").isTextual()) {
                continue;
            }
            try {
                out.add(new Racks.Follower(node.path("rack").asText(), protocolAddress(node.path("address").asText())));
            } catch (Exception e) {  // not answering now
                continue;
            }
        }
        return out.toArray(new Racks.Follower[0]);
    }

    /** The first offset of `at` whose record is `timestampMs` or later, null where none is (`offset_for_time`). */
    Long offsetForTime(PartitionAt at, long timestampMs) throws Exception {
        ObjectNode args = at.epoch() < 0 ? partitionArgs(at.tp()) : leaderArgs(at.tp(), at.epoch(), at.topicId());
        args.put("timestamp_us", timestampMs * 1000);
        JsonNode found = call(at.address(), "offset_for_time", args);
        return found == null || found.isNull() ? null : found.asLong();
    }

    /** `group`'s committed offsets in `topics` (`committed`), retried while the coordinator cannot answer yet (its
     *  offsets loading, or a failover: CoordinatorUnavailableError), as the Python client's calls are. */
    Map<TopicPartition, Long> committed(String group, Collection<String> topics) throws Exception {
        ObjectNode args = ProtocolClient.args();
        args.put("group", group);
        ArrayNode names = args.putArray("topics");
        topics.forEach(names::add);
        Map<TopicPartition, Long> out = new HashMap<>();
        JsonNode rows = Retries.retrying("read the offsets of group " + group,
                                         () -> groupCall(group, "committed", args));
        for (JsonNode row : rows) {
            out.put(new TopicPartition(row.path("topic").asText(), row.path("partition").asInt()),
                    row.path("offset").asLong());
        }
        return out;
    }

    /** Commits `offsets` as `group`'s (`commit_offsets`), retried as `committed` is (a commit is idempotent). */
    void commit(String group, Map<TopicPartition, Long> offsets) throws Exception {
        ObjectNode args = ProtocolClient.args();
        args.put("group", group);
        ArrayNode rows = args.putArray("offsets");
        offsets.forEach((tp, offset) -> rows.addArray().add(tp.topic()).add(tp.partition()).add(offset));
        Retries.retrying("commit the offsets of group " + group, () -> groupCall(group, "commit_offsets", args));
    }

    /** `type`'s answer about `group`, asked once (Retries tries again) of the coordinator instance serving it: the
     *  one that last said it does, else the active one. The instances of a zk:// store share the groups out
     *  (fabric/server/offsets_ownership.py): one asked about another's group names it (`redirect`), is asked in
     *  turn and remembered as the group's. An instance that does not answer, does not serve the group with none
     *  other named (a failover under way), or names yet another after a redirect, is forgotten as the group's: an
     *  IOException, which Retries retries, starting again at the active instance (findCoordinator). */
    private JsonNode groupCall(String group, String type, ObjectNode args) throws Exception {
        String instance = groupInstances.get(group);
        if (instance == null) {
            findCoordinator();
            instance = coordinatorFlight;
        }
        for (boolean redirected = false; ; redirected = true) {
            try {
                JsonNode answer = call(protocolAddress(instance), type, args);
                if (redirected) {
                    groupInstances.put(group, instance);  // the group's next calls go there
                }
                return answer;
            } catch (FabricException e) {
                if (!"NotActiveCoordinator".equals(e.type())) {
                    throw e;
                }
                groupInstances.remove(group);
                String named = redirect(e, instance);
                if (named == null || redirected) {
                    throw new IOException(e.getMessage(), e);
                }
                instance = named;
            } catch (RuntimeException | InterruptedException e) {
                throw e;
            } catch (Exception e) {
                groupInstances.remove(group);
                throw e instanceof IOException io ? io : new IOException(instance + " did not answer: " + e, e);
            }
        }
    }

    /** The Flight address of the instance `refusal` sends a call that `instance` refused to: a NotActiveCoordinator
     *  naming another one; else null. */
    private static String redirect(FabricException refusal, String instance) {
        String named = refusal.active();
        return "NotActiveCoordinator".equals(refusal.type()) && named != null && !named.isEmpty()
            && !named.equals(instance) ? named : null;
    }

    /** `type`'s answer from the server at `address`, over this planner's connection to it (opened on first use,
     *  kept for the next calls: a stream plans every micro-batch). A kept connection that fails is replaced by a new
     *  one once (the server may have closed it; every request here may be made twice); a new one that fails is
     *  forgotten with the server's protocol address (a node restarted may serve the protocol on another port). */
    private JsonNode call(String address, String type, ObjectNode args) throws IOException {
        ProtocolClient kept = open.remove(address);
        if (kept != null) {
            try {
                return answer(address, kept, type, args);
            } catch (FabricException e) {
                throw e;
            } catch (IOException e) {
                kept.close();  // the server may have closed it: once more, anew
            }
        }
        ProtocolClient server = null;
        try {
            server = ProtocolClient.connect(address, url, TIMEOUT_MS);
            return answer(address, server, type, args);
        } catch (FabricException e) {
            throw e;
        } catch (IOException e) {
            if (server != null) {
                server.close();
            }
            protocolAddresses.values().remove(address);
            throw e;
        }
    }

    /** `type`'s answer over `server`, which is kept for the next call once it answered (a refusal too: the
     *  connection is sound). */
    private JsonNode answer(String address, ProtocolClient server, String type, ObjectNode args) throws IOException {
        try {
            JsonNode result = server.call(type, args).result();
            open.put(address, server);
            return result;
        } catch (FabricException e) {
            open.put(address, server);
            throw e;
        }
    }

    /** Closes the connections this planner kept open. */
    @Override
    public void close() throws IOException {
        for (ProtocolClient server : open.values()) {
            server.close();
        }
        open.clear();
    }

    private static ObjectNode leaderArgs(TopicPartition tp, int epoch, String topicId) {
        ObjectNode args = partitionArgs(tp);
        args.put("leader_epoch", epoch);
        args.put("topic_id", topicId);
        return args;
    }

    static ObjectNode partitionArgs(TopicPartition tp) {
        ObjectNode args = ProtocolClient.args();
        args.put("topic", tp.topic());
        args.put("partition", tp.partition());
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

    /** Finds the active coordinator instance (a standby refuses with NotActiveCoordinator), the last one found
     *  first, and reads the cluster's metadata from it. */
    private void findCoordinator() throws Exception {
        Exception last = null;
        List<String> order = new ArrayList<>(url.addresses);
        if (coordinatorFlight != null && order.remove(coordinatorFlight)) {
            order.add(0, coordinatorFlight);
        }
        for (String flight : order) {
            try {
                String address = protocolAddress(flight);
                cluster = call(address, "describe_cluster", ProtocolClient.args());
                coordinatorAddress = address;
                coordinatorFlight = flight;
                return;
            } catch (FabricException e) {
                if (!"NotActiveCoordinator".equals(e.type())) {
                    throw e;
                }
                last = e;
            } catch (Exception e) {  // not answering: the next instance
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
                                                    url.tls ? Tls.http2(url.caPem) : null, TIMEOUT_MS);
            protocolAddresses.put(flight, known);
        }
        return known;
    }
}
