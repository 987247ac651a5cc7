"""Confluent Schema Registry connector: used by the codec when a registry is configured."""

from hermesbus.connectors.schema_registry.client import SchemaRegistryClient
from hermesbus.connectors.schema_registry.config import RegistryConfig
from hermesbus.connectors.schema_registry.errors import RegistryError

__all__ = ["RegistryConfig", "RegistryError", "SchemaRegistryClient"]
