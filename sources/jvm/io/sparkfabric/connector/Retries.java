package io.sparkfabric.connector;

import java.io.IOException;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** The retries of one call, as format("fabric")'s (fabric.client.retry): a server's retriable refusal (a leader
 *  moving, or down until the controller elects another) or no answer at all is tried again after a backoff of
 *  100 ms, doubled up to 1 s, for up to RETRY_MS; the caller refreshes its metadata before each new try. */
final class Retries {
    static final long RETRY_MS = 120_000;  // Spark Kafka's pollTimeoutMs default, and the Python source's
    /** The server errors a later call may not get (fabric.common.errors, retriable = True). */
    private static final Set<String> RETRIABLE = Set.of("NotLeaderError", "FencedLeaderEpochError",
        "LeaderNotAvailableError", "RequestTimedOutError", "CoordinatorUnavailableError", "OffsetNotAvailableError");
    private static final Logger LOG = LoggerFactory.getLogger(Retries.class);

    /** A call that may fail with what Retries judges. */
    interface Call<T> {
        T call() throws Exception;
    }

    private final String what;
    private final long deadline = System.currentTimeMillis() + RETRY_MS;
    private long backoff = 100;

    Retries(String what) {
        this.what = what;
    }

    /** `call`'s result, retried as `what` while its failures are retriable and time is left. */
    static <T> T retrying(String what, Call<T> call) throws Exception {
        Retries retries = new Retries(what);
        while (true) {
            try {
                return call.call();
            } catch (Exception e) {
                if (!retries.again(e)) {
                    throw e;
                }
            }
        }
    }

    /** Whether `failure` is retried: it is retriable, the backoff ends before the deadline (it is then waited), and
     *  the thread is not interrupted (Spark killing the task, as a stopped query does: its call failed for that). */
    boolean again(Exception failure) throws IOException {
        boolean retriable = failure instanceof FabricException refusal ? RETRIABLE.contains(refusal.type())
                                                                       : failure instanceof IOException;
        long now = System.currentTimeMillis();
        if (!retriable || now + backoff > deadline || Thread.currentThread().isInterrupted()) {
            return false;
        }
        LOG.warn("{}: {}; retrying with fresh metadata for up to {} s more", what, failure.getMessage(),
                 (deadline - now) / 1000);
        try {
            Thread.sleep(backoff);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while retrying " + what, e);
        }
        backoff = Math.min(backoff * 2, 1_000);
        return true;
    }
}
