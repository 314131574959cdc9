"""The Spark sinks (installed as fabric.sinks): the exactly-once fabric sink and the Delta archiver. Uses only
the client layer."""
