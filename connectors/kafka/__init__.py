"""Kafka connector: connection settings, topic administration, client start-up."""

from .admin import ExistingTopic, KafkaAdmin, NewTopicSpec
from .client import UNREACHABLE_HINT, kafka_reason, start_or_close
from .config import KafkaConfig
from .errors import BrokerError, ConfigError
from .partitioner import PARTITIONER_HINT, partition_of

__all__ = [
    "PARTITIONER_HINT",
    "UNREACHABLE_HINT",
    "BrokerError",
    "ConfigError",
    "ExistingTopic",
    "KafkaAdmin",
    "KafkaConfig",
    "NewTopicSpec",
    "kafka_reason",
    "partition_of",
    "start_or_close",
]
