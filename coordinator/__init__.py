"""The coordinator (installed as fabric.coordinator): topic metadata, committed offsets and transactions in a
store (SQLite or ZooKeeper), the consumer-group state machine and assignors, and the controller election."""
