"""Kafka connector: connection settings, topic administration, client start-up."""

from .admin import KafkaAdmin
from .client import start_or_close
from .config import KafkaConfig
from .errors import BrokerError, ConfigError
from .partitioner import PARTITIONER_HINT, partition_of

__all__ = [
    "PARTITIONER_HINT",
    "BrokerError",
    "ConfigError",
    "KafkaAdmin",
    "KafkaConfig",
    "partition_of",
    "start_or_close",
]
