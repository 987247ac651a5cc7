"""SQLite connector: the embedded state store (state CAS, outbox, durable timers)."""

from .config import SqliteConfig
from .errors import StoreError
from .state import SqliteStateStore

__all__ = ["SqliteConfig", "SqliteStateStore", "StoreError"]
