"""kafka-python's and confluent-kafka's consumer group admin calls, confluent-kafka's cluster metadata and topic
config calls (fabric.kafka's KafkaAdminClient, AdminClient, Producer and Consumer), in the shapes their programs
read, on every kind of cluster."""
from __future__ import annotations

import pytest

from fabric.common.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    InvalidArgumentError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    UnknownMemberError,
    UnknownTopicError,
)
from fabric.common.waiting import wait_for
from fabric.kafka import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaAdminClient,
    OffsetAndMetadata,
    Producer,
    ResourceType,
    TopicCollection,
    TopicPartition,
)

ORDERS = [TopicPartition("orders", 0), TopicPartition("orders", 1)]


def _orders(fab) -> None:
    fab.create_topic("orders", partitions=2)
    with fab.producer() as producer:
        for i in range(4):
            producer.send("orders", b"order-%d" % i, partition=i % 2)


def _joined(fab, group: str):
    """A consumer of `group` subscribed to orders that has joined it, read every record and committed."""
    consumer = fab.consumer("orders", group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    seen: list = []
    wait_for(lambda: seen.extend(consumer.poll(0.5)) or len(seen) == 4, 60, "the member to read the 4 records")
    consumer.commit()
    return consumer


def test_kafka_python_group_calls(fab):
    _orders(fab)
    admin = KafkaAdminClient(bootstrap_servers=fab.url)
    consumer = _joined(fab, "billing")
    try:
        assert ("billing", "consumer") in admin.list_consumer_groups()
        [info] = admin.describe_consumer_groups(["billing"])
        assert (info.error_code, info.group, info.state, info.protocol_type) == (0, "billing", "Stable", "consumer")
        [member] = info.members
        assert sorted(member.member_assignment.partitions()) == ORDERS
        assert member.member_assignment.assignment == [("orders", [0, 1])]
        assert admin.list_consumer_group_offsets("billing") == {tp: OffsetAndMetadata(2, "", -1) for tp in ORDERS}
        assert admin.list_consumer_group_offsets("billing", partitions=[ORDERS[1], ("orders", 5)]) == {
            ORDERS[1]: (2, "", -1), TopicPartition("orders", 5): (-1, "", -1)}
        [(group, error)] = admin.delete_consumer_groups(["billing"])
        assert group == "billing" and isinstance(error, GroupNotEmptyError)  # nothing deleted while it has members
    finally:
        consumer.close()
    assert admin.delete_consumer_groups(["billing", "nobody"])[0] == ("billing", None)
    [(_, missing)] = admin.delete_consumer_groups(["nobody"])
    assert isinstance(missing, GroupIdNotFoundError)
    assert "billing" not in [group for group, _ in admin.list_consumer_groups()]
    admin.close()


def test_confluent_group_calls(fab):
    _orders(fab)
    admin = AdminClient({"bootstrap.servers": fab.url})
    moved = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("audit", [
        TopicPartition("orders", 0, 1), TopicPartition("orders", 1, 2)])])["audit"].result()
    assert [(tp.topic, tp.partition, tp.offset) for tp in moved.topic_partitions] == [("orders", 0, 1),
                                                                                      ("orders", 1, 2)]
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("audit")])["audit"].result()
    assert listed.group_id == "audit"
    assert [(tp.topic, tp.partition, tp.offset) for tp in listed.topic_partitions] == [("orders", 0, 1),
                                                                                       ("orders", 1, 2)]
    past_end = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("audit", [
        TopicPartition("orders", 0, 99)])])["audit"]
    if fab.list_nodes():  # a replicated partition's commit is not checked against its log, as in Kafka
        assert past_end.result().topic_partitions[0].offset == 99
    else:  # a partition the fabric keeps: refused, nothing written
        with pytest.raises(OffsetOutOfRangeError):
            past_end.result()
        assert fab.cluster.coordinator.committed("audit")[("orders", 0)].offset == 1
    with pytest.raises(InvalidArgumentError, match="takes each partition with its offset, e.g. "
                                                   r"TopicPartition\('orders', 0, 42\); orders-0 has none"):
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("audit", [ORDERS[0]])])["audit"].result()
    with pytest.raises(InvalidArgumentError, match="takes the partitions to move with their offsets"):
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("audit")])["audit"].result()

    consumer = _joined(fab, "billing")
    try:
        refused = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("billing", [
            TopicPartition("orders", 0, 0)])])["billing"]
        with pytest.raises(UnknownMemberError, match="only its members may commit"):
            refused.result()  # a group with live members is moved by its members only
        groups = {g.group_id: g for g in admin.list_consumer_groups().result().valid}
        assert (groups["audit"].state, groups["audit"].is_simple_consumer_group) == (ConsumerGroupState.EMPTY, True)
        assert (groups["billing"].state, groups["billing"].is_simple_consumer_group) == (ConsumerGroupState.STABLE,
                                                                                         False)
        stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result().valid
        assert [g.group_id for g in stable] == ["billing"]
        described = admin.describe_consumer_groups(["billing", "audit"])
        billing, audit = described["billing"].result(), described["audit"].result()
        assert billing.state is ConsumerGroupState.STABLE and billing.partition_assignor
        assert sorted(billing.members[0].assignment.topic_partitions) == ORDERS
        assert audit.state is ConsumerGroupState.EMPTY and audit.members == []
        with pytest.raises(GroupNotEmptyError):
            admin.delete_consumer_groups(["billing"])["billing"].result()
    finally:
        consumer.close()
    assert admin.delete_consumer_groups(["audit"])["audit"].result() is None
    assert "audit" not in fab.list_groups()
    admin.close()


def test_confluent_delete_consumer_group_offsets_and_delete_records(fab):
    from fabric.common.errors import GroupSubscribedToTopicError
    _orders(fab)
    admin = AdminClient({"bootstrap.servers": fab.url})
    try:
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("audit", [
            TopicPartition("orders", 0, 1), TopicPartition("orders", 1, 2)])])["audit"].result()
        gone = admin.delete_consumer_group_offsets([ConsumerGroupTopicPartitions("audit", [ORDERS[0]])])
        assert [(tp.topic, tp.partition) for tp in gone["audit"].result().topic_partitions] == [("orders", 0)]
        assert sorted(fab.cluster.coordinator.committed("audit")) == [("orders", 1)]
        with pytest.raises(InvalidArgumentError, match="takes the partitions whose offsets to delete"):
            admin.delete_consumer_group_offsets([ConsumerGroupTopicPartitions("audit")])["audit"].result()
        consumer = _joined(fab, "billing")
        try:
            with pytest.raises(GroupSubscribedToTopicError):
                admin.delete_consumer_group_offsets([ConsumerGroupTopicPartitions("billing", ORDERS)])[
                    "billing"].result()
        finally:
            consumer.close()

        deleted = admin.delete_records([TopicPartition("orders", 0, 1), TopicPartition("orders", 1, -1)])
        assert [f.result().low_watermark for f in deleted.values()] == [1, 2]
        assert admin.delete_records("orders", 0, 2) == 2  # (the fabric's own form, on the same object)
        assert [fab.describe_topic("orders").partitions[p].start_offset for p in (0, 1)] == [2, 2]
        with pytest.raises(InvalidArgumentError, match="with the offset to delete below"):
            admin.delete_records([ORDERS[0]])
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records([TopicPartition("orders", 0, 99)])[ORDERS[0]].result()
    finally:
        admin.close()


def test_confluent_list_topics_answers_cluster_metadata(fab):
    _orders(fab)
    admin = AdminClient({"bootstrap.servers": fab.url})
    metadata = admin.list_topics(timeout=10)
    assert admin.topic_names() == ["orders"] and list(metadata.topics) == ["orders"]
    partitions = metadata.topics["orders"].partitions
    assert sorted(partitions) == [0, 1] and metadata.topics["orders"].error is None
    nodes = fab.list_nodes()
    if nodes:  # a cluster: its data nodes are the brokers, each partition led by one of its in-sync replicas
        assert sorted(metadata.brokers) == sorted(n.id for n in nodes)
        assert all(p.leader in p.isrs and len(p.replicas) == 3 for p in partitions.values())
    else:  # kept in the fabric's own directory: no broker leads it
        assert metadata.brokers == {} and all((p.leader, p.replicas, p.isrs) == (-1, [], []) for p in
                                              partitions.values())
    assert isinstance(admin.list_topics("nope").topics["nope"].error, UnknownTopicError)
    cluster = admin.describe_cluster().result()
    assert sorted(n.id for n in cluster.nodes) == sorted(n.id for n in nodes if n.alive)
    assert cluster.controller is None and cluster.cluster_id
    described = admin.describe_topics(TopicCollection(["orders", "nope"]))
    with pytest.raises(UnknownTopicError):
        described["nope"].result()
    orders = described["orders"].result()
    assert (orders.name, orders.is_internal, [p.id for p in orders.partitions]) == ("orders", False, [0, 1])
    for info in orders.partitions:  # the same partitions list_topics answered, naming nodes instead of ids
        assert [n.id for n in info.replicas] == partitions[info.id].replicas
        assert (info.leader.id if info.leader else -1) == partitions[info.id].leader
    assert (orders.topic_id is not None) == bool(nodes)  # a replicated topic has an id
    admin.close()
    producer = Producer({"bootstrap.servers": fab.url})
    consumer = Consumer({"bootstrap.servers": fab.url, "group.id": "meta"})
    try:
        assert sorted(producer.list_topics("orders").topics["orders"].partitions) == [0, 1]
        assert list(consumer.list_topics().topics) == ["orders"]
    finally:
        producer.close()
        consumer.close()


def test_confluent_topic_config_calls(fab):
    """describe_configs, incremental_alter_configs (SET, DELETE, APPEND, SUBTRACT) and alter_configs (the overrides
    replaced) of confluent-kafka's AdminClient, on topics; a broker's configs are refused naming where they are."""
    fab.create_topic("orders", config={"retention.ms": "600000"})
    admin = AdminClient({"bootstrap.servers": fab.url})
    orders = ConfigResource(ResourceType.TOPIC, "orders")
    try:
        entries = admin.describe_configs([orders])[orders].result()
        assert entries["retention.ms"].value == "600000"
        assert entries["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert entries["cleanup.policy"].is_default and entries["cleanup.policy"].value == "delete"
        changes = ConfigResource("topic", "orders", incremental_configs=[
            ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
        assert admin.incremental_alter_configs([changes])[changes].result() is None
        overrides = fab.describe_topic("orders").overrides
        assert overrides == {"segment.ms": "3600000", "cleanup.policy": "compact,delete"}  # (kept sorted)
        subtract = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
            ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
        admin.incremental_alter_configs([subtract])[subtract].result()
        assert fab.describe_topic("orders").overrides["cleanup.policy"] == "compact"
        bad = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[ConfigEntry("retention.ms", "-7")])
        with pytest.raises(InvalidConfigError, match="retention.ms"):
            admin.incremental_alter_configs([bad])[bad].result()
        replaced = ConfigResource(ResourceType.TOPIC, "orders", set_config={"retention.ms": 1000})
        admin.alter_configs([replaced])[replaced].result()  # the other overrides go back to their defaults
        assert fab.describe_topic("orders").overrides == {"retention.ms": "1000"}
        broker = ConfigResource(ResourceType.BROKER, "1")
        with pytest.raises(InvalidConfigError, match="only topics have configs"):
            admin.describe_configs([broker])[broker].result()
    finally:
        admin.close()


def test_kafka_python_cluster_and_topic_descriptions(fab):
    """kafka-python's describe_cluster() and describe_topics(): its dicts, the data nodes as brokers."""
    _orders(fab)
    admin = KafkaAdminClient(bootstrap_servers=fab.url)
    try:
        cluster = admin.describe_cluster()
        assert sorted(b["node_id"] for b in cluster["brokers"]) == sorted(n.id for n in fab.list_nodes() if n.alive)
        assert cluster["controller_id"] == -1 and cluster["cluster_id"]
        [orders, nope] = admin.describe_topics(["orders", "nope"])
        assert (orders["topic"], orders["error_code"], orders["is_internal"]) == ("orders", 0, False)
        assert [p["partition"] for p in orders["partitions"]] == [0, 1]
        assert all(p["leader"] in p["isr"] for p in orders["partitions"]) == bool(fab.list_nodes())
        assert (nope["error_code"], nope["partitions"]) == (3, [])  # UNKNOWN_TOPIC_OR_PARTITION
        assert [t["topic"] for t in admin.describe_topics()] == ["orders"]
    finally:
        admin.close()
