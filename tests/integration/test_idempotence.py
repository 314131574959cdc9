"""The idempotent producer on the replicated cluster (real coordinator and node processes): a batch whose answer
is lost is retried with the same producer id and sequence, and the leader answers the first write's offset
instead of writing it again, also when the leader that wrote it was SIGKILLed and a follower leads the retry (it
rebuilt the producer state from the frames it copied). The lost answer is a test hook around the real cluster
(FlakyCluster: the call is made, then its answer dropped)."""
from __future__ import annotations

import fabric
from fabric.client.producer import Producer
from fabric.common.errors import LeaderNotAvailableError

FAST = dict(linger_ms=0, retry_backoff_ms=100)


def stored(fab, topic: str) -> list[bytes]:
    """Every value of partition 0 below its high watermark, in offset order."""
    out, offset, end = [], 0, fab.describe_topic(topic).partitions[0].end_offset
    while offset < end:
        for fetched in fab.cluster.fetch(topic, 0, offset, 1 << 20):
            out += fetched.batch.column("value").to_pylist()
            offset = fetched.offset + fetched.batch.num_rows
    return out


def send_recorded(producer: Producer, recorder, topic: str, value: bytes):
    """Send `value` to partition 0 of `topic`, recording the send and its acknowledgement in the history."""
    recorder.invoke(value, 0)
    meta = producer.send(topic, value, partition=0).result(120)
    recorder.ok(value, meta.partition, meta.offset)
    return meta


def test_a_lost_answer_is_retried_without_a_second_write(shared_cluster, flaky_cluster, history) -> None:
    recorder, topic = history.recorder("lost"), "idem"
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("idem", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        flaky = flaky_cluster(fab.cluster)
        with Producer(flaky, **FAST) as producer:
            assert send_recorded(producer, recorder, topic, b"a").offset == 0
            flaky.fail("append", 2, LeaderNotAvailableError("the answer was lost"), after=True)
            assert send_recorded(producer, recorder, topic, b"b").offset == 1  # where the first of three writes put it
            assert send_recorded(producer, recorder, topic, b"c").offset == 2
        assert flaky.calls["append"] == 5
        values = stored(fab, "idem")
        assert values == [b"a", b"b", b"c"]
        recorder.read(0, enumerate(values))
    history.check(dense=True).assert_valid()


def test_the_coordinator_service_writes_a_retried_append_once(coordinators, flaky_cluster, history) -> None:
    """A single-directory topic of the coordinator service: its log recognises the retry as the embedded one."""
    recorder, topic = history.recorder("service"), "plain"
    with fabric.connect(f"fabric://{coordinators().address}") as fab:
        fab.create_topic(topic)
        flaky = flaky_cluster(fab.cluster)
        with Producer(flaky, **FAST) as producer:
            flaky.fail("append", 1, LeaderNotAvailableError("the answer was lost"), after=True)
            assert send_recorded(producer, recorder, topic, b"a").offset == 0
        values = stored(fab, topic)
        assert values == [b"a"]
        recorder.read(0, enumerate(values))
    history.check(dense=True).assert_valid()


def test_a_retry_led_by_a_new_leader_is_not_written_twice(node_cluster, flaky_cluster, history) -> None:
    cluster = node_cluster()
    recorder, topic = history.recorder("failover"), "failover"
    with fabric.connect(cluster.url) as fab:
        fab.create_topic("failover", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        flaky = flaky_cluster(fab.cluster)
        with Producer(flaky, delivery_timeout_ms=120_000, **FAST) as producer:
            assert send_recorded(producer, recorder, topic, b"a").offset == 0
            old = fab.describe_topic("failover").partitions[0]
            # b is written and replicated (acks=all); its leader dies before the answer reaches the producer
            flaky.fail("append", 1, LeaderNotAvailableError("the leader died answering"), after=True,
                       then=lambda: cluster.nodes[old.leader].kill())
            assert send_recorded(producer, recorder, topic, b"b").offset == 1
            assert send_recorded(producer, recorder, topic, b"c").offset == 2
        new = fab.describe_topic("failover").partitions[0]
        assert new.leader != old.leader and new.leader_epoch > old.leader_epoch
        values = stored(fab, "failover")
        assert values == [b"a", b"b", b"c"]
        recorder.read(0, enumerate(values))
    history.check(dense=True).assert_valid()
