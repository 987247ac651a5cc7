"""Kafka connector: connection settings, topic administration, client start-up."""

from hermesbus.connectors.kafka import (
    assignments as assignments,  # installs the check of a stale assignment
)
from hermesbus.connectors.kafka.admin import ExistingTopic, KafkaAdmin, NewTopicSpec
from hermesbus.connectors.kafka.client import (
    NO_TOPIC_HINT,
    UNREACHABLE_HINT,
    kafka_reason,
    require_topic,
    start_or_close,
)
from hermesbus.connectors.kafka.commits import commit_as_member, is_member
from hermesbus.connectors.kafka.config import KafkaConfig
from hermesbus.connectors.kafka.errors import BrokerError, ConfigError
from hermesbus.connectors.kafka.partitioner import PARTITIONER_HINT, partition_of

__all__ = [
    "NO_TOPIC_HINT",
    "PARTITIONER_HINT",
    "UNREACHABLE_HINT",
    "BrokerError",
    "ConfigError",
    "ExistingTopic",
    "KafkaAdmin",
    "KafkaConfig",
    "NewTopicSpec",
    "commit_as_member",
    "is_member",
    "kafka_reason",
    "partition_of",
    "require_topic",
    "start_or_close",
]
