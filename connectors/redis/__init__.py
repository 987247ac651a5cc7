"""Redis connector: production session state (a Lua compare-and-set on the version that
fences a zombie worker, the outbox, durable timers), shared by every worker of a group,
and memory's mid-term store (preferences ``pref:{user_id}:{name}``, choices, items)."""

from .client import INSTALL_HINT, connect
from .config import RedisConfig
from .errors import ConfigError, StoreError
from .memory import RedisPreferenceStore
from .state import RedisStateStore

__all__ = [
    "INSTALL_HINT",
    "ConfigError",
    "RedisConfig",
    "RedisPreferenceStore",
    "RedisStateStore",
    "StoreError",
    "connect",
]
