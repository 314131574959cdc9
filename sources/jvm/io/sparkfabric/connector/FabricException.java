package io.sparkfabric.connector;

import java.io.IOException;

/** A fabric server's refusal: the name of its error class in fabric.common.errors and its exact message, as the
 *  Python client raises it. */
public final class FabricException extends IOException {
    private static final long serialVersionUID = 1L;
    private final String type;

    FabricException(String type, String message) {
        super(type + ": " + message);
        this.type = type;
    }

    /** The error's class name in fabric.common.errors (OffsetOutOfRangeError, AuthorizationError, ...). */
    public String type() {
        return type;
    }
}
