"""The data node (docs/replication.md): a server of its own that hosts partition replicas in its own data
directory and serves the partitions it leads. `node.py` the process, `replica_manager.py` its partitions,
`partition.py` one replica's leader/follower state machine, `service.py` its Flight service, `settings.py` its
options."""
