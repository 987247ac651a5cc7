"""SQLite connector: the embedded state store (state CAS, outbox, durable timers)."""

from hermesbus.connectors.sqlite.config import SqliteConfig
from hermesbus.connectors.sqlite.errors import StoreError
from hermesbus.connectors.sqlite.state import SqliteStateStore

__all__ = ["SqliteConfig", "SqliteStateStore", "StoreError"]
