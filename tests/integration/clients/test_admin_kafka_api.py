"""Admin calls a Kafka user reaches for (Admin.deleteRecords, deleteConsumerGroups, create with
--if-not-exists, describeTopics of every topic), through the public API on every kind of cluster (the `fab`
fixture). On a replicated topic delete_records runs at the partition's leader, with the same checks."""
from __future__ import annotations

import logging
import time

import pytest

from fabric import NewPartitions, NewTopic, OffsetSpec, TopicPartition
from fabric.common.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from fabric.common.waiting import wait_for


def _produce(fab, topic: str, count: int, partition: int = 0) -> None:
    with fab.producer() as producer:
        for i in range(count):
            producer.send(topic, b"v%d" % i, partition=partition)


def test_delete_records_moves_the_log_start_and_readers_with_it(fab, drain):
    fab.create_topic("t", partitions=2)
    _produce(fab, "t", 10)
    assert fab.delete_records("t", 0, 4) == 4
    state = fab.describe_topic("t").partitions[0]
    assert (state.start_offset, state.end_offset) == (4, 10)
    consumer = fab.consumer(auto_offset_reset="earliest")
    consumer.assign([("t", 0)])
    assert consumer.beginning_offsets([("t", 0)]) == {("t", 0): 4}
    assert [r.offset for r in drain(consumer, 6)] == list(range(4, 10))
    consumer.seek("t", 0, 1)  # a position below the start now: auto_offset_reset takes it to the start
    assert [r.offset for r in drain(consumer, 6)] == list(range(4, 10))
    with pytest.raises(OffsetOutOfRangeError):
        fab.cluster.fetch("t", 0, 3, 1 << 20)
    assert fab.delete_records("t", 0, 2) == 4  # below the start: nothing changes
    assert fab.delete_records("t", 0, -1) == 10  # -1: the high watermark
    assert fab.describe_topic("t").partitions[0].start_offset == 10
    assert fab.describe_topic("t").partitions[1].start_offset == 0  # the other partition is untouched


def test_delete_records_refuses_bad_requests(fab):
    fab.create_topic("t")
    _produce(fab, "t", 3)
    with pytest.raises(OffsetOutOfRangeError, match="from 0 to 3, or -1"):
        fab.delete_records("t", 0, 4)
    with pytest.raises(UnknownPartitionError):
        fab.delete_records("t", 1, 0)
    with pytest.raises(InvalidArgumentError, match="before_offset"):
        fab.delete_records("t", 0, -2)
    assert fab.describe_topic("t").partitions[0].start_offset == 0
    fab.create_topic("table", config={"cleanup.policy": "compact"})
    with pytest.raises(InvalidConfigError, match="cleanup.policy=compact,delete"):
        fab.delete_records("table", 0, 0)
    fab.alter_topic_config("table", {"cleanup.policy": "compact,delete"})

    def deleted() -> bool:  # (a data node learns the new config with its next heartbeat)
        try:
            return fab.delete_records("table", 0, 0) == 0
        except InvalidConfigError:
            return False
    wait_for(deleted, what="delete_records to be allowed once the topic is compact,delete")


def test_delete_records_is_checked_by_the_server(fab):
    """The service checks the offset itself, whatever the client sent (the client's checks bypassed)."""
    fab.create_topic("t")
    with pytest.raises((InvalidArgumentError, InvalidRequestError), match="before_offset"):
        fab.cluster.delete_records("t", 0, "3")
    with pytest.raises(InvalidArgumentError, match="before_offset"):
        fab.cluster.delete_records("t", 0, -5)
    with pytest.raises(InvalidArgumentError, match="partition"):
        fab.cluster.delete_records("t", -1, 0)


def test_create_topic_exist_ok(fab, caplog):
    first = fab.create_topic("t", partitions=2, config={"retention.ms": 60000})
    assert fab.create_topic("t", partitions=2, config={"retention.ms": 60000}, exist_ok=True) == first
    with caplog.at_level(logging.WARNING, logger="fabric.client.admin"):
        kept = fab.create_topic("t", partitions=3, exist_ok=True)  # differs: left as it is, as Kafka's tools do
    assert kept.partitions == 2 and len(fab.describe_topic("t").partitions) == 2
    assert "2 partitions, not 3" in caplog.text and "retention.ms" in caplog.text
    with pytest.raises(TopicExistsError, match="exist_ok=True"):
        fab.create_topic("t", partitions=2)


def test_describe_topic_without_a_name_describes_every_topic(fab):
    fab.create_topic("a", partitions=2)
    fab.create_topic("b")
    described = fab.describe_topic()
    assert list(described) == ["a", "b"]
    assert [len(d.partitions) for d in described.values()] == [2, 1]
    assert described["a"] == fab.describe_topic("a")


def test_delete_group(fab, drain):
    fab.create_topic("t")
    _produce(fab, "t", 2)
    consumer = fab.consumer("t", group_id="g", auto_offset_reset="earliest", session_timeout_ms=60000,
                            enable_auto_commit=False)
    drain(consumer, 2)
    consumer.commit()
    assert "g" in fab.list_groups()
    with pytest.raises(GroupNotEmptyError, match="live member"):
        fab.delete_group("g")
    consumer.close()
    wait_for(lambda: not fab.describe_consumer_group("g").members, timeout=30, what="the member to leave")
    fab.delete_group("g")
    assert "g" not in fab.list_groups()
    assert fab.describe_group("g") == []


def test_delete_offsets_of_a_topic_only_while_no_live_member_reads_it(fab) -> None:
    """kafka-consumer-groups --delete-offsets (KIP-496): the group's offsets of a topic its live member does not
    read go, partition by partition; of the topic it reads they are refused, nothing deleted; once the member left
    they go too. An unknown group is GroupIdNotFoundError."""
    fab.create_topic("read", partitions=2)
    fab.create_topic("old")
    for partition in (0, 1):
        _produce(fab, "read", 3, partition)
    _produce(fab, "old", 2)
    fab.reset_offsets("g", ["read", "old"], to_latest=True, execute=True)
    consumer = fab.consumer("read", group_id="g", session_timeout_ms=60000, enable_auto_commit=False)
    wait_for(lambda: consumer.poll(0.2) is not None and len(consumer.assignment()) == 2, 60, "the assignment")
    with pytest.raises(GroupSubscribedToTopicError, match="group 'g' has live members subscribed to 'read'"):
        fab.delete_offsets("g", ["old", "read"])
    committed = fab.cluster.coordinator.committed
    assert {tp: c.offset for tp, c in committed("g").items()} == {("old", 0): 2, ("read", 0): 3, ("read", 1): 3}
    assert fab.delete_offsets("g", "old") == [("old", 0)]
    assert fab.delete_offsets("g", "old") == []  # none left to delete
    consumer.close()
    wait_for(lambda: not fab.describe_consumer_group("g").members, timeout=30, what="the member to leave")
    assert fab.delete_offsets("g", [("read", 1)]) == [("read", 1)]
    assert {tp: c.offset for tp, c in committed("g").items()} == {("read", 0): 3}
    with pytest.raises(GroupIdNotFoundError, match="consumer group 'nobody' does not exist"):
        fab.delete_offsets("nobody", "read")


def test_topic_calls_as_kafka_python_and_confluent_kafka_users_type_them(fab) -> None:
    """create_topics, delete_topics and create_partitions in both clients' forms: a done future per topic, each
    topic's error in its own future while the others are done."""
    made = fab.create_topics([NewTopic("kp", 2, -1, topic_configs={"retention.ms": "60000"}),
                              NewTopic(topic="cf", num_partitions=-1, config={"cleanup.policy": "compact"})])
    assert {topic: future.result() for topic, future in made.items()} == {"kp": None, "cf": None}
    topic = fab.cluster.coordinator.topic
    assert (topic("kp").partitions, topic("kp").config.get("retention.ms")) == (2, "60000")
    assert (topic("cf").partitions, topic("cf").config.get("cleanup.policy")) == (1, "compact")
    checked = fab.create_topics([NewTopic("kp", 1, -1), NewTopic("fresh", 1, -1)], validate_only=True)
    with pytest.raises(TopicExistsError):
        checked["kp"].result()
    assert checked["fresh"].result() is None and "fresh" not in fab.list_topics()  # checked, not created
    with pytest.raises(InvalidConfigError, match="no.such.key"):
        fab.create_topics([NewTopic("bad", 1, -1, topic_configs={"no.such.key": "1"})])["bad"].result()
    assert fab.create_partitions({"kp": NewPartitions(3)})["kp"].result() is None  # kafka-python's form
    assert fab.create_partitions([NewPartitions("cf", 2)])["cf"].result() is None  # confluent-kafka's form
    assert (topic("kp").partitions, topic("cf").partitions) == (3, 2)
    with pytest.raises(InvalidPartitionsError):
        fab.create_partitions([NewPartitions("cf", 1)])["cf"].result()
    gone = fab.delete_topics(["kp", "nope"])
    assert gone["kp"].result() is None and "kp" not in fab.list_topics()
    with pytest.raises(UnknownTopicError):
        gone["nope"].result()
    with pytest.raises(InvalidArgumentError, match=r"create_topics takes a list, e.g. create_topics\(\[NewTopic"):
        fab.create_topics(NewTopic("alone", 1, 1))
    with pytest.raises(InvalidArgumentError, match="NewPartitions takes the new partition count once"):
        NewPartitions("cf")


def test_list_offsets_as_confluent_kafka_users_type_it(fab) -> None:
    """list_offsets({TopicPartition: OffsetSpec}): the earliest and latest offsets, the first record at or after a
    time (-1 past the last), each in its own done future; a partition that does not exist fails its own."""
    fab.create_topic("lo", partitions=2)
    _produce(fab, "lo", 3, partition=0)
    cut_ms = int(time.time() * 1000) + 1  # after every record so far
    wait_for(lambda: time.time() * 1000 > cut_ms, 10, "the clock to pass the cut")
    _produce(fab, "lo", 2, partition=0)
    fab.delete_records("lo", 0, 1)
    asked = {TopicPartition("lo", 0): OffsetSpec.earliest(), ("lo", 1): OffsetSpec.latest(),
             TopicPartition("lo", 2): OffsetSpec.latest()}
    found = fab.list_offsets(asked)
    assert found[("lo", 0)].result().offset == 1 and found[("lo", 1)].result().offset == 0
    with pytest.raises(UnknownPartitionError):
        found[("lo", 2)].result()
    at = fab.list_offsets({("lo", 0): OffsetSpec.for_timestamp(cut_ms), ("lo", 1): OffsetSpec.for_timestamp(0)})
    assert [at[tp].result().offset for tp in (("lo", 0), ("lo", 1))] == [3, -1]
    assert fab.list_offsets({("lo", 0): OffsetSpec.latest()})[("lo", 0)].result().offset == 5
    with pytest.raises(InvalidArgumentError, match="list_offsets takes an OffsetSpec"):
        fab.list_offsets({("lo", 0): "latest"})[("lo", 0)].result()


def test_create_partitions_validate_only_checks_and_grows_nothing(fab):
    """confluent-kafka's and kafka-python's create_partitions(..., validate_only=True): a growth that would be taken
    answers None and changes nothing; a shrink and an unknown topic answer their errors, as the real call does."""
    fab.create_topic("grows", partitions=2)
    checked = fab.create_partitions([NewPartitions("grows", 5), NewPartitions("grows-not", 3)], validate_only=True)
    assert checked["grows"].result() is None
    with pytest.raises(UnknownTopicError):
        checked["grows-not"].result()
    with pytest.raises(InvalidPartitionsError, match="has 2 partitions; partitions can be added, never removed"):
        fab.create_partitions({"grows": NewPartitions(1)}, validate_only=True)["grows"].result()
    assert len(fab.describe_topic("grows").partitions) == 2  # nothing grew
