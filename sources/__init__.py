"""The fabric Spark source (installed as fabric.sources): options named as Spark's Kafka source's, offset
planning on the driver, and Arrow reads on the executors. Uses only the client layer."""
