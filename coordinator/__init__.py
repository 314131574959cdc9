"""Cluster metadata and consumer-group state: one interface, embedded (SQLite) and remote implementations."""
