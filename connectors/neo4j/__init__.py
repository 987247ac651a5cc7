"""Neo4j connector: memory's long-term graph (nodes and facts with who verified them, when,
how much they are trusted, and whether they are deprecated) on the official async driver."""

from hermesbus.connectors.neo4j.client import INSTALL_HINT, connect
from hermesbus.connectors.neo4j.config import Neo4jConfig
from hermesbus.connectors.neo4j.errors import ConfigError, StoreError
from hermesbus.connectors.neo4j.graph import Neo4jGraphStore

__all__ = ["INSTALL_HINT", "ConfigError", "Neo4jConfig", "Neo4jGraphStore", "StoreError", "connect"]
