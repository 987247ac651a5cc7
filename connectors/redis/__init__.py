"""Redis connector: production session state (a Lua compare-and-set on the version that
fences a zombie worker, the outbox, durable timers), shared by every worker of a group;
memory's mid-term store (preferences ``pref:{user_id}:{name}``, choices, items) and the
tool store (idempotency keys, the result cache, call samples, probes)."""

from .client import INSTALL_HINT, connect
from .config import RedisConfig
from .errors import ConfigError, StoreError
from .memory import RedisPreferenceStore
from .state import RedisStateStore
from .tools import RedisToolStore

__all__ = [
    "INSTALL_HINT",
    "ConfigError",
    "RedisConfig",
    "RedisPreferenceStore",
    "RedisStateStore",
    "RedisToolStore",
    "StoreError",
    "connect",
]
