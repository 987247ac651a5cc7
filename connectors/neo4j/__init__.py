"""Neo4j connector: memory's long-term graph (nodes and facts with who verified them, when,
how much they are trusted, and whether they are deprecated) on the official async driver."""

from .client import INSTALL_HINT, connect
from .config import Neo4jConfig
from .errors import ConfigError, StoreError
from .graph import Neo4jGraphStore

__all__ = ["INSTALL_HINT", "ConfigError", "Neo4jConfig", "Neo4jGraphStore", "StoreError", "connect"]
