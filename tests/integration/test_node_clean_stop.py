"""A data node stopped cleanly (SIGTERM) records what spares its next start a walk of its partitions' frames: each
partition's clean end and, where it held them, its idempotent producers' snapshot (docs/internals/on-disk-format.md,
"Producer state snapshots" and "Writes and recovery"). Restarted, it serves every record, and the producer that
wrote them goes on with its next sequence. Real coordinator and node processes."""
from __future__ import annotations

from pathlib import Path

import fabric
from fabric.storage import clean_end, producer_snapshot

TOPIC = "kept"


def test_a_node_stopped_cleanly_leaves_each_partitions_end_and_producers_and_goes_on_from_them(node_cluster,
                                                                                               drain) -> None:
    cluster = node_cluster(nodes=1)
    directory = Path(cluster.nodes[1].data_dir) / TOPIC / "0"
    with fabric.connect(cluster.url) as fab:
        fab.create_topic(TOPIC, partitions=1, replication_factor=1)
        with fab.producer(linger_ms=0) as producer:  # (idempotent, acks=all: Kafka's defaults)
            for i in range(50):
                producer.send(TOPIC, b"%d" % i, partition=0).result(60)
            assert not (directory / clean_end.FILE).exists()  # (written as the node stops, not before)
            cluster.restart(1)  # SIGTERM, then the same node on the same directory
            assert (directory / clean_end.FILE).exists() and (directory / producer_snapshot.FILE).exists()
            producer.send(TOPIC, b"50", partition=0).result(60)
        records = drain(fab.consumer(TOPIC, auto_offset_reset="earliest"), 51, timeout=120)
    assert [r.value for r in records] == [b"%d" % i for i in range(51)]
