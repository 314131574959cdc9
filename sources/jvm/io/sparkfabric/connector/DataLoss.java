package io.sparkfabric.connector;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Offsets a read was to take that are gone (retention deleted them, or a new leader no longer has them): the query
 *  fails with format("fabric")'s failOnDataLoss message, or, told it may, logs them and goes on past them. */
final class DataLoss {
    private static final Logger LOG = LoggerFactory.getLogger(DataLoss.class);

    private DataLoss() {
    }

    /** Report `what` was lost: a DataLossError when `fail` (failOnDataLoss, the default), else a warning. */
    static void report(String what, boolean fail) throws FabricException {
        if (fail) {
            throw new FabricException("DataLossError", what + ". Some data may have been lost. If this is expected, "
                + "set the option failOnDataLoss=false to skip it, or start over from a new checkpoint location");
        }
        LOG.warn("{}; skipping it because failOnDataLoss=false", what);
    }

    /** How to name offsets [from, start) that retention deleted before the query read them. */
    static String deleted(String topic, int partition, long from, long start) {
        return "offsets " + from + " to " + (start - 1) + " of topic '" + topic + "' partition " + partition
               + " were deleted (retention) before the query read them; the log now starts at " + start;
    }
}
