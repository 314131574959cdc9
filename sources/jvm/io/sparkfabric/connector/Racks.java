package io.sparkfabric.connector;

import java.io.Serializable;

/** Where a task reads from when it has a rack (KIP-392, as format("fabric")'s tasks: fabric.spark.options): the
 *  rack is option clientRack, else conf spark.fabric.clientRack, else $FABRIC_CLIENT_RACK on the task's executor;
 *  an in-sync follower in that rack serves the task, the leader otherwise. */
final class Racks {
    static final String ENV = "FABRIC_CLIENT_RACK";
    static final String CONF = "spark.fabric.clientRack";
    private static final int MAX_LENGTH = 255;

    /** An in-sync follower of a partition: its rack and protocol address. */
    record Follower(String rack, String address) implements Serializable { }

    private Racks() {
    }

    /** `value` if it is a usable rack name (what a data node's --rack says), else why not, naming `where`. */
    static String checked(String value, String where) {
        String why = value.isBlank() ? "must not be empty"
            : value.length() > MAX_LENGTH ? "is longer than " + MAX_LENGTH + " characters"
            : !value.equals(value.strip()) ? "has leading or trailing whitespace"
            : value.chars().anyMatch(Character::isISOControl) ? "has control characters" : null;
        if (why != null) {
            throw new IllegalArgumentException("invalid value '" + value.substring(0, Math.min(80, value.length()))
                + "' for " + where + ": a rack name " + why + "; give the rack of the data nodes near the reader, as "
                + "their --rack says (e.g. rack-1)");
        }
        return value;
    }

    /** The rack a task reads as: the one fixed on the driver (`resolved`), else its executor's $FABRIC_CLIENT_RACK
     *  (unset or empty: none, it reads from the leader). */
    static String task(String resolved) {
        if (resolved != null) {
            return resolved;
        }
        String value = System.getenv(ENV);
        return value == null || value.isEmpty() ? null : checked(value, "environment variable " + ENV);
    }

    /** The follower in `rack` among `followers`, null if none (or no rack). */
    static Follower near(String rack, Follower[] followers) {
        if (rack != null) {
            for (Follower follower : followers) {
                if (rack.equals(follower.rack())) {
                    return follower;
                }
            }
        }
        return null;
    }
}
