"""Confluent Schema Registry connector: used by the codec when a registry is configured."""

from .client import SchemaRegistryClient
from .config import RegistryConfig
from .errors import RegistryError

__all__ = ["RegistryConfig", "RegistryError", "SchemaRegistryClient"]
