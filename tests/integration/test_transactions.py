"""Transactions on replicated partitions (real coordinator and node processes), as the Spark sink writes them
(fabric/client/leader_transactions.py): writers join a transaction in the coordinator and append to the leaders; the
coordinator's commit is the commit point; markers end each writer's transaction. read_committed consumers (the
default) stop at the last stable offset and never see an aborted writer; a zombie is fenced; a leader killed
between the appends and the markers loses nothing. A transactional producer runs the same protocol as one
writer."""
from __future__ import annotations

import pyarrow as pa
import pytest

import fabric
from fabric.client.leader_transactions import end_transaction
from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import (
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from fabric.common.records import to_storage
from fabric.common.types import ProducerBatch


def rows(values: list[bytes]) -> pa.RecordBatch:
    return to_storage(pa.table({"value": pa.array(values, pa.binary())}), None, SYSTEM_CLOCK.now_us()).to_batches()[0]


def read_all(fab: fabric.Fabric, topic: str, isolation_level: str = "read_committed") -> list[bytes]:
    """Every value of partition 0 a consumer of `isolation_level` reads up to the end it is told of."""
    with fab.consumer(auto_offset_reset="earliest", isolation_level=isolation_level) as consumer:
        consumer.assign([(topic, 0)])
        end = fab.describe_topic(topic).partitions[0].end_offset if isolation_level == "read_committed" else None
        out: list[bytes] = []
        while True:
            got = consumer.poll(timeout=2)
            out += [r.value for r in got]
            if not got and (end is None or consumer.position(topic, 0) >= end):
                return out


def append(fab: fabric.Fabric, topic: str, writer, values: list[bytes], sequence: int = 0) -> int:
    return fab.cluster.transactional_append(topic, 0, rows(values),
                                            ProducerBatch(writer.producer_id, writer.producer_epoch, sequence))


def test_committed_readers_see_a_transaction_once_its_markers_are_written(shared_cluster) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-basic", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer(linger_ms=0) as producer:
            producer.send("txn-basic", b"before", partition=0).result(60)
        kept, failed = fab.cluster.init_producer_id(), fab.cluster.init_producer_id()
        for writer in (kept, failed):
            fab.cluster.coordinator.add_transaction_writer("sink-a:0", writer.producer_id, writer.producer_epoch,
                                                           [("txn-basic", 0)])
        append(fab, "txn-basic", kept, [b"k1", b"k2"])
        append(fab, "txn-basic", failed, [b"f1"])
        with fab.producer(linger_ms=0) as producer:
            producer.send("txn-basic", b"plain-after", partition=0).result(60)
        # the open transactions hold the last stable offset at the first one's first offset
        assert fab.describe_topic("txn-basic").partitions[0].end_offset == 1
        assert read_all(fab, "txn-basic") == [b"before"]
        assert read_all(fab, "txn-basic", "read_uncommitted") == [b"before", b"k1", b"k2", b"f1", b"plain-after"]
        # the leader counts records up to where each kind of reader stops
        assert fab.cluster.offset_after_records("txn-basic", 0, 0, 10) == 1
        assert fab.cluster.offset_after_records("txn-basic", 0, 0, 4, isolation_level="read_uncommitted") == 4

        fab.cluster.coordinator.commit_transaction("sink-a:0", [kept.producer_id])  # the commit point
        record = end_transaction(fab.cluster, "sink-a:0")
        assert record.committed_writers == (kept.producer_id,)
        assert read_all(fab, "txn-basic") == [b"before", b"k1", b"k2", b"plain-after"]
        # offsets 0-4 hold before, k1, k2, f1 (aborted), plain-after; the two markers follow: a committed reader's
        # third and fourth records end at 3 and 5 (past f1), a read_uncommitted reader's fourth at 4
        assert [fab.cluster.offset_after_records("txn-basic", 0, 0, n) for n in (3, 4, 5)] == [3, 5, 7]
        assert fab.cluster.offset_after_records("txn-basic", 0, 3, 1, isolation_level="read_uncommitted") == 4
        end_transaction(fab.cluster, "sink-a:0")  # writing the markers again changes nothing
        assert read_all(fab, "txn-basic") == [b"before", b"k1", b"k2", b"plain-after"]

        # the leaders write only the markers the coordinator decided, for the transactional id that decided them
        with pytest.raises(InvalidTxnStateError, match="not what the coordinator decided"):
            fab.cluster.write_markers("txn-basic", 0, "sink-a", [(failed.producer_id, failed.producer_epoch)], [])
        with pytest.raises(InvalidTxnStateError, match="not what the coordinator decided"):
            fab.cluster.write_markers("txn-basic", 0, "another-sink", [], [(kept.producer_id, 1)])
        assert read_all(fab, "txn-basic") == [b"before", b"k1", b"k2", b"plain-after"]

        # the failed writer is a zombie now: fenced by its abort marker's epoch, and refused by the coordinator
        with pytest.raises(InvalidProducerEpochError):
            append(fab, "txn-basic", failed, [b"late"], sequence=1)
        with pytest.raises(InvalidTxnStateError, match="committed already"):
            fab.cluster.coordinator.add_transaction_writer("sink-a:0", failed.producer_id, failed.producer_epoch,
                                                           [("txn-basic", 0)])
        assert read_all(fab, "txn-basic", "read_uncommitted")[-1] == b"plain-after"


def test_an_undecided_transaction_is_aborted_whole(shared_cluster) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-abort", partitions=1, replication_factor=3)
        writer = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("sink-b:4", writer.producer_id, writer.producer_epoch,
                                                       [("txn-abort", 0)])
        append(fab, "txn-abort", writer, [b"x", b"y"])
        record = end_transaction(fab.cluster, "sink-b:4")  # a failed batch: Spark's abort
        assert record.committed_writers is None
        assert read_all(fab, "txn-abort") == []
        assert fab.describe_topic("txn-abort").partitions[0].end_offset == 3  # two records and a marker
        with pytest.raises(InvalidTxnStateError, match="never joined"):
            fab.cluster.coordinator.commit_transaction("sink-b:4", [writer.producer_id + 1])


def test_a_leader_killed_before_the_markers_loses_nothing(node_cluster, replication) -> None:
    """The writer's records are replicated (acks=all) before the leader is SIGKILLed; the new leader rebuilt the
    open transaction from the frames it copied, so the markers end it there: the batch is read once."""
    cluster = node_cluster()
    with fabric.connect(replication.client_url(cluster)) as fab:
        fab.create_topic("txn-failover", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        writer = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("sink-c:0", writer.producer_id, writer.producer_epoch,
                                                       [("txn-failover", 0)])
        values = [b"r%d" % i for i in range(20)]
        append(fab, "txn-failover", writer, values)
        fab.cluster.coordinator.commit_transaction("sink-c:0", [writer.producer_id])
        before = replication.state(fab, "txn-failover")
        cluster.nodes[before.leader].kill()
        replication.wait_elected(fab, "txn-failover", 0, before)
        end_transaction(fab.cluster, "sink-c:0")
        assert read_all(fab, "txn-failover") == values
        cluster.restart(before.leader)  # the old leader comes back as a follower and reads the same
        replication.wait_in_sync(fab, cluster.nodes, "txn-failover")
        assert read_all(fab, "txn-failover") == values


def test_a_transactional_producer_commits_on_the_leaders_fences_its_twin_and_ends_what_a_dead_one_left(
        shared_cluster) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-producer", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        # a producer of id "etl" died after appending, before its commit: its open transaction holds readers back
        dead = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("etl:0", dead.producer_id, dead.producer_epoch,
                                                       [("txn-producer", 0)])
        append(fab, "txn-producer", dead, [b"dead-1", b"dead-2"])
        assert fab.describe_topic("txn-producer").partitions[0].end_offset == 0
        producer, twin = fab.producer(transactional_id="etl"), fab.producer(transactional_id="etl")
        producer.init_transactions()  # aborts the dead one's transaction: its sequence commits with no writers
        assert fab.cluster.coordinator.transaction_committed("etl:0")
        twin.init_transactions()
        producer.begin_transaction()
        futures = [producer.send("txn-producer", b"v%d" % i) for i in range(5)]
        assert not any(f.done() for f in futures)  # buffered until the commit
        producer.commit_transaction()
        offsets = [f.get(0).offset for f in futures]
        assert read_all(fab, "txn-producer") == [b"v%d" % i for i in range(5)]
        assert read_all(fab, "txn-producer", "read_uncommitted")[2:] == [b"v%d" % i for i in range(5)]
        assert offsets == list(range(offsets[0], offsets[0] + 5)) and offsets[0] >= 3  # after the aborted two
        # the twin read the same committed sequence: its commit finds it taken, writes nothing, and is fenced
        twin.begin_transaction()
        twin.send("txn-producer", b"twin")
        with pytest.raises(ProducerFencedError, match="etl:1"):
            twin.commit_transaction()
        producer.begin_transaction()
        producer.send("txn-producer", b"aborted")
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("txn-producer", b"last")
        producer.send_offsets_to_transaction({("txn-producer", 0): 1}, "etl-group")
        with pytest.raises(InvalidConfigError, match="send_offsets_to_transaction"):
            producer.commit_transaction()  # offsets cannot join a transaction on the leaders yet: nothing written
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("txn-producer", b"last")
        producer.commit_transaction()
        assert read_all(fab, "txn-producer") == [b"v%d" % i for i in range(5)] + [b"last"]
        assert fab.cluster.coordinator.committed("etl-group") == {}

