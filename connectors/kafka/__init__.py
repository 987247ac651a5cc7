"""Kafka connector: connection settings, topic administration, client start-up."""

from .admin import KafkaAdmin
from .client import start_or_close
from .config import KafkaConfig
from .errors import BrokerError, ConfigError

__all__ = ["BrokerError", "ConfigError", "KafkaAdmin", "KafkaConfig", "start_or_close"]
