"""Redis connector: production session state (a Lua compare-and-set on the version that
fences a zombie worker, the outbox, durable timers), shared by every worker of a group;
memory's mid-term store (preferences ``pref:{user_id}:{name}``, choices, items) and the
tool store (idempotency keys, the result cache, call samples, probes)."""

from hermesbus.connectors.redis.client import INSTALL_HINT, connect
from hermesbus.connectors.redis.config import RedisConfig
from hermesbus.connectors.redis.errors import ConfigError, StoreError
from hermesbus.connectors.redis.memory import RedisPreferenceStore
from hermesbus.connectors.redis.state import RedisStateStore
from hermesbus.connectors.redis.tools import RedisToolStore

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
