"""The servers: the coordinator service (Arrow Flight), the broker it serves, their wire format, security and
settings, and launchers of real server processes."""
