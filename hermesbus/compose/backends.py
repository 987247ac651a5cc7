"""Which backend serves each store, picked from the program's :class:`Settings`: the one
place that picks.

The embedded default is SQLite under the state folder (``HERMES_HOME``); a configured
server replaces it: ``HERMES_REDIS_URL`` the session state (state, outboxes, timers: shared
by every worker of a group), memory's mid-term store and the tool store;
``HERMES_NEO4J_URL`` memory's long-term graph; ``HERMES_ELASTICSEARCH_URL`` the trace
index. The processors and the core know only the Protocols these implement
(``runtime.StateStore``, memory's ``PreferenceStore`` and ``GraphStore``, the tool
processor's ``ToolStore``, the index's ``TraceIndex``); the stack and the commands ask
here for the implementations. A command that asks a server itself (``doctor``) gets
its client here too, from the same settings.

Imports go one way (``tests/unit/test_layers.py`` holds them to it): the core, then the
processors, then the store connectors, then this module, the stack and the CLI.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self

from hermesbus.base.storemark import MarkBook
from hermesbus.compose.settings import Settings
from hermesbus.connectors.elasticsearch import ElasticsearchTraceIndex
from hermesbus.connectors.neo4j import Neo4jGraphStore
from hermesbus.connectors.neo4j import connect as connect_neo4j
from hermesbus.connectors.redis import (
    RedisPreferenceStore,
    RedisStateStore,
    RedisToolStore,
)
from hermesbus.connectors.redis import connect as connect_redis
from hermesbus.connectors.schema_registry import RegistryConfig, SchemaRegistryClient
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.connectors.sqlite.memory import SqliteGraphStore, SqlitePreferenceStore
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.processors import memory, tool
from hermesbus.runtime import StateStore
from hermesbus.trace.index import TraceIndex

if TYPE_CHECKING:
    from neo4j import AsyncDriver
    from redis.asyncio import Redis

__all__ = [
    "Opened",
    "OpenedStateStore",
    "OpenedToolStore",
    "memory_stores",
    "neo4j_driver",
    "redis_client",
    "schema_registry",
    "sqlite_memory",
    "state_store",
    "tool_store",
    "tool_store_exists",
    "trace_index",
]


class Opened(Protocol):
    """A store with a connection to open and close (``async with`` it) that can say
    where it keeps what it keeps, for messages (no secret in it)."""

    @property
    def where(self) -> str: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class OpenedStateStore(StateStore, Opened, Protocol):
    """A session state store, opened with ``async with``."""


class OpenedToolStore(tool.ToolStore, Opened, Protocol):
    """A tool store, opened with ``async with``."""


def _book(settings: Settings) -> MarkBook:
    """Where every store's mark is expected: the book of the settings' state folder (a
    redrive's sandbox keeps its own), given to each store as it is built."""
    return MarkBook(settings.home)


def state_store(settings: Settings) -> OpenedStateStore:
    """Session state, outboxes and timers: Redis when ``HERMES_REDIS_URL`` is set, else
    SQLite (``$HERMES_HOME/state.sqlite3``)."""
    book = _book(settings)
    store: OpenedStateStore = (
        RedisStateStore(settings.redis, book=book)
        if settings.redis.url is not None
        else SqliteStateStore(config=settings.sqlite, book=book)
    )
    return store


def memory_stores(settings: Settings) -> memory.MemoryStores:
    """Memory's mid-term store (Redis when ``HERMES_REDIS_URL`` is set) and long-term graph
    (Neo4j when ``HERMES_NEO4J_URL`` is set); SQLite on one file (``settings.memory.db_path``)
    for what is not configured."""
    own = settings.memory
    path, timeout = own.db_path, own.busy_timeout_ms
    redis, neo4j, book = settings.redis, settings.neo4j, _book(settings)
    preferences: memory.PreferenceStore = (
        RedisPreferenceStore(redis, book=book)
        if redis.url is not None
        else SqlitePreferenceStore(path, busy_timeout_ms=timeout, book=book)
    )
    graph: memory.GraphStore = (
        Neo4jGraphStore(neo4j, book=book)
        if neo4j.url
        else SqliteGraphStore(path, busy_timeout_ms=timeout, book=book)
    )
    return memory.MemoryStores(own, preferences=preferences, graph=graph)


def sqlite_memory(own: memory.MemorySettings) -> memory.MemoryStores:
    """Memory's two stores in SQLite on ``own.db_path``, whatever servers are configured
    (a shadow replay, the in-memory bus: nothing written where it lasts); their marks
    expected in the book of ``own.home``."""
    path, timeout, book = own.db_path, own.busy_timeout_ms, MarkBook(own.home)
    return memory.MemoryStores(
        own,
        preferences=SqlitePreferenceStore(path, busy_timeout_ms=timeout, book=book),
        graph=SqliteGraphStore(path, busy_timeout_ms=timeout, book=book),
    )


def tool_store(settings: Settings, *, path: Path | None = None) -> OpenedToolStore:
    """Registered tools, released results (idempotency and cache), call samples, probes:
    Redis when ``HERMES_REDIS_URL`` is set, else SQLite (``settings.tool.tools_path``).
    ``path``: the SQLite file of another state folder (``up --copy-tools-from``), whatever
    is set."""
    book = _book(settings)
    store: OpenedToolStore = (
        RedisToolStore(settings.redis, book=book)
        if settings.redis.url is not None and path is None
        else SqliteToolStore(path, settings=settings.tool, book=book)
    )
    return store


def tool_store_exists(settings: Settings) -> bool:
    """Whether there is a tool store to read: Redis configured (reading it creates nothing),
    else the SQLite file (opening a missing one would create it)."""
    return settings.redis.url is not None or settings.tool.tools_path.exists()


def trace_index(settings: Settings, *, install: bool = True) -> TraceIndex:
    """Elasticsearch when ``HERMES_ELASTICSEARCH_URL`` is set, else SQLite under the state
    folder. ``install``: put the data stream's templates (the read-only commands do not)."""
    if settings.elasticsearch.url:
        return ElasticsearchTraceIndex(settings.elasticsearch, install=install)
    return SqliteTraceIndex(config=settings.sqlite)


def redis_client(settings: Settings) -> Redis:
    """A client of the Redis ``HERMES_REDIS_URL`` names, for asking the server itself
    (``doctor``); no connection is made yet. ConfigError when none is configured."""
    return connect_redis(settings.redis)


def neo4j_driver(settings: Settings) -> AsyncDriver:
    """A driver for the Neo4j ``HERMES_NEO4J_URL`` names, for asking the server itself
    (``doctor``); it connects on first use. ConfigError when none is configured."""
    return connect_neo4j(settings.neo4j)


def schema_registry(settings: Settings) -> SchemaRegistryClient | None:
    """A client of the schema registry ``HERMES_SCHEMA_REGISTRY_URL`` names (close it),
    or None when none is configured."""
    config = RegistryConfig.from_settings(settings.bus)
    return SchemaRegistryClient(config) if config is not None else None
