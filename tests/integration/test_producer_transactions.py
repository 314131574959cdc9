"""Producer transactions (Kafka's transactional producer) on an embedded fabric and over a coordinator service:
records and group offsets become visible together at commit, an abort leaves nothing, a second producer with the
same transactional_id fences the first, calls out of order are refused, and a publisher SIGKILLed before or
after the commit point leaves nothing or everything."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

import fabric
from fabric.client.embedded import EmbeddedCluster
from fabric.client.producer import Producer
from fabric.client.topic_partition import TopicPartition
from fabric.common.errors import (
    CoordinatorUnavailableError,
    FabricError,
    IllegalStateError,
    InvalidConfigError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    TransactionAbortedError,
)
from fabric.common.names import OFFSETS_TOPIC
from fabric.common.types import TransactionalOffsets
from fabric.common.waiting import wait_for
from fabric.server.publish import DEBUG_PAUSE_ENV
from fabric.storage.marker import PENDING


@pytest.fixture(params=["file", "fabric"])
def fab(request, coordinators, fabric_dir):
    """The same client API over an embedded fabric and over a coordinator service serving such a directory."""
    url = f"file://{fabric_dir}" if request.param == "file" else coordinators(fabric_dir).url()
    with fabric.connect(url) as handle:
        yield handle


def _values(fab, topic: str) -> list[bytes]:
    """Every record of `topic` a new reader sees, sorted."""
    with fab.consumer(topic, auto_offset_reset="earliest") as consumer:
        out: list[bytes] = []
        while batch := consumer.poll(0.2):
            out += [r.value for r in batch]
    return sorted(out)


def _input(fab, count: int) -> None:
    fab.create_topic("in", partitions=1)
    fab.create_topic("out", partitions=2)
    with fab.producer() as producer:
        for i in range(count):
            producer.send("in", b"in-%d" % i)


def test_commit_makes_records_and_offsets_visible_together_and_abort_leaves_nothing(fab):
    _input(fab, 5)
    delivered = []
    producer = fab.producer(**{"transactional.id": "etl-1"})
    producer.init_transactions()
    producer.begin_transaction()
    futures = [producer.send("out", b"v%d" % i, key=b"k%d" % i, callback=lambda e, m: delivered.append((e, m)))
               for i in range(6)]
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 3}, "etl")
    assert _values(fab, "out") == [] and fab.cluster.coordinator.committed("etl") == {}
    assert not futures[0].done() and delivered == []
    producer.commit_transaction()
    metas = [f.get() for f in futures]
    assert _values(fab, "out") == [b"v%d" % i for i in range(6)]
    assert fab.cluster.coordinator.committed("etl")[("in", 0)].offset == 3
    for p in range(2):  # futures carry the real, dense offsets of each partition
        assert sorted(m.offset for m in metas if m.partition == p) == list(range(sum(m.partition == p for m in metas)))
    assert [m for _, m in delivered] == metas and all(e is None for e, _ in delivered)

    producer.begin_transaction()
    dropped = producer.send("out", b"dropped")
    producer.send_offsets_to_transaction({TopicPartition("in", 0): 5}, "etl")
    producer.abort_transaction()
    assert isinstance(dropped.exception(), TransactionAbortedError)
    producer.begin_transaction()  # the next transaction after an abort commits normally
    producer.send("out", b"after")
    producer.commit_transaction()
    producer.close()
    assert _values(fab, "out") == sorted([b"v%d" % i for i in range(6)] + [b"after"])
    assert fab.cluster.coordinator.committed("etl")[("in", 0)].offset == 3


def test_consume_transform_produce_loop(fab):
    _input(fab, 30)
    consumer = fab.consumer("in", group_id="upper", auto_offset_reset="earliest", enable_auto_commit=False,
                            max_poll_records=7)
    producer = fab.producer(transactional_id="upper-1")
    producer.init_transactions()
    done = 0
    while done < 30:
        records = consumer.poll(1.0)
        if not records:
            continue
        producer.begin_transaction()
        for r in records:
            producer.send("out", r.value.upper(), key=r.key)
        producer.send_offsets_to_transaction({TopicPartition("in", 0): records[-1].offset + 1},
                                             consumer.consumer_group_metadata())
        producer.commit_transaction()
        done += len(records)
    consumer.close()
    producer.close()
    assert _values(fab, "out") == sorted(b"IN-%d" % i for i in range(30))
    assert fab.cluster.coordinator.committed("upper")[("in", 0)].offset == 30


def test_a_second_producer_with_the_same_transactional_id_fences_the_loser(fab):
    _input(fab, 4)
    first, second = fab.producer(transactional_id="twin"), fab.producer(transactional_id="twin")
    first.init_transactions()
    second.init_transactions()
    for producer, value in ((first, b"first"), (second, b"second")):
        producer.begin_transaction()
        producer.send("out", value)
    second.send_offsets_to_transaction({("in", 0): 4}, "twins")
    first.commit_transaction()
    with pytest.raises(ProducerFencedError, match="twin:0"):
        second.commit_transaction()
    for call in (second.begin_transaction, second.abort_transaction):
        with pytest.raises(ProducerFencedError):
            call()
    assert _values(fab, "out") == [b"first"] and fab.cluster.coordinator.committed("twins") == {}
    third = fab.producer(transactional_id="twin")
    third.init_transactions()  # continues after the committed sequence
    third.begin_transaction()
    third.send("out", b"third")
    third.commit_transaction()
    assert _values(fab, "out") == [b"first", b"third"]


def test_calls_out_of_order_are_refused_naming_the_right_call(fabric_dir):
    """(The states live in the client: one kind of fabric is enough.)"""
    fab = fabric.connect(f"file://{fabric_dir}")
    fab.create_topic("out", partitions=1)
    with pytest.raises(IllegalStateError, match="transactional_id"):
        fab.producer().begin_transaction()
    producer = fab.producer(transactional_id="order")
    with pytest.raises(IllegalStateError, match=r"init_transactions\(\) first"):
        producer.begin_transaction()
    producer.init_transactions()
    with pytest.raises(IllegalStateError, match=r"begin_transaction\(\) first"):
        producer.send("out", b"x")
    with pytest.raises(IllegalStateError, match=r"begin_transaction\(\) first"):
        producer.commit_transaction()
    producer.begin_transaction()
    with pytest.raises(IllegalStateError, match="commit_transaction"):
        producer.begin_transaction()
    with pytest.raises(IllegalStateError, match="send_batch"):
        producer.send_batch("out", pa.table({"value": [b"x"]}))
    future = producer.send("out", b"x")
    with pytest.raises(IllegalStateError, match="commit_transaction"):
        future.get()  # would wait for a commit this thread has not made
    with pytest.raises(InvalidConfigError, match="acks=all"):
        fab.producer(transactional_id="weak", acks=1)
    with pytest.raises(InvalidConfigError, match="isolation_level"):
        fab.consumer("out", isolation_level="read_some")
    fab.consumer("out", **{"isolation.level": "read_uncommitted"}).close()  # Kafka's name and values
    producer.close()  # aborts the open transaction
    assert isinstance(future.exception(), TransactionAbortedError)
    fab.close()


def test_a_failed_commit_leaves_the_producer_abortable_or_failed_for_good(fabric_dir, flaky_cluster):
    cluster = flaky_cluster(EmbeddedCluster(fabric_dir))
    cluster.create_topic("out", 1, {}, None)
    producer = Producer(cluster, transactional_id="flaky")
    producer.init_transactions()
    producer.begin_transaction()
    lost = producer.send("out", b"lost")
    cluster.fail("publish_transaction", 1, CoordinatorUnavailableError("coordinator down"))
    with pytest.raises(CoordinatorUnavailableError):
        producer.commit_transaction()
    assert isinstance(lost.exception(), CoordinatorUnavailableError)
    with pytest.raises(IllegalStateError, match=r"failed and wrote nothing: call abort_transaction\(\)"):
        producer.begin_transaction()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("out", b"kept")
    cluster.fail("publish_transaction", 1, CoordinatorUnavailableError("answer lost"), after=True)
    with pytest.raises(CoordinatorUnavailableError):
        producer.commit_transaction()  # committed, but this producer cannot tell whether it was its commit
    with pytest.raises(FabricError, match="outcome of transaction flaky:0 is unknown"):
        producer.begin_transaction()
    assert cluster.partition_state("out", 0).end_offset == 1
    producer.close()
    cluster.inner.close()


def test_bad_transactional_offsets_are_refused_by_the_server_and_nothing_is_written(fab, offsets_kit):
    _input(fab, 3)
    cluster = fab.cluster

    def publish(offsets):
        return cluster.publish_transaction("raw:0", {("out", 0): []}, offsets=offsets)
    with pytest.raises(InvalidRequestError, match=OFFSETS_TOPIC):
        cluster.publish("raw:0", {(OFFSETS_TOPIC, 0): []})
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 3\]"):
        publish(TransactionalOffsets("g", {("in", 0): 4}))
    with pytest.raises(OffsetOutOfRangeError):
        publish(TransactionalOffsets("g", {("in", 0): -1}))
    offsets_kit.refuses_bad_group_fields(fab, "in", "live", publish, offset=1)
    assert not cluster.coordinator.transaction_committed("raw:0")
    assert cluster.coordinator.committed("g") == {} and _values(fab, "out") == []


CHILD = r"""
import sys, fabric
with fabric.connect(sys.argv[1]) as fab:
    producer = fab.producer(transactional_id="crash")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(6):
        producer.send("out", b"dead-%d" % i, key=b"%d" % i)
    producer.send_offsets_to_transaction({("in", 0): 2}, "crashers")
    producer.commit_transaction()
"""


@pytest.mark.parametrize("after_commit_point", [False, True])
def test_a_publisher_killed_mid_transaction_leaves_all_or_nothing(fabric_dir, after_commit_point):
    url = f"file://{fabric_dir}"
    with fabric.connect(url) as fab:
        _input(fab, 3)
    # the publish pauses at one side of its commit point only, until killed
    env = {**os.environ, DEBUG_PAUSE_ENV: "0,600" if after_commit_point else "600,0"}
    child = subprocess.Popen([sys.executable, "-c", CHILD, url], env=env, stderr=subprocess.PIPE)
    try:
        with fabric.connect(url) as watcher:
            if after_commit_point:  # killed after the coordinator's commit, before the watermarks move
                wait_for(lambda: watcher.cluster.coordinator.transaction_committed("crash:0"), 60, "the commit point")
            else:  # killed once the frames are written under the markers, before the commit point
                wait_for(lambda: all(os.path.exists(os.path.join(fabric_dir, "out", str(p), PENDING))
                                     for p in range(2)), 60, "the frames written under the markers")
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(30)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    with fabric.connect(url) as fab:  # a process opening the fabric now (it recovers the partitions it reads)
        coordinator = fab.cluster.coordinator
        if after_commit_point:  # rolled forward, the offsets with the records
            assert _values(fab, "out") == [b"dead-%d" % i for i in range(6)]
            assert coordinator.committed("crashers")[("in", 0)].offset == 2
            return
        assert _values(fab, "out") == [] and coordinator.committed("crashers") == {}
        assert not coordinator.transaction_committed("crash:0")
        again = fab.producer(transactional_id="crash")
        again.init_transactions()  # the same sequence: the dead attempt's frames are truncated
        again.begin_transaction()
        again.send("out", b"next", partition=0)
        again.send_offsets_to_transaction({("in", 0): 1}, "crashers")
        again.commit_transaction()
        assert _values(fab, "out") == [b"next"]
        assert coordinator.committed("crashers")[("in", 0)].offset == 1
        assert PENDING not in os.listdir(os.path.join(fabric_dir, "out", "1"))


def test_a_transaction_of_many_batches_per_partition_resolves_every_future_with_its_own_offset(fab):
    fab.create_topic("out", partitions=2)
    with fab.producer() as other:
        other.send("out", b"before", partition=1).get(30)
    producer = fab.producer(transactional_id="chunks", batch_size=64)  # a few records per batch
    producer.init_transactions()
    producer.begin_transaction()
    futures = {b"r%03d" % i: producer.send("out", b"r%03d" % i, partition=i % 2) for i in range(60)}
    producer.commit_transaction()
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([("out", 0), ("out", 1)])
        stored = {}
        while batch := consumer.poll(0.5):
            stored.update({(r.partition, r.offset): r.value for r in batch})
    assert len(stored) == 61
    assert all(stored[(m.partition, m.offset)] == value for value, m in ((v, f.get(0)) for v, f in futures.items()))
