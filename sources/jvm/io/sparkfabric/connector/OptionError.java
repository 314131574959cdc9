package io.sparkfabric.connector;

/** The refusal of a bad option, worded as format("fabric") words it (sources/options.py): the option, its value,
 *  what is wrong and how to fix it, in the message Spark shows before any stack trace. */
final class OptionError {
    private OptionError() {
    }

    static IllegalArgumentException invalid(String option, String value, String why) {
        return new IllegalArgumentException("invalid value '" + value + "' for fabric source option '" + option
                                            + "': " + why);
    }
}
