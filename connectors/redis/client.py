"""A Redis client for ``RedisConfig.url`` (redis-py's asyncio), and its errors made ours.

The optional dependency missing is a :class:`ConfigError` naming the extra to install; a
connection refused, a timeout or a server error is a :class:`StoreError` naming the server
(without its password), so the runtime pauses the work in place and retries it.

redis-py is given no socket timeout: with one it wraps every command it sends in
``asyncio.wait_for``, and Python 3.11's ``wait_for`` returns the result instead of raising
when a cancellation arrives as the send completes. A processor's timer loop, cancelled at
stop, then went on calling Redis and the stop never finished (nearly every cancellation
landed there: the stopping task is woken in step with the loop it cancels). Instead
:func:`translated` bounds each store operation with ``asyncio.timeout``, which keeps a
cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from hermesbus.errors import ConfigError, StoreError
from hermesbus.lifecycle import Service

from .config import RedisConfig

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = ["INSTALL_HINT", "RedisService", "connect", "translated"]

INSTALL_HINT = "pip install 'hermesbus[redis]'"


def connect(config: RedisConfig) -> Redis:
    """A client for ``config.url`` (bytes in, bytes out); no connection is made yet."""
    if config.url is None:
        raise ConfigError("no Redis URL: set HERMES_REDIS_URL")
    try:
        from redis.asyncio import Redis  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise ConfigError(
            f"HERMES_REDIS_URL is set but the Redis client is not installed: {INSTALL_HINT}"
        ) from exc
    return Redis.from_url(
        config.url.get_secret_value(),
        socket_timeout=None,  # translated() times each operation (see the module's doc)
        socket_connect_timeout=config.timeout_s,
        decode_responses=False,
    )


@asynccontextmanager
async def translated(config: RedisConfig, doing: str) -> AsyncIterator[None]:
    """Redis's errors while ``doing`` (e.g. ``commit``) raised as a StoreError, and so is
    ``doing`` taking longer than ``config.timeout_s`` (the connection it was on is dropped
    by redis-py, so a late answer cannot be read as the next command's)."""
    from redis.exceptions import RedisError  # noqa: PLC0415 - an optional extra

    try:
        async with asyncio.timeout(config.timeout_s):
            yield
    except TimeoutError as exc:
        raise StoreError(
            f"Redis at {config.shown_url}: {doing} did not finish within {config.timeout_s:g} s"
        ) from exc
    except RedisError as exc:
        kind = type(exc).__name__
        raise StoreError(f"Redis at {config.shown_url}: {doing} failed ({kind}: {exc})") from exc
    except OSError as exc:  # a socket error redis-py did not wrap
        raise StoreError(f"Redis at {config.shown_url}: {doing} failed ({exc})") from exc


class RedisService(Service):
    """What every Redis store shares: one client for ``config``, opened by ``start()`` (the
    server must answer a PING) with the store's :attr:`scripts` registered, closed by
    ``stop()``. redis-py calls a registered script by SHA and loads it again after
    NOSCRIPT (a restarted or failed-over server)."""

    scripts: ClassVar[Mapping[str, str]] = {}
    """Name -> Lua source of the store's scripts."""
    what: ClassVar[str] = "store"
    """How errors name the store, e.g. ``state store``."""

    def __init__(self, config: RedisConfig | None = None) -> None:
        self.config = config or RedisConfig()
        self._redis: Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}

    @property
    def where(self) -> str:
        return f"Redis at {self.config.shown_url} (keys {self.config.prefix}:*)"

    async def start(self) -> None:
        if self._redis is not None:
            return
        client = connect(self.config)
        try:
            async with translated(self.config, "connecting"):
                await client.ping()
        except BaseException:
            await client.aclose()
            raise
        self._scripts = {name: client.register_script(s) for name, s in self.scripts.items()}
        self._redis = client

    async def stop(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            await client.aclose()

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            raise StoreError(f"the Redis {self.what} is not started")
        return self._redis

    async def script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run the registered script ``name``."""
        if self._redis is None:
            raise StoreError(f"the Redis {self.what} is not started")
        return await self._scripts[name](keys=keys, args=args)
