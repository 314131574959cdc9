"""The idempotent producer on the replicated cluster (real coordinator and node processes): a batch whose answer
is lost is retried with the same producer id and sequence, and the leader answers the first write's offset
instead of writing it again, also when the leader that wrote it was SIGKILLed and a follower leads the retry (it
rebuilt the producer state from the frames it copied). The lost answer is a test hook around the real cluster
(FlakyCluster: the call is made, then its answer dropped)."""
from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

import fabric
from fabric.client.producer import Producer
from fabric.common.errors import LeaderNotAvailableError

FAST = dict(linger_ms=0, retry_backoff_ms=100)


def test_a_lost_answer_is_retried_without_a_second_write(shared_cluster, flaky_cluster, history,
                                                         replication) -> None:
    recorder, topic = history.recorder("lost"), "idem"
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        flaky = flaky_cluster(fab.cluster)
        with replication.sender(Producer(flaky, **FAST), recorder, topic) as producer:
            assert producer.send(b"a").offset == 0
            flaky.fail("append", 2, LeaderNotAvailableError("the answer was lost"), after=True)
            assert producer.send(b"b").offset == 1  # where the first of three writes put it
            assert producer.send(b"c").offset == 2
        assert flaky.calls["append"] == 5
        assert [v for _, v in replication.final_read(fab, recorder, topic)] == [b"a", b"b", b"c"]
    history.check(dense=True).assert_valid()


def test_the_coordinator_service_writes_a_retried_append_once(coordinators, flaky_cluster, history,
                                                              replication) -> None:
    """A single-directory topic of the coordinator service: its log recognises the retry as the embedded one."""
    recorder, topic = history.recorder("service"), "plain"
    with fabric.connect(f"fabric://{coordinators().address}") as fab:
        fab.create_topic(topic)
        flaky = flaky_cluster(fab.cluster)
        with replication.sender(Producer(flaky, **FAST), recorder, topic) as producer:
            flaky.fail("append", 1, LeaderNotAvailableError("the answer was lost"), after=True)
            assert producer.send(b"a").offset == 0
        assert [v for _, v in replication.final_read(fab, recorder, topic)] == [b"a"]
    history.check(dense=True).assert_valid()


def test_a_retry_led_by_a_new_leader_is_not_written_twice(node_cluster, flaky_cluster, history,
                                                          replication) -> None:
    cluster = node_cluster()
    recorder, topic = history.recorder("failover"), "failover"
    with fabric.connect(cluster.url) as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        flaky = flaky_cluster(fab.cluster)
        with replication.sender(Producer(flaky, delivery_timeout_ms=120_000, **FAST), recorder, topic) as producer:
            assert producer.send(b"a").offset == 0
            old = replication.described(fab, topic)
            # b is written and replicated (acks=all); its leader dies before the answer reaches the producer
            flaky.fail("append", 1, LeaderNotAvailableError("the leader died answering"), after=True,
                       then=lambda: cluster.nodes[old.leader].kill())
            assert producer.send(b"b").offset == 1
            assert producer.send(b"c").offset == 2
        new = replication.described(fab, topic)
        assert new.leader != old.leader and new.leader_epoch > old.leader_epoch
        assert [v for _, v in replication.final_read(fab, recorder, topic)] == [b"a", b"b", b"c"]
    history.check(dense=True).assert_valid()


def test_partitions_are_appended_together_each_in_sequence_order(shared_cluster, flaky_cluster) -> None:
    """A send_batch over three partitions has their appends in flight together (the three meet, which appends
    made one after another never do); a lost answer is retried with the batch's own id and sequence, so each
    partition holds each record once and in order; a batch that finally fails drops the producer id, and the
    batches of the other partitions acknowledged after that do not move the new id's sequences."""
    topic, per_partition = "together", 5
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
        flaky = flaky_cluster(fab.cluster)

        def batch(round_: int) -> pa.Table:
            return pa.table({"value": [b"%d-%d-%d" % (round_, p, i) for p in range(3) for i in range(per_partition)],
                             "partition": pa.array([p for p in range(3) for _ in range(per_partition)], pa.int32())})
        with Producer(flaky, **FAST) as producer:
            flaky.meet(3)
            assert sorted((m.partition, m.offset) for m in producer.send_batch(topic, batch(0))) == [
                (0, 0), (1, 0), (2, 0)]
            flaky.fail("append", 1, LeaderNotAvailableError("the answer was lost"), after=True)
            producer.send_batch(topic, batch(1))
        with Producer(flaky, retries=0, **FAST) as producer:
            producer.send_batch(topic, batch(2))
            flaky.fail("append", 1, LeaderNotAvailableError("the answer was lost"), after=True)
            with pytest.raises(LeaderNotAvailableError):
                producer.send_batch(topic, batch(3))  # written everywhere; one partition's answer lost
            producer.send_batch(topic, batch(4))  # a new id: every partition's sequence starts again, none refused
        for p in range(3):
            stored = [v for f in fab.cluster.fetch(topic, p, 0, 1 << 20) for v in f.batch.column("value").to_pylist()]
            assert stored == [b"%d-%d-%d" % (r, p, i) for r in range(5) for i in range(per_partition)]


def _stored(fab: fabric.Fabric, topic: str) -> list[bytes]:
    return [v for f in fab.cluster.fetch(topic, 0, 0, 1 << 20) for v in f.batch.column("value").to_pylist()]


def test_a_run_of_batches_is_pipelined_to_the_leader_in_order(shared_cluster, flaky_cluster) -> None:
    """A send_batch cut into many batches for one partition has five of them in flight at its leader. A first
    batch whose answer is lost, or which is refused, reaches the leader after the four sent behind it (the test
    hook makes it when it is waited on): those are refused for the gap, then sent again after it. Each record is
    stored once and in order, and the run's offsets follow one another."""
    topic, sent = "pipelined", [b"v%04d" % i for i in range(300)]
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        flaky = flaky_cluster(fab.cluster)
        assert flaky.pipelined_appends
        with Producer(flaky, batch_size=256, **FAST) as producer:
            metas = producer.send_batch(topic, pa.table({"value": sent[:100]}))
            assert len(metas) > 5 and flaky.most_in_flight == 5 and flaky.in_flight == 0 and not flaky.errors
            flaky.fail("append", 1, LeaderNotAvailableError("the answer was lost"), after=True)
            producer.send_batch(topic, pa.table({"value": sent[100:200]}))
            assert flaky.errors == {"LeaderNotAvailableError": 1, "OutOfOrderSequenceError": 4}
            flaky.fail("append", 1, LeaderNotAvailableError("refused"))
            metas = producer.send_batch(topic, pa.table({"value": sent[200:]}))
            assert flaky.errors == {"LeaderNotAvailableError": 2, "OutOfOrderSequenceError": 8}
        assert metas[0].offset == 200 and all(a.offset + a.count == b.offset for a, b in itertools.pairwise(metas))
        assert _stored(fab, topic) == sent


def test_without_idempotence_a_retry_lands_behind_the_batches_in_flight(shared_cluster, flaky_cluster) -> None:
    """As in Kafka: without idempotence and with five in flight, a batch whose answer was lost is written again
    after the four batches sent behind it (at least once, out of order); max_in_flight_requests_per_connection=1
    keeps the order."""
    with fabric.connect(shared_cluster.url) as fab:
        for topic, in_flight in (("reordered", 5), ("ordered", 1)):
            fab.create_topic(topic, partitions=1, replication_factor=3)
            flaky = flaky_cluster(fab.cluster)
            with Producer(flaky, enable_idempotence=False, batch_size=256,
                          max_in_flight_requests_per_connection=in_flight, **FAST) as producer:
                flaky.fail("append", 1, LeaderNotAvailableError("the answer was lost"), after=True)
                producer.send_batch(topic, pa.table({"value": [b"v%04d" % i for i in range(100)]}))
            stored = _stored(fab, topic)
            first = stored.index(b"v0000")
            lost = stored[first:stored.index(b"v0000", first + 1)] if in_flight > 1 else stored[:len(stored) - 100]
            assert sorted(set(stored)) == [b"v%04d" % i for i in range(100)] and len(stored) == 100 + len(lost)
            if in_flight > 1:  # the lost batch, then the 4 sent behind it, then the lost batch again
                assert stored.index(b"v0000") > 0 and stored.count(b"v0000") == 2
            else:
                assert stored == lost + [b"v%04d" % i for i in range(100)]


def test_a_pipelined_run_goes_on_at_the_new_leader_in_order(node_cluster, flaky_cluster, replication) -> None:
    """The leader is SIGKILLed while a run's batches are in flight to it: they are sent again, in order, to the
    new leader, which answers those it already has (copied before the kill) with their first offsets. Every
    record is stored once and in order, and the run's offsets follow one another."""
    cluster = node_cluster()
    topic, sent = "pipelined-failover", [b"v%05d" % i for i in range(3000)]
    with fabric.connect(cluster.url) as fab:
        fab.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        old = replication.described(fab, topic)
        flaky = flaky_cluster(fab.cluster)

        flaky.before_append(20, cluster.nodes[old.leader].kill)
        with Producer(flaky, batch_size=1024, delivery_timeout_ms=120_000, **FAST) as producer:
            metas = producer.send_batch(topic, pa.table({"value": sent}))
        assert flaky.calls["append"] > 20 and replication.described(fab, topic).leader != old.leader
        assert metas[0].offset == 0 and all(a.offset + a.count == b.offset for a, b in itertools.pairwise(metas))
        assert sum(m.count for m in metas) == len(sent) and _stored(fab, topic) == sent
