"""Transactions on replicated partitions (real coordinator and node processes), as the Spark sink writes them
(fabric/client/leader_transactions.py): writers join a transaction in the coordinator and append to the leaders; the
coordinator's commit is the commit point; markers end each writer's transaction. read_committed consumers (the
default) stop at the last stable offset and never see an aborted writer; a zombie is fenced; a leader killed
between the appends and the markers loses nothing. A transactional producer runs the same protocol as one
writer; its group offsets are committed by the coordinator's record of the transaction (server-checked, never a
twin's or an aborted one's), and a coordinator SIGKILLed before applying them leaves them to the next, which
applies them before it serves offsets."""
from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import fabric
from fabric.client.leader_transactions import abort_transaction, end_transaction
from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import (
    AuthorizationError,
    InvalidConfigError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    UnknownPartitionError,
    UnstableOffsetCommitError,
)
from fabric.common.records import to_storage
from fabric.common.types import ProducerBatch, TransactionalOffsets, transaction_sequence
from fabric.common.waiting import wait_for
from fabric.coordinator.transaction_offsets import DEBUG_PAUSE_ENV
from fabric.server.launcher import CoordinatorProcess


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


def append(fab: fabric.Fabric, topic: str, txn: str, writer, values: list[bytes], sequence: int = 0) -> int:
    """Append `values` to partition 0 as `writer`'s transaction `txn` (`<transactional id>:<sequence>`)."""
    return fab.cluster.transactional_append(topic, 0, rows(values),
                                            ProducerBatch(writer.producer_id, writer.producer_epoch, sequence),
                                            transaction_sequence(txn)[0])


def leave_open(fab: fabric.Fabric, topic: str, txn: str, timeout_ms: int):
    """A writer that joins `txn` asking for `timeout_ms`, appends b"stalled" to partition 0 and stops there (as if
    its process died), then a plain record b"after" behind it; the writer."""
    writer = fab.cluster.init_producer_id()
    fab.cluster.coordinator.add_transaction_writer(txn, writer.producer_id, writer.producer_epoch, [(topic, 0)],
                                                   timeout_ms=timeout_ms)
    append(fab, topic, txn, writer, [b"stalled"])
    with fab.producer(linger_ms=0) as producer:
        producer.send(topic, b"after", partition=0).result(60)
    return writer


def test_committed_readers_see_a_transaction_once_its_markers_are_written(shared_cluster) -> None:
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-basic", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        with fab.producer(linger_ms=0) as producer:
            producer.send("txn-basic", b"before", partition=0).result(60)
        kept, failed = fab.cluster.init_producer_id(), fab.cluster.init_producer_id()
        for writer in (kept, failed):
            fab.cluster.coordinator.add_transaction_writer("sink-a:0", writer.producer_id, writer.producer_epoch,
                                                           [("txn-basic", 0)])
        append(fab, "txn-basic", "sink-a:0", kept, [b"k1", b"k2"])
        append(fab, "txn-basic", "sink-a:0", failed, [b"f1"])
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
            append(fab, "txn-basic", "sink-a:0", failed, [b"late"], sequence=1)
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
        append(fab, "txn-abort", "sink-b:4", writer, [b"x", b"y"])
        record = end_transaction(fab.cluster, "sink-b:4")  # a failed batch: Spark's abort
        assert record.committed_writers is None
        assert read_all(fab, "txn-abort") == []
        assert fab.describe_topic("txn-abort").partitions[0].end_offset == 3  # two records and a marker
        with pytest.raises(InvalidTxnStateError, match="never joined"):
            fab.cluster.coordinator.commit_transaction("sink-b:4", [writer.producer_id + 1])


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator_and_a_replay_still_commits_it(
        shared_cluster) -> None:
    """A writer that stops mid-transaction (its process died, or its driver never commits) holds read_committed
    readers back only until its transaction.timeout.ms: the active coordinator aborts it and writes its marker.
    The transaction stays undecided, so Spark's replay of the batch (new writers) still commits it; the stalled
    writer can neither be committed nor write again."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-timeout", partitions=1, replication_factor=3)
        stalled = leave_open(fab, "txn-timeout", "sink-t:7", 1500)
        wait_for(lambda: read_all(fab, "txn-timeout") == [b"after"], 90,
                 "the coordinator to abort the timed-out transaction, so readers move past it")
        wait_for(lambda: fab.cluster.coordinator.transaction_record("sink-t").aborted == (), 60,
                 "the aborted writer to be forgotten once its marker is written")
        record = fab.cluster.coordinator.transaction_record("sink-t")
        assert (record.sequence, record.committed_sequence, record.writers) == (7, -1, ())
        with pytest.raises(InvalidTxnStateError, match="timeout"):
            fab.cluster.coordinator.commit_transaction("sink-t:7", [stalled.producer_id])
        with pytest.raises(InvalidProducerEpochError):  # fenced by its abort marker's epoch
            append(fab, "txn-timeout", "sink-t:7", stalled, [b"late"], sequence=1)

        replay = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("sink-t:7", replay.producer_id, replay.producer_epoch,
                                                       [("txn-timeout", 0)], timeout_ms=60_000)
        append(fab, "txn-timeout", "sink-t:7", replay, [b"replayed"])
        fab.cluster.coordinator.commit_transaction("sink-t:7", [replay.producer_id])
        assert end_transaction(fab.cluster, "sink-t:7").committed_writers == (replay.producer_id,)
        assert read_all(fab, "txn-timeout") == [b"after", b"replayed"]
        assert b"stalled" not in read_all(fab, "txn-timeout")
        with pytest.raises(InvalidConfigError, match="transaction.max.timeout.ms"):
            fab.cluster.coordinator.add_transaction_writer("sink-t:8", replay.producer_id, replay.producer_epoch,
                                                           [("txn-timeout", 0)], timeout_ms=10**9)
        # a producer asks for its transaction_timeout_ms: above the coordinator's maximum its commit is refused
        with fab.producer(transactional_id="too-patient", transaction_timeout_ms=10**9) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("txn-timeout", b"never", partition=0)
            with pytest.raises(InvalidConfigError, match="transaction.max.timeout.ms"):
                producer.commit_transaction()
            producer.abort_transaction()
        assert b"never" not in read_all(fab, "txn-timeout", "read_uncommitted")


def test_fabric_transactions_lists_describes_and_aborts_an_open_transaction(shared_cluster, fabric_cli) -> None:
    """kafka-transactions as `fabric transactions`: an open transaction shows as Ongoing with its writers; abort
    ends its writers at once (markers written before the command returns), whatever their timeout, and leaves
    the transaction for a replay to commit."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-cli", partitions=2, replication_factor=3)
        stuck = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("cli-sink:3", stuck.producer_id, stuck.producer_epoch,
                                                       [("txn-cli", 0), ("txn-cli", 1)], timeout_ms=600_000)
        append(fab, "txn-cli", "cli-sink:3", stuck, [b"stuck"])
        with fab.producer(linger_ms=0) as producer:
            producer.send("txn-cli", b"after", partition=0).result(60)

        def cli(*args: str) -> str:
            proc = fabric_cli("--url", shared_cluster.url, "transactions", *args)
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
            return proc.stdout

        listed = {line.split()[0]: line.split()[1:] for line in cli("list").splitlines()[1:]}
        assert listed["cli-sink"] == ["Ongoing", "3", "1"]
        described = cli("describe", "--transactional-id", "cli-sink")
        assert "State: Ongoing" in described and "TimeoutMs: 600000" in described
        assert f"{stuck.producer_id}  " in described and "txn-cli-0" in described and "txn-cli-1" in described
        assert read_all(fab, "txn-cli") == []  # held back by the open transaction

        aborted = cli("abort", "--transactional-id", "cli-sink")
        assert "Aborting 1 writer(s) of transaction cli-sink:3" in aborted and "State: CompleteAbort" in aborted
        assert read_all(fab, "txn-cli") == [b"after"]  # the markers were written before the command returned
        assert "nothing to abort" in cli("abort", "--transactional-id", "cli-sink")
        with pytest.raises(InvalidProducerEpochError):
            append(fab, "txn-cli", "cli-sink:3", stuck, [b"late"], sequence=1)
        replay = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("cli-sink:3", replay.producer_id, replay.producer_epoch,
                                                       [("txn-cli", 0)])
        append(fab, "txn-cli", "cli-sink:3", replay, [b"replayed"])
        fab.cluster.coordinator.commit_transaction("cli-sink:3", [replay.producer_id])
        end_transaction(fab.cluster, "cli-sink:3")
        assert fab.describe_transaction("cli-sink").state == "CompleteCommit"
        assert read_all(fab, "txn-cli") == [b"after", b"replayed"]


def test_with_acls_the_coordinator_ends_timed_out_transactions_as_the_cluster_and_only_admins_abort(
        node_cluster, tmp_path, monkeypatch) -> None:
    """Under ACLs the coordinator writes a timed-out transaction's abort markers with its own token
    ($FABRIC_TOKEN), which the nodes take for its cluster_action, as Kafka's brokers take WriteTxnMarkers; a
    principal that may run the transaction may not abort it by hand (admin on the transactional id)."""
    (tmp_path / "tokens").write_text("admin-secret admin\nnode-secret node\napp-secret app\n")
    (tmp_path / "acls").write_text("admin admin topic:*\nadmin admin transactional-id:*\n"
                                   "node cluster_action cluster:fabric\napp write topic:guarded\n"
                                   "app describe topic:guarded\napp read topic:guarded\n"
                                   "app write transactional-id:app-sink\napp describe transactional-id:app-sink\n")
    files = ("--tokens-file", str(tmp_path / "tokens"), "--acl-file", str(tmp_path / "acls"))
    monkeypatch.setenv("FABRIC_TOKEN", "node-secret")  # the coordinator's token towards the nodes
    cluster = node_cluster(nodes=1, coordinator_extra=(*files, "--transaction-cleanup-interval-ms", "500"),
                           node_token="node-secret", node_extra=files)
    with fabric.connect(cluster.coordinator.url("token=admin-secret")) as admin:
        admin.create_topic("guarded", replication_factor=1)
    with fabric.connect(cluster.coordinator.url("token=app-secret")) as app:
        writer = app.cluster.init_producer_id()
        app.cluster.coordinator.add_transaction_writer("app-sink:0", writer.producer_id, writer.producer_epoch,
                                                       [("guarded", 0)], timeout_ms=600_000)
        append(app, "guarded", "app-sink:0", writer, [b"held"])
        with pytest.raises(AuthorizationError, match="not allowed to admin transactional-id:app-sink"):
            app.abort_transaction("app-sink")
        assert app.describe_transaction("app-sink").state == "Ongoing"
        with fabric.connect(cluster.coordinator.url("token=admin-secret")) as admin:
            assert admin.abort_transaction("app-sink").state == "CompleteAbort"  # its markers are written
        leave_open(app, "guarded", "app-sink:0", 1000)  # its replay, left open in turn
        wait_for(lambda: read_all(app, "guarded") == [b"after"], 90,
                 "the coordinator to abort the timed-out transaction with its cluster_action on the node")
        assert app.describe_transaction("app-sink").state == "CompleteAbort"


def test_an_aborted_batch_write_refuses_a_writer_that_joins_late(shared_cluster) -> None:
    """A failed `df.write` is never replayed, so its abort decides it: a task Spark killed but whose Python
    worker still runs is refused when it joins after the abort, and cannot leave an open transaction holding
    the partition's last stable offset back."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-late", partitions=1, replication_factor=3)
        early = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("job-late", early.producer_id, early.producer_epoch,
                                                       [("txn-late", 0)])
        append(fab, "txn-late", "job-late", early, [b"x"])
        record = abort_transaction(fab.cluster, "job-late")  # the batch writer's abort
        assert record.committed_writers == () and fab.cluster.coordinator.transaction_committed("job-late")
        late = fab.cluster.init_producer_id()
        with pytest.raises(InvalidTxnStateError, match="committed already"):
            fab.cluster.coordinator.add_transaction_writer("job-late", late.producer_id, late.producer_epoch,
                                                           [("txn-late", 0)])
        with pytest.raises(InvalidProducerEpochError):  # the early writer, still running, is fenced too
            append(fab, "txn-late", "job-late", early, [b"y"], sequence=1)
        with fab.producer(linger_ms=0) as producer:
            producer.send("txn-late", b"after", partition=0).result(60)
        assert read_all(fab, "txn-late") == [b"after"]
        assert fab.describe_topic("txn-late").partitions[0].end_offset == 3  # x, its abort marker, after


def test_a_transaction_decided_but_left_unmarked_is_ended_by_the_coordinator_or_the_next_producer(
        shared_cluster) -> None:
    """A writer that dies between the commit point and its markers (a transactional producer SIGKILLed in
    commit_transaction) leaves open transactions on the leaders that nobody else would end: read_committed readers
    of the partition would stop before them for good. Once the transaction's timeout has passed, the coordinator
    writes the markers it decided (the committed writer's commit, the other writer's abort); and a new producer of
    the transactional id writes them at its init_transactions, whatever the timeout."""
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("txn-unmarked", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        kept, failed = fab.cluster.init_producer_id(), fab.cluster.init_producer_id()
        for writer in (kept, failed):
            fab.cluster.coordinator.add_transaction_writer("died:0", writer.producer_id, writer.producer_epoch,
                                                           [("txn-unmarked", 0)], timeout_ms=1500)
        append(fab, "txn-unmarked", "died:0", kept, [b"k1", b"k2"])
        append(fab, "txn-unmarked", "died:0", failed, [b"f1"])
        fab.cluster.coordinator.commit_transaction("died:0", [kept.producer_id])  # the commit point; then it died
        with fab.producer(linger_ms=0) as producer:
            producer.send("txn-unmarked", b"after", partition=0).result(60)
        wait_for(lambda: read_all(fab, "txn-unmarked") == [b"k1", b"k2", b"after"], 90,
                 "the coordinator to write the markers of the committed transaction its writer left unwritten")
        wait_for(lambda: fab.cluster.coordinator.transaction_record("died").started_ms == -1, 60,
                 "the coordinator to record that the markers are written")

        # a transactional producer died the same way, with a long timeout: its successor ends the transaction
        dead = fab.cluster.init_producer_id()
        fab.cluster.coordinator.add_transaction_writer("etl-died:0", dead.producer_id, dead.producer_epoch,
                                                       [("txn-unmarked", 0)], timeout_ms=600_000)
        append(fab, "txn-unmarked", "etl-died:0", dead, [b"d1"])
        fab.cluster.coordinator.commit_transaction("etl-died:0", [dead.producer_id])
        with fab.producer(transactional_id="etl-died") as producer:
            producer.init_transactions()
            assert read_all(fab, "txn-unmarked") == [b"k1", b"k2", b"after", b"d1"]
            producer.begin_transaction()
            producer.send("txn-unmarked", b"next", partition=0)
            producer.commit_transaction()
        assert read_all(fab, "txn-unmarked") == [b"k1", b"k2", b"after", b"d1", b"next"]


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
        append(fab, "txn-failover", "sink-c:0", writer, values)
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
        append(fab, "txn-producer", "etl:0", dead, [b"dead-1", b"dead-2"])
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
        stable = fab.describe_topic("txn-producer").partitions[0].end_offset
        with pytest.raises(InvalidConfigError, match="offsets.topic.replication.factor"):
            producer.commit_transaction()  # this coordinator keeps the offsets in its directory: refused, aborted
        assert fab.describe_topic("txn-producer").partitions[0].end_offset > stable  # its append ended at once
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("txn-producer", b"last")
        producer.commit_transaction()
        assert read_all(fab, "txn-producer") == [b"v%d" % i for i in range(5)] + [b"last"]
        assert fab.cluster.coordinator.committed("etl-group") == {}



def test_a_transaction_on_the_leaders_commits_its_group_offsets_at_its_commit_point(replicated_cluster) -> None:
    """The group offsets on the nodes (offsets.topic.replication.factor: here default.replication.factor): the
    coordinator's record of the transaction commits them, applied before the commit returns; an aborted or a
    fenced transaction's offsets are never applied."""
    with fabric.connect(replicated_cluster.url) as fab:
        fab.create_topic("txo-out", partitions=1)
        coordinator = fab.cluster.coordinator
        try:
            producer, twin = fab.producer(transactional_id="txo"), fab.producer(transactional_id="txo")
            producer.init_transactions()
            twin.init_transactions()
            producer.begin_transaction()
            producer.send("txo-out", b"a")
            producer.send_offsets_to_transaction({("txo-out", 0): 1}, "txo-group")
            producer.commit_transaction()
            assert read_all(fab, "txo-out") == [b"a"]
            assert coordinator.committed("txo-group")[("txo-out", 0)].offset == 1
            assert coordinator.transaction_record("txo").offsets is None  # applied, then cleared
            twin.begin_transaction()  # the twin read the same committed sequence
            twin.send("txo-out", b"twin")
            twin.send_offsets_to_transaction({("txo-out", 0): 9}, "txo-group")
            with pytest.raises(ProducerFencedError):
                twin.commit_transaction()
            producer.begin_transaction()
            producer.send("txo-out", b"aborted")
            producer.send_offsets_to_transaction({("txo-out", 0): 7}, "txo-group")
            producer.abort_transaction()
            assert coordinator.committed("txo-group")[("txo-out", 0)].offset == 1
            producer.begin_transaction()
            producer.send("txo-out", b"b")
            producer.send_offsets_to_transaction({("txo-out", 0): 2}, "txo-group")
            producer.commit_transaction()
            assert read_all(fab, "txo-out") == [b"a", b"b"]
            assert coordinator.committed("txo-group")[("txo-out", 0)].offset == 2
            producer.begin_transaction()  # offsets only: the producer joins as a writer of no partition
            producer.send_offsets_to_transaction({("txo-out", 0): 3}, "txo-group")
            producer.commit_transaction()
            assert coordinator.committed("txo-group")[("txo-out", 0)].offset == 3
            # such twins race past the committed check: the second commit finds the sequence decided without it,
            # and its offsets are not applied
            first, second = fab.cluster.init_producer_id(), fab.cluster.init_producer_id()
            for twin_id in (first, second):
                coordinator.add_transaction_writer("txo:3", twin_id.producer_id, twin_id.producer_epoch, [])
            coordinator.commit_transaction("txo:3", [first.producer_id],
                                           TransactionalOffsets("txo-group", {("txo-out", 0): 4}))
            coordinator.commit_transaction("txo:3", [second.producer_id],
                                           TransactionalOffsets("txo-group", {("txo-out", 0): 1}))
            assert coordinator.transaction_record("txo").committed_writers == (first.producer_id,)
            assert coordinator.committed("txo-group")[("txo-out", 0)].offset == 4
        finally:
            fab.delete_topic("txo-out")


def test_bad_transaction_offsets_are_refused_by_the_server_with_nothing_committed(replicated_cluster,
                                                                                 offsets_kit) -> None:
    with fabric.connect(replicated_cluster.url) as fab:
        fab.create_topic("txo-bad", partitions=1)
        coordinator = fab.cluster.coordinator
        try:
            def commit(offsets: TransactionalOffsets) -> None:
                coordinator.commit_transaction("txo-bad:0", [], offsets)
            with pytest.raises(UnknownPartitionError):
                commit(TransactionalOffsets("g", {("txo-bad", 7): 1}))
            with pytest.raises(OffsetOutOfRangeError):
                commit(TransactionalOffsets("g", {("txo-bad", 0): -1}))
            offsets_kit.refuses_bad_group_fields(fab, "txo-bad", "txo-live", commit, offset=0)
            assert not coordinator.transaction_committed("txo-bad:0")
            assert coordinator.committed("g") == {} and coordinator.committed("txo-live") == {}
        finally:
            fab.delete_topic("txo-bad")


def test_offsets_a_killed_coordinator_committed_are_applied_by_the_next_before_it_serves(
        node_cluster, raw, monkeypatch) -> None:
    """SIGKILL of the coordinator after the commit point (the record holds the offsets), before it applied them:
    the instance that takes over applies them before it serves any offsets. Until then the group's offsets are
    unstable: a read is refused retriably, not answered the old ones."""
    monkeypatch.setenv(DEBUG_PAUSE_ENV, "600")  # every commit with offsets stops after its commit point
    cluster = node_cluster(coordinator_extra=("--offsets-topic-replication-factor", "3"))
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("txo-crash", partitions=1, replication_factor=3)
        coordinator = fab.cluster.coordinator
        writer = fab.cluster.init_producer_id()
        coordinator.add_transaction_writer("crash:0", writer.producer_id, writer.producer_epoch, [("txo-crash", 0)])
        append(fab, "txo-crash", "crash:0", writer, [b"kept"])
        first = cluster.coordinator
        offsets = TransactionalOffsets("crashers", {("txo-crash", 0): 1})
        failures: list[BaseException] = []

        def commit() -> None:  # one call, no retry: only the next instance can apply the offsets
            try:
                raw.action(first.address, "commit_transaction", txn="crash:0", writers=[writer.producer_id],
                           offsets=offsets)
            except BaseException as exc:  # noqa: BLE001 (the kill ends the call)
                failures.append(exc)
        committing = threading.Thread(target=commit, daemon=True)
        # the commit checks the group's state, kept in the offsets topic: only once the instance loaded it
        wait_for(lambda: coordinator.describe_group("crashers"), 60, "the offsets topic loaded")
        committing.start()
        wait_for(lambda: coordinator.transaction_record("crash").offsets == offsets, 60,
                 "the commit point, the offsets pending in the record")
        # meanwhile the group's committed offsets are unstable: a read waits, and is told to retry, rather than
        # answered the offsets the transaction is replacing (Kafka's UNSTABLE_OFFSET_COMMIT)
        with pytest.raises(UnstableOffsetCommitError, match="committing group 'crashers'"):
            coordinator.committed("crashers")
        first.kill()
        committing.join(30)
        assert failures and not committing.is_alive()
        cluster.coordinators[0] = CoordinatorProcess(first.data_dir, port=first.port, extra=first.extra).start()
        assert coordinator.committed("crashers")[("txo-crash", 0)].offset == 1  # served only once applied
        assert coordinator.transaction_record("crash").offsets is None
        end_transaction(fab.cluster, "crash:0")
        assert read_all(fab, "txo-crash") == [b"kept"]
