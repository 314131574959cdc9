"""Kafka's Python client classes over a fabric: a program written for kafka-python or confluent-kafka runs with
its import line changed, its brokers named by a fabric URL:

    from fabric.kafka import KafkaProducer, KafkaConsumer, KafkaAdminClient   # for: from kafka import ...
    from fabric.kafka import Producer, Consumer, AdminClient                  # for: from confluent_kafka import ...

    producer = KafkaProducer(bootstrap_servers="fabric://localhost:9093")
    consumer = Consumer({"bootstrap.servers": "file:///tmp/fabric", "group.id": "billing"})

The errors under the names both clients give them are in fabric.errors (kafka-python's KafkaError, ...);
confluent-kafka's KafkaError (an error's code as a value, KafkaError._PARTITION_EOF, ...) and KafkaException (the
base of every fabric error) are here, as `from confluent_kafka import KafkaError, KafkaException` has them.
"""
from __future__ import annotations

from fabric.client.confluent_message import Message
from fabric.client.kafka_acls import (
    ACL,
    AclBinding,
    AclBindingFilter,
    ACLFilter,
    ACLOperation,
    AclOperation,
    ACLPermissionType,
    AclPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternType,
)
from fabric.client.kafka_admin import NewPartitions, NewTopic, OffsetSpec
from fabric.client.kafka_clients import AdminClient, KafkaAdminClient, KafkaConsumer, KafkaProducer, Producer
from fabric.client.kafka_clients import ConsumerClient as Consumer
from fabric.client.kafka_configs import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType
from fabric.client.kafka_configs import ResourceType as ConfigResourceType  # kafka-python's name (TOPIC, BROKER)
from fabric.client.kafka_elections import ElectionType
from fabric.client.kafka_error import KafkaError
from fabric.client.kafka_groups import ConsumerGroupState, ConsumerGroupTopicPartitions, OffsetAndMetadata
from fabric.client.kafka_metadata import TopicCollection
from fabric.client.lookups import OffsetAndTimestamp
from fabric.client.rebalance_callbacks import ConsumerRebalanceListener
from fabric.client.topic_partition import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, OFFSET_STORED, TopicPartition
from fabric.common.errors import FabricError as KafkaException

__all__ = ["ACL", "OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "ACLFilter", "ACLOperation",
           "ACLPermissionType", "ACLResourcePatternType", "AclBinding", "AclBindingFilter", "AclOperation",
           "AclPermissionType", "AdminClient", "AlterConfigOpType",
           "ConfigEntry", "ConfigResource", "ConfigResourceType", "ConfigSource", "Consumer", "ConsumerGroupState",
           "ConsumerRebalanceListener",
           "ConsumerGroupTopicPartitions", "ElectionType", "KafkaAdminClient", "KafkaConsumer", "KafkaError",
           "KafkaException", "KafkaProducer",
           "Message", "NewPartitions", "NewTopic", "OffsetAndMetadata", "OffsetAndTimestamp", "OffsetSpec", "Producer",
           "ResourcePattern", "ResourcePatternType", "ResourceType", "TopicCollection", "TopicPartition"]
