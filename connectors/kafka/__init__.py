"""Kafka connector: connection settings, topic administration, client start-up."""

from . import assignments as assignments  # installs the check of a stale assignment
from .admin import ExistingTopic, KafkaAdmin, NewTopicSpec
from .client import NO_TOPIC_HINT, UNREACHABLE_HINT, kafka_reason, require_topic, start_or_close
from .commits import commit_as_member, is_member
from .config import KafkaConfig
from .errors import BrokerError, ConfigError
from .partitioner import PARTITIONER_HINT, partition_of

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
