"""A Redis client for ``RedisConfig.url`` (redis-py's asyncio), and its errors made ours.

The optional dependency missing is a :class:`ConfigError` naming the extra to install; a
connection refused, a timeout or a server error is a :class:`StoreError` naming the server
(without its password), so the runtime pauses the work in place and retries it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from hermesbus.errors import ConfigError, StoreError

from .config import RedisConfig

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["INSTALL_HINT", "connect", "translated"]

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
        socket_timeout=config.timeout_s,
        socket_connect_timeout=config.timeout_s,
        decode_responses=False,
    )


@asynccontextmanager
async def translated(config: RedisConfig, doing: str) -> AsyncIterator[None]:
    """Redis's errors while ``doing`` (e.g. ``commit``) raised as a StoreError."""
    from redis.exceptions import RedisError  # noqa: PLC0415 - an optional extra

    try:
        yield
    except RedisError as exc:
        kind = type(exc).__name__
        raise StoreError(f"Redis at {config.shown_url}: {doing} failed ({kind}: {exc})") from exc
    except OSError as exc:  # a socket error redis-py did not wrap
        raise StoreError(f"Redis at {config.shown_url}: {doing} failed ({exc})") from exc
