"""kafka-python's config, record and leader election calls on its KafkaAdminClient, confluent-kafka's elect_leaders,
both clients' ACL calls (refused, naming the acl.file), and kafka-python's KafkaConsumer answering sets and offset
metadata, in the shapes their programs read, on every kind of cluster."""
from __future__ import annotations

import re

import pytest

from fabric.client import kafka_elections
from fabric.client.kafka_python_admin import error_code
from fabric.common.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    FabricError,
    InvalidArgumentError,
    InvalidConfigError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    PreferredLeaderNotAvailableError,
    UnknownPartitionError,
    UnknownTopicError,
)
from fabric.common.types import LeaderAndIsr, PartitionAssignment, PartitionRegistration
from fabric.common.waiting import wait_for
from fabric.kafka import (
    ACL,
    AclBinding,
    ACLOperation,
    AclOperation,
    ACLPermissionType,
    AclPermissionType,
    ACLResourcePatternType,
    AdminClient,
    ConfigResource,
    ConfigResourceType,
    ElectionType,
    KafkaAdminClient,
    KafkaConsumer,
    OffsetAndMetadata,
    ResourcePattern,
    ResourcePatternType,
    ResourceType,
    TopicPartition,
)

P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG, ELECTION_NOT_NEEDED = 3, 40, 84


def _orders(fab) -> None:
    """Topic orders of two partitions, each holding two records."""
    fab.create_topic("orders", partitions=2, config={"retention.ms": "600000"})
    with fab.producer() as producer:
        for i in range(4):
            producer.send("orders", b"order-%d" % i, partition=i % 2)


def test_kafka_python_config_calls(fab):
    """describe_configs answers kafka-python 2.0's DescribeConfigsResponse rows (v0 entries, or v1's with their
    source and synonyms), alter_configs an AlterConfigsResponse; a resource's error is its row's code."""
    _orders(fab)
    admin = KafkaAdminClient(bootstrap_servers=fab.url)
    try:
        orders = ConfigResource(ConfigResourceType.TOPIC, "orders")
        [response] = admin.describe_configs([orders, ConfigResource("TOPIC", "nope")])
        [(code, message, kind, name, entries), missing] = response.resources
        assert (code, message, kind, name) == (0, None, 2, "orders")
        found = {entry[0]: entry for entry in entries}
        assert found["retention.ms"] == ("retention.ms", "600000", False, False, False)
        assert found["cleanup.policy"] == ("cleanup.policy", "delete", False, True, False)  # a default
        assert missing[:4] == (UNKNOWN_TOPIC_OR_PARTITION, missing[1], 2, "nope") and "nope" in missing[1]
        asked = ConfigResource(ConfigResourceType.TOPIC, "orders", configs=["retention.ms"])
        [response] = admin.describe_configs([asked], include_synonyms=True)
        [(_, _, _, _, [entry])] = response.resources
        assert entry == ("retention.ms", "600000", False, 1, False, [("retention.ms", "600000", 1)])  # 1: dynamic

        replaced = ConfigResource(ConfigResourceType.TOPIC, "orders", configs={"cleanup.policy": "compact"})
        broker = ConfigResource(ConfigResourceType.BROKER, "1", configs={"log.retention.ms": "1"})
        answer = admin.alter_configs([replaced, broker])
        assert answer.resources[0] == (0, None, 2, "orders")
        assert answer.resources[1][0] == INVALID_CONFIG and "only topics have configs" in answer.resources[1][1]
        assert fab.describe_topic("orders").overrides == {"cleanup.policy": "compact"}  # retention.ms: default
        bad = ConfigResource(ConfigResourceType.TOPIC, "orders", {"retention.ms": "-7"})
        [(code, message, _, _)] = admin.alter_configs([bad]).resources
        assert code == INVALID_CONFIG and "retention.ms" in message
        with pytest.raises(InvalidArgumentError, match="takes a list"):
            admin.describe_configs(orders)
    finally:
        admin.close()


def test_kafka_python_delete_records(fab):
    """delete_records({tp: offset}) answers kafka-python 2.1's {tp: {partition_index, low_watermark, error_code}},
    raises a partition's error (every partition tried), and the fabric's own form still answers the log start."""
    _orders(fab)
    admin = KafkaAdminClient(bootstrap_servers=fab.url)
    try:
        assert admin.delete_records({P0: 1, ("orders", 1): -1}, timeout_ms=5000) == {
            P0: {"partition_index": 0, "low_watermark": 1, "error_code": 0},
            P1: {"partition_index": 1, "low_watermark": 2, "error_code": 0}}
        with pytest.raises(OffsetOutOfRangeError, match="orders-0"):
            admin.delete_records({P0: 99})
        with pytest.raises(FabricError, match="orders-0: .*; orders-1: ") as failed:
            admin.delete_records({P0: 99, P1: 99})
        assert type(failed.value) is FabricError
        with pytest.raises(InvalidArgumentError, match="dict of"):
            admin.delete_records([P0])
        assert admin.delete_records("orders", 0, 2) == 2  # (the fabric's own form, on the same object)
        assert admin.delete_records("orders", partition=1, before_offset=2) == 2
    finally:
        admin.close()


def test_kafka_consumer_answers_sets_and_offset_metadata(fab):
    """kafka-python's assignment() and subscription() answer sets (subscription None while it subscribes to
    none), committed(tp, metadata=True) an OffsetAndMetadata or None; the fabric's consumer keeps its lists."""
    _orders(fab)
    fab.cluster.commit_offsets("audit", {P0: 2}, metadata="batch-7")
    consumer = KafkaConsumer(bootstrap_servers=fab.url, group_id="audit", enable_auto_commit=False)
    try:
        assert consumer.subscription() is None and consumer.assignment() == set()
        consumer.assign([P0, P1])
        assert consumer.assignment() == {P0, P1} and consumer.subscription() is None
        assert consumer.committed(P0) == 2
        assert consumer.committed(P0, metadata=True) == OffsetAndMetadata(2, "batch-7", -1)
        assert consumer.committed("orders", 0, metadata=True).metadata == "batch-7"
        assert consumer.committed(P1, metadata=True) is None
        consumer.subscribe(["orders"])
        assert consumer.subscription() == {"orders"}
        wait_for(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment() == {P0, P1}, 60,
                 "the member's assignment")
    finally:
        consumer.close()
    with fab.consumer(group_id="audit") as native:
        native.assign([P0])
        assert native.assignment() == [P0] and native.subscription() == []
    with KafkaConsumer(bootstrap_servers=fab.url) as loner, pytest.raises(FabricError, match="group_id"):
        loner.committed(P0, metadata=True)


def _moved_preferred(fab, tp: TopicPartition) -> int:
    """Make another replica of `tp` its preferred one (its replicas reordered, its leader kept); that replica."""
    registration = wait_for(lambda: (r := fab.partition_assignment(*tp)) and len(r.state.isr) == 3 and r, 60,
                            f"every replica of {tp} in sync")
    leader = registration.state.leader
    others = [r for r in registration.assignment.replicas if r != leader]
    fab.reassign_partition(tp.topic, tp.partition, [others[0], leader, others[1]])
    wait_for(lambda: fab.partition_assignment(*tp).assignment.replicas[0] == others[0], 60, "the reordering")
    assert fab.partition_assignment(*tp).state.leader == leader
    return others[0]


def test_leader_elections_by_each_client(fab):
    """confluent-kafka's elect_leaders answers a future of {tp: None or its error}, kafka-python's
    perform_leader_election an ElectLeadersResponse (ElectionNotNeededError in its rows, not raised); a fabric
    without data nodes refuses both."""
    _orders(fab)
    admin = AdminClient({"bootstrap.servers": fab.url})
    python_admin = KafkaAdminClient(bootstrap_servers=fab.url)
    try:
        with pytest.raises(InvalidArgumentError, match="ElectionType.PREFERRED"):
            admin.elect_leaders(7, [P0])
        if not fab.list_nodes():  # (file://: no controller; a coordinator service: no replicated partition)
            refused = admin.elect_leaders(ElectionType.PREFERRED, [P0]).exception()
            assert isinstance(refused, (InvalidConfigError, UnknownPartitionError))
            assert "data nodes" in str(refused) or "not replicated partitions" in str(refused)
            with pytest.raises(type(refused), match=re.escape(str(refused))):
                python_admin.perform_leader_election(0, {"orders": [0]})
            return
        preferred = _moved_preferred(fab, P0)
        elected = admin.elect_leaders(ElectionType.PREFERRED, [P0, P1]).result()
        assert elected[P0] is None and isinstance(elected[P1], ElectionNotNeededError)
        assert fab.partition_assignment(*P0).state.leader == preferred
        assert not [tp for tp in admin.elect_leaders(ElectionType.PREFERRED).result() if tp.topic == "orders"]

        preferred = _moved_preferred(fab, P1)
        answer = python_admin.perform_leader_election(0, {"orders": [0, 1]}, timeout_ms=10_000)
        assert (answer.throttle_time_ms, answer.error_code) == (0, 0)
        [(topic, [(first, not_needed, why), second])] = answer.replica_election_results
        assert (topic, first, not_needed, second) == ("orders", 0, ELECTION_NOT_NEEDED, (1, 0, None))
        assert "orders-0 is led by its preferred replica" in why
        assert fab.partition_assignment(*P1).state.leader == preferred
        [(topic, rows)] = python_admin.perform_leader_election(0, ["orders"]).replica_election_results
        assert topic == "orders" and [row[:2] for row in rows] == [(0, ELECTION_NOT_NEEDED), (1, ELECTION_NOT_NEEDED)]

        refused = admin.elect_leaders(ElectionType.UNCLEAN, [P0]).exception()
        assert isinstance(refused, InvalidConfigError) and "unclean.leader.election.enable" in str(refused)
        fab.create_topic("risky", config={"unclean.leader.election.enable": "true"})
        risky = TopicPartition("risky", 0)
        assert isinstance(admin.elect_leaders(ElectionType.UNCLEAN, [risky]).result()[risky], ElectionNotNeededError)
        [(_, [row])] = python_admin.perform_leader_election(1, {"risky": [0]}).replica_election_results
        assert row[:2] == (0, ELECTION_NOT_NEEDED) and "has a leader" in row[2]
    finally:
        admin.close()
        python_admin.close()


def test_acl_calls_are_refused_naming_the_acl_file(fab):
    confluent = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)  # (built as a confluent-kafka program does)
    python = ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                 ResourcePattern(ResourceType.TOPIC, "orders", ACLResourcePatternType.LITERAL))
    for admin, binding in ((AdminClient({"bootstrap.servers": fab.url}), confluent),
                           (KafkaAdminClient(bootstrap_servers=fab.url), python)):
        try:
            for call in (admin.create_acls, admin.describe_acls, admin.delete_acls):
                with pytest.raises(InvalidRequestError, match=f"{call.__name__}\\(\\) is not served: .* acl.file "
                                                              ".* restart each process"):
                    call([binding])
        finally:
            admin.close()


def test_why_a_partition_named_was_not_elected():
    """The error each client gets for a partition an election left as it was, and its Kafka error code."""
    def registered(leader: int | None, isr: tuple[int, ...]) -> PartitionRegistration:
        return PartitionRegistration(PartitionAssignment((1, 2, 3)), LeaderAndIsr(leader, 3, isr, 4, 1))

    not_elected = kafka_elections._not_elected
    preferred, unclean = ElectionType.PREFERRED, ElectionType.UNCLEAN
    assert isinstance(not_elected(preferred, ("t", 0), registered(1, (1, 2, 3))), ElectionNotNeededError)
    behind = not_elected(preferred, ("t", 0), registered(2, (2, 3)))
    assert isinstance(behind, PreferredLeaderNotAvailableError) and "node 1" in str(behind)
    assert isinstance(not_elected(unclean, ("t", 0), registered(2, (2,))), ElectionNotNeededError)
    assert isinstance(not_elected(unclean, ("t", 0), registered(None, (1,))), EligibleLeadersNotAvailableError)
    assert [error_code(e) for e in (None, behind, UnknownTopicError("x"), ValueError("x"))] == [0, 80, 3, -1]
    assert kafka_elections.election_type("unclean") is unclean and kafka_elections.election_type(0) is preferred
