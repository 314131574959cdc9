"""confluent-kafka's calls, typed as its users type them from memory, on every kind of cluster: partitions in one
list (pause([tp]), resume([tp]), position([tp]), committed([tp])), a TopicPartition carrying its offset
(assign, seek, commit(offsets=[...])), commit(message=...) and commit(asynchronous=...), and KafkaException."""
from __future__ import annotations

import pytest

from fabric import TopicPartition


def test_partition_lists_and_topic_partitions_carrying_offsets(fab, drain):
    from fabric.errors import KafkaException
    fab.create_topic("orders", partitions=2)
    with fab.producer() as producer:
        for i in range(10):
            producer.send("orders", f"order-{i}".encode(), partition=i % 2)
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)

    consumer = fab.consumer(group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([TopicPartition("orders", 0, 3), TopicPartition("orders", 1)])
    consumer.pause([p1])
    assert [(m.partition, m.offset) for m in drain(consumer, 2)] == [(0, 3), (0, 4)]
    consumer.resume([p1])
    assert [(m.partition, m.offset) for m in drain(consumer, 5)] == [(1, i) for i in range(5)]

    consumer.seek(TopicPartition("orders", 0, 1))
    assert [(tp.partition, tp.offset) for tp in consumer.position([p0, p1])] == [(0, 1), (1, 5)]
    consumer.commit(offsets=[TopicPartition("orders", 0, 4)], asynchronous=False)
    assert [tp.offset for tp in consumer.committed([p0])] == [4]
    last = drain(consumer, 4)[-1]
    consumer.commit(message=last, asynchronous=False)
    assert [(tp.partition, tp.offset) for tp in consumer.committed([p0, p1])] == [(0, 5), (1, None)]
    consumer.commit(asynchronous=True)
    consumer.close()  # waits for the commit
    with fab.consumer(group_id="billing") as reader:
        assert [tp.offset for tp in reader.committed([p0, p1])] == [5, 5]

    with pytest.raises(KafkaException, match=r"pause\(\[tp1, tp2\]\)"):
        fab.consumer().pause("orders")
    with pytest.raises(KafkaException):
        fab.consumer().assign([TopicPartition("no-such-topic", 0)])
