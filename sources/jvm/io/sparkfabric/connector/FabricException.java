package io.sparkfabric.connector;

import java.io.IOException;

/** A fabric server's refusal: the name of its error class in fabric.common.errors and its exact message, as the
 *  Python client raises it. */
public final class FabricException extends IOException {
    private static final long serialVersionUID = 1L;
    private final String type;
    private final String active;

    FabricException(String type, String message) {
        this(type, message, null);
    }

    /** A refusal that names `active`, the coordinator instance to ask instead (null: none). */
    FabricException(String type, String message, String active) {
        super(type + ": " + message);
        this.type = type;
        this.active = active;
    }

    /** The error's class name in fabric.common.errors (OffsetOutOfRangeError, AuthorizationError, ...). */
    public String type() {
        return type;
    }

    /** The Flight address of the coordinator instance a NotActiveCoordinator refusal names (the active one, or the
     *  one serving the group asked about); null where it names none. */
    public String active() {
        return active;
    }
}
