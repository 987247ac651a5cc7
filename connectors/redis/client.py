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
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Final

from hermesbus.base.lifecycle import Service
from hermesbus.base.storemark import Mark, MarkBook, MarkGuard
from hermesbus.connectors.redis.config import RedisConfig
from hermesbus.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.connection import AbstractConnection
    from redis.commands.core import AsyncScript

__all__ = ["INSTALL_HINT", "RedisService", "connect", "mark_key", "translated"]

INSTALL_HINT = "pip install 'hermesbus[redis]'"


OnConnect = Callable[["AbstractConnection"], Awaitable[None]]


def connect(config: RedisConfig, on_connect: OnConnect | None = None) -> Redis:
    """A client for ``config.url`` (bytes in, bytes out); no connection is made yet.
    ``on_connect`` runs on every new connection, before any command is sent on it."""
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
        redis_connect_func=on_connect,
    )


def mark_key(config: RedisConfig, name: str) -> str:
    """Where the store ``name`` (``state``, ``tools``, ``memory``) keeps its mark."""
    return f"{config.prefix}:{{{config.prefix}:mark}}:{name}"


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
        raise StoreError(
            f"Redis at {config.shown_url}: {doing} failed ({kind}: {exc})",
            retriable=_outage(exc),
        ) from exc
    except OSError as exc:  # a socket error redis-py did not wrap
        raise StoreError(f"Redis at {config.shown_url}: {doing} failed ({exc})") from exc


_BUSY_REPLIES: Final = frozenset(
    {"LOADING", "READONLY", "MASTERDOWN", "MISCONF", "OOM", "BUSY", "TRYAGAIN", "CLUSTERDOWN"}
    | {"NOREPLICAS"}
)
"""Error replies of a server that is starting, full, busy, failing over or cannot persist:
outages (redis-py drops the code from the text of those it has a class for)."""


def _outage(exc: Exception) -> bool:
    """True unless the server refused the command itself (a bug: trying again cannot help):
    a lost or refused connection, a timeout, or a busy, loading, read-only, full or
    failing-over server, also inside a pipeline's error."""
    from redis.exceptions import (  # noqa: PLC0415 - an optional extra
        ClusterError,
        DataError,
        OutOfMemoryError,
        ReadOnlyError,
        ResponseError,
        TryAgainError,
    )

    if isinstance(exc, ReadOnlyError | OutOfMemoryError | TryAgainError | ClusterError):
        return True
    if isinstance(exc, DataError):
        return False
    if isinstance(exc, ResponseError):
        text = str(exc).rsplit(" of pipeline caused error: ", 1)[-1]
        return text.split(" ", 1)[0] in _BUSY_REPLIES
    return True


class _MarkGone(Exception):  # never escapes: doing() raises StoreLost for it
    """Raised on a new connection whose server lacks the store's mark (after dropping
    it): the command that opened it is not sent, and redis-py does not retry this."""


class RedisService(Service):
    """What every Redis store shares: one client for ``config``, opened by ``start()`` (the
    server must answer a PING) with the store's :attr:`scripts` registered, closed by
    ``stop()``. redis-py calls a registered script by SHA and loads it again after
    NOSCRIPT (a restarted or failed-over server).

    The store's mark (:mod:`hermesbus.base.storemark`) is the key :func:`mark_key`: read on every
    new connection before its first command (a server restarted empty is caught before
    anything is read from it or written to it), every ``CHECK_EVERY_S`` and after an error.
    Every operation runs in :meth:`doing`, which raises ``StoreLost`` while it is gone."""

    scripts: ClassVar[Mapping[str, str]] = {}
    """Name -> Lua source of the store's scripts."""
    what: ClassVar[str] = "store"
    """How errors name the store, e.g. ``state store``."""
    mark_name: ClassVar[str] = "store"
    """The store's mark's name (:func:`mark_key`)."""
    held: ClassVar[str] = "what it held"
    """What is lost with the store, for the log line that says so."""

    def __init__(self, config: RedisConfig, *, book: MarkBook | None = None) -> None:
        """``book``: where the store's mark is expected (the composition gives the state
        folder's); given none, the store refuses to start (ConfigError)."""
        self.config = config
        self._redis: Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self._mark_key = mark_key(self.config, self.mark_name)
        store = f"redis {self.config.shown_url} {self.config.prefix} {self.mark_name}"
        where = f"the Redis {self.what} at {self.config.shown_url} (prefix {self.config.prefix})"
        self.marks = MarkGuard(store, where, self.held, book=book)

    @property
    def where(self) -> str:
        return f"Redis at {self.config.shown_url} (keys {self.config.prefix}:*)"

    async def start(self) -> None:
        if self._redis is not None:
            return
        self.marks.require_book()
        client = connect(self.config, self._connected)
        try:
            async with translated(self.config, "connecting"):
                await client.ping()
                await self._settle(client)
        except BaseException:
            await client.aclose()
            raise
        self._scripts = {name: client.register_script(s) for name, s in self.scripts.items()}
        self._redis = client

    async def _settle(self, client: Redis) -> None:
        """The mark at start: written at first use, else compared with the book's (a loss
        is noted here and raised by the first operation)."""
        found = Mark.loads(await client.get(self._mark_key))
        with contextlib.suppress(StoreError):  # a loss: raised by the operations
            first = self.marks.settle(found)
            if first is not None:
                await client.set(self._mark_key, first.dumps(), nx=True)
                self.marks.made(Mark.loads(await client.get(self._mark_key)))

    async def _connected(self, connection: AbstractConnection) -> None:
        """Every new connection: the server's handshake, then its mark read back first."""
        await connection.on_connect()
        if not self.marks.watching:
            return
        await connection.send_command("GET", self._mark_key)
        found = Mark.loads(await connection.read_response())
        try:
            self.marks.verify(found)
        except StoreError as exc:
            await connection.disconnect()  # a fresh one reads the mark again
            raise _MarkGone(str(exc)) from exc

    async def adopt(self) -> Mark:
        """Accept the store as it is now (``stores adopt``): a new mark, written and recorded."""
        mark = Mark.new()
        async with translated(self.config, "adopting"):
            await self.redis.set(self._mark_key, mark.dumps())
        self.marks.made(mark)
        return mark

    async def peek(self) -> Mark | None:
        """The mark in the store now, read on a connection of its own (``doctor``)."""
        client = connect(self.config)
        try:
            async with translated(self.config, "reading its mark"):
                return Mark.loads(await client.get(self._mark_key))
        finally:
            await client.aclose()

    @asynccontextmanager
    async def doing(self, what: str) -> AsyncIterator[None]:
        """One operation (``what``, e.g. ``commit``): bounded and its errors made ours
        (:func:`translated`), refused while the store's mark is gone, the mark read first
        when it is due (every ``CHECK_EVERY_S``, after an error or a reconnect)."""
        try:
            async with translated(self.config, what):
                if self.marks.due():
                    self.marks.verify(Mark.loads(await self.redis.get(self._mark_key)))
                self.marks.raise_if_lost()
                yield
        except _MarkGone:
            self.marks.raise_if_lost()
            raise
        except StoreError:
            self.marks.suspect()
            self.marks.raise_if_lost()
            raise

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
