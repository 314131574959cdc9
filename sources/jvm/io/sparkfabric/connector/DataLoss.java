package io.sparkfabric.connector;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Records a read planned to read that are gone (retention, a topic deleted): with failOnDataLoss the read fails,
 *  worded as format("fabric") words it; without, a warning, and the read goes on without them. */
final class DataLoss {
    private static final Logger LOG = LoggerFactory.getLogger(DataLoss.class);

    private DataLoss() {
    }

    /** How to name offsets [from, start) of `tp` that retention deleted before the query read them. */
    static String deleted(TopicPartition tp, long from, long start) {
        return "offsets " + from + " to " + (start - 1) + " of topic '" + tp.topic() + "' partition "
               + tp.partition() + " were deleted (retention) before the query read them; the log now starts at "
               + start;
    }

    /** How to name a topic deleted while a stream read it. */
    static String topicDeleted(String topic) {
        return "topic '" + topic + "' was deleted while the query was reading it";
    }

    static void report(String lost, boolean failOnDataLoss) {
        if (failOnDataLoss) {
            throw new IllegalStateException(new FabricException("DataLossError", lost + ". Some data may have been "
                + "lost. If this is expected, set the option failOnDataLoss=false to skip it, or start over from a "
                + "new checkpoint location"));
        }
        LOG.warn("{}; skipping it because failOnDataLoss=false", lost);
    }
}
