"""The clients: the Cluster interface with its embedded and remote implementations, and the producer,
consumer and admin handle built on it. The CLI and the Spark sources and sinks use only this layer."""
