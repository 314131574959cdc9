package io.sparkfabric.connector;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.Closeable;
import java.io.IOException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.apache.arrow.memory.BufferAllocator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** A task's fetches of its partition, from `position()` on, over the fabric protocol, as format("fabric")'s tasks
 *  make them (sources/reading.py): a leader that moves or is down until the controller elects another is retried
 *  with fresh metadata (Retries); offsets retention deleted, or that a new leader no longer
 *  has, fail the query with the failOnDataLoss message, or are skipped when the option is false. A bounded task
 *  sends its next fetch as soon as the last one's answer is in, and reads it on another thread (`sendAhead`): one
 *  fetch ahead at most. */
final class PartitionFetches implements Closeable {
    static final int FETCH_BYTES = 32 << 20;
    private static final ExecutorService READERS = Executors.newCachedThreadPool(runnable -> {
        Thread thread = new Thread(runnable, "fabric-fetch-ahead");
        thread.setDaemon(true);
        return thread;
    });
    private static final Logger LOG = LoggerFactory.getLogger(PartitionFetches.class);

    private final FabricInputPartition task;
    private final BufferAllocator allocator;  // the task's: where fetched payloads are read into
    private final TopicPartition tp;
    private final String name;
    private String address;  // the leader's (or the coordinator's)
    private int leaderEpoch;
    private Racks.Follower near;  // the in-sync follower in the task's rack that serves it, while it can
    private ProtocolClient client;
    private String connected;  // the address `client` is connected to
    private long position;
    // the answer of the fetch sent ahead on `client` (read on a thread of READERS), from where, from a follower
    private CompletableFuture<ProtocolClient.Fetched> ahead;
    private long aheadOffset;
    private boolean aheadFromFollower;

    PartitionFetches(FabricInputPartition task, BufferAllocator allocator) {
        this.task = task;
        this.allocator = allocator;
        this.tp = new TopicPartition(task.topic(), task.partition());
        this.name = tp.toString();
        this.address = task.address();
        this.leaderEpoch = task.leaderEpoch();
        this.near = Racks.near(Racks.task(task.rack()), task.followers());
        this.position = task.from();
    }

    /** The next offset to fetch. */
    long position() {
        return position;
    }

    /** Past `offset`: the batches up to it were taken (an empty batch's, too, which says where to read next). */
    void moveTo(long offset) {
        position = Math.max(position, offset);
    }

    /** The batches from position() below the task's end, or, for an open task (Long.MAX_VALUE), at the log's end
     *  the ones that come within `waitMs`: an empty answer then, or once a lost range ended a bounded task. */
    ProtocolClient.Fetched fetch(long waitMs) throws IOException {
        Retries retries = new Retries("fetch " + name + " at " + position);
        while (true) {
            IOException failure;
            try {
                ProtocolClient.Fetched answer = near == null ? call(address, false, waitMs) : nearby(waitMs);
                if (answer.result().size() > 0 || task.open()) {
                    return answer;
                }
                answer.close();
                failure = behindTheTask();
            } catch (FabricException e) {
                if (!"OffsetOutOfRangeError".equals(e.type())) {
                    failure = e;
                } else if (skippedLostOffsets()) {
                    continue;
                } else {
                    failure = behindTheTask();  // past the log's end: as an answer with nothing
                }
            } catch (IOException e) {  // no answer: the server is down or paused; the controller moves the leader
                failure = new IOException("the server of " + name + " at " + address + " did not answer: " + e, e);
                disconnect();  // a refusal leaves the connection sound: call() moves it if the leader moved
            }
            if (failure == null || !retries.again(failure)) {
                if (failure == null || failure instanceof FabricException refusal
                        && "OffsetNotAvailableError".equals(refusal.type())) {
                    return lost();
                }
                throw failure;
            }
            relocate();
        }
    }

    /** A bounded task's partition ends at or before position(), below the task's end: null where that is
     *  loss at once (the coordinator's own partition has no leader to catch up: a log re-created shorter; as in
     *  sources/reading.py), else the retriable error (a new leader yet to learn its high watermark from its
     *  followers: lost only if that does not come within the retry time). */
    private FabricException behindTheTask() throws IOException {
        if (leaderEpoch < 0 && coordinatorEnd() <= position) {
            return null;
        }
        return new FabricException("OffsetNotAvailableError", name + " ends at or before offset " + position
            + ", below the " + task.until() + " this read was planned to: its leader is catching up");
    }

    /** The rest of the task's range is no longer in the log: reported as failOnDataLoss says, and skipped. */
    private ProtocolClient.Fetched lost() throws IOException {
        DataLoss.report("offsets " + position + " to " + (task.until() - 1) + " of topic '" + task.topic()
                        + "' partition " + task.partition() + " are no longer in the log", task.failOnDataLoss());
        position = task.until();
        return new ProtocolClient.Fetched(ProtocolClient.JSON.createArrayNode(), allocator.getEmpty());
    }

    /** The end of the coordinator's own partition now, read again on a connection of its own (the task's may have
     *  a fetch sent ahead), so that an empty fetch read a moment before another process appended is not loss. */
    private long coordinatorEnd() throws IOException {
        try (ProtocolClient state = ProtocolClient.connect(address, task.url(), Planner.TIMEOUT_MS)) {
            return state.call("partition_state", Planner.partitionArgs(tp)).result().path("end_offset").asLong();
        }
    }

    /** A fetch at the follower in the task's rack, or at the leader when that follower has nothing yet (its high
     *  watermark, which bounds what a follower serves, is behind the leader's, which the task's end came from). A
     *  follower that refuses or does not answer is given up for the leader for the rest of the task. */
    private ProtocolClient.Fetched nearby(long waitMs) throws IOException {
        try {
            ProtocolClient.Fetched answer = call(near.address(), true, waitMs);
            if (answer.result().size() > 0 || task.open()) {
                return answer;
            }
            answer.close();
        } catch (IOException e) {
            LOG.warn("{}: the in-sync follower in rack {} at {} cannot serve it ({}); reading from the leader", name,
                     near.rack(), near.address(), e.getMessage());
            near = null;
            disconnect();
        }
        return call(address, false, waitMs);
    }

    /** The fetch from position() at `at` (a follower's if `fromFollower`): the answer of the one sent ahead for it,
     *  if any; else a fetch sent now. A bounded task then sends the next fetch ahead (`sendAhead`). */
    private ProtocolClient.Fetched call(String at, boolean fromFollower, long waitMs) throws IOException {
        if (client != null && (!at.equals(connected) || (ahead != null
                && (aheadOffset != position || aheadFromFollower != fromFollower)))) {
            disconnect();  // (a fetch sent ahead that is not this one: never expected, its answer goes with it)
        }
        if (client == null) {
            client = ProtocolClient.connect(at, task.url(), Planner.TIMEOUT_MS);
            connected = at;
        }
        ProtocolClient.Fetched answer;
        if (ahead != null) {
            CompletableFuture<ProtocolClient.Fetched> sent = ahead;
            ahead = null;
            answer = joined(sent);
        } else {
            answer = client.receive(client.send("fetch", fetchArgs(position, fromFollower, waitMs)), allocator);
        }
        sendAhead(answer, fromFollower);
        return answer;
    }

    /** Send the fetch that follows `answer`'s batches and read its answer on another thread, so that the server
     *  reads it and it crosses the network while Spark takes in these: a bounded task's, where the server says how
     *  many records each batch holds. A failure to send leaves it to the next fetch, on a new connection. */
    private void sendAhead(ProtocolClient.Fetched answer, boolean fromFollower) {
        JsonNode runs = answer.result();
        if (task.open() || runs.size() == 0 || !runs.get(runs.size() - 1).has("records")) {
            return;
        }
        JsonNode last = runs.get(runs.size() - 1);
        long next = last.path("offset").asLong() + last.path("records").asLong();
        if (next >= task.until()) {
            return;
        }
        try {
            long id = client.send("fetch", fetchArgs(next, fromFollower, 0));
            ProtocolClient reading = client;
            aheadOffset = next;
            aheadFromFollower = fromFollower;
            ahead = CompletableFuture.supplyAsync(() -> {
                try {
                    return reading.receive(id, allocator);
                } catch (IOException e) {
                    throw new CompletionException(e);
                }
            }, READERS);
        } catch (IOException e) {
            LOG.info("{}: could not send the next fetch ahead ({}); it is sent when needed", name, e.getMessage());
            try {
                disconnect();
            } catch (IOException closing) {
                LOG.debug("{}: closing its connection: {}", name, closing.getMessage());
            }
        }
    }

    /** The answer read ahead, or the error reading it raised. */
    private static ProtocolClient.Fetched joined(CompletableFuture<ProtocolClient.Fetched> answer) throws IOException {
        try {
            return answer.join();
        } catch (CompletionException e) {
            if (e.getCause() instanceof IOException io) {
                throw io;
            }
            throw e;
        }
    }

    private ObjectNode fetchArgs(long offset, boolean fromFollower, long waitMs) {
        ObjectNode args = ProtocolClient.args();
        args.put("topic", task.topic());
        args.put("partition", task.partition());
        args.put("offset", offset);
        args.put("max_bytes", FETCH_BYTES);
        if (task.open()) {
            args.put("max_wait_ms", waitMs);
        } else {
            args.put("end_offset", task.until());
        }
        if (leaderEpoch >= 0) {
            args.put("leader_epoch", leaderEpoch);
            args.put("topic_id", task.topicId());
        }
        if (fromFollower) {
            args.put("from_follower", true);
        }
        return args;
    }

    /** Where the partition is read now, from fresh metadata; a failure to learn it is left to the next fetch. */
    private void relocate() {
        try {
            Planner.PartitionAt at = locate();
            address = at.address();
            leaderEpoch = at.epoch();
        } catch (Exception e) {
            LOG.info("{}: no fresh metadata yet: {}", name, e.getMessage());
        }
    }

    private Planner.PartitionAt locate() throws Exception {
        try (Planner planner = new Planner(task.url())) {
            return planner.locate(tp, task.topicId());
        }
    }

    /** After an OffsetOutOfRangeError: whether position() was below the log's start (retention deleted offsets
     *  this task was to read), and so moved to it, the loss reported. */
    private boolean skippedLostOffsets() throws IOException {
        long start = Planner.unchecked("read the log start of " + name, () -> Retries.retrying(
            "read the log start of " + name,
            () -> locate().start()));
        if (position >= start) {
            return false;
        }
        DataLoss.report(DataLoss.deleted(tp, position, start), task.failOnDataLoss());
        position = start;
        return true;
    }

    private void disconnect() throws IOException {
        CompletableFuture<ProtocolClient.Fetched> pending = ahead;
        ahead = null;
        try {
            if (client != null) {
                ProtocolClient old = client;
                client = null;
                old.close();
            }
        } finally {
            if (pending != null) {  // its reader stops at the closed socket; what it read is freed
                pending.handle((fetched, failure) -> {
                    if (fetched != null) {
                        fetched.close();
                    }
                    return null;
                }).join();
            }
        }
    }

    @Override
    public void close() throws IOException {
        disconnect();
    }
}
