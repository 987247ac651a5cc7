"""Kafka connector: connection settings and topic administration (the bus comes in #3)."""

from .admin import KafkaAdmin
from .config import KafkaConfig
from .errors import BrokerError, ConfigError

__all__ = ["BrokerError", "ConfigError", "KafkaAdmin", "KafkaConfig"]
