"""Which backend serves each store, picked from settings: the one place that picks.

The embedded default is SQLite under the state folder (``HERMES_HOME``); a configured
server replaces it: ``HERMES_REDIS_URL`` the session state (state, outboxes, timers: shared
by every worker of a group), memory's mid-term store and the tool store;
``HERMES_NEO4J_URL`` memory's long-term graph; ``HERMES_ELASTICSEARCH_URL`` the trace
index. The processors and the core know only the Protocols these implement
(``runtime.StateStore``, memory's ``PreferenceStore`` and ``GraphStore``, the tool
processor's ``ToolStore``, the index's ``TraceIndex``); the stack and the commands ask
here for the implementations.

Imports go one way (``tests/unit/test_layers.py`` holds them to it): the core, then the
processors, then the store connectors, then this module, the stack and the CLI.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Protocol, Self

from hermesbus.connectors.elasticsearch import ElasticsearchConfig, ElasticsearchTraceIndex
from hermesbus.connectors.neo4j import Neo4jConfig, Neo4jGraphStore
from hermesbus.connectors.redis import (
    RedisConfig,
    RedisPreferenceStore,
    RedisStateStore,
    RedisToolStore,
)
from hermesbus.connectors.sqlite import SqliteStateStore
from hermesbus.connectors.sqlite.index import SqliteTraceIndex
from hermesbus.connectors.sqlite.memory import SqliteGraphStore, SqlitePreferenceStore
from hermesbus.connectors.sqlite.tools import SqliteToolStore
from hermesbus.processors import memory, tool
from hermesbus.runtime import StateStore
from hermesbus.trace.index import TraceIndex

__all__ = [
    "Opened",
    "OpenedStateStore",
    "OpenedToolStore",
    "memory_stores",
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


def state_store() -> OpenedStateStore:
    """Session state, outboxes and timers: Redis when ``HERMES_REDIS_URL`` is set, else
    SQLite (``$HERMES_HOME/state.sqlite3``)."""
    redis = RedisConfig()
    if redis.url is not None:
        return RedisStateStore(redis)
    return SqliteStateStore()


def memory_stores(
    settings: memory.MemorySettings | None = None, *, embedded: bool = False
) -> memory.MemoryStores:
    """Memory's mid-term store (Redis when ``HERMES_REDIS_URL`` is set) and long-term graph
    (Neo4j when ``HERMES_NEO4J_URL`` is set); SQLite on one file (``settings.db_path``) for
    what is not configured. ``embedded``: SQLite whatever is configured (a shadow replay
    writes nowhere that lasts)."""
    settings = settings or memory.MemorySettings()
    path, timeout = settings.db_path, settings.busy_timeout_ms
    redis, neo4j = RedisConfig(), Neo4jConfig()
    preferences: memory.PreferenceStore = (
        RedisPreferenceStore(redis)
        if redis.url is not None and not embedded
        else SqlitePreferenceStore(path, busy_timeout_ms=timeout)
    )
    graph: memory.GraphStore = (
        Neo4jGraphStore(neo4j)
        if neo4j.url and not embedded
        else SqliteGraphStore(path, busy_timeout_ms=timeout)
    )
    return memory.MemoryStores(settings, preferences=preferences, graph=graph)


def tool_store(
    settings: tool.ToolSettings | None = None, *, path: Path | None = None
) -> OpenedToolStore:
    """Registered tools, released results (idempotency and cache), call samples, probes:
    Redis when ``HERMES_REDIS_URL`` is set, else SQLite (``settings.tools_path``). ``path``:
    the SQLite file of another state folder (``up --copy-tools-from``), whatever is set."""
    redis = RedisConfig()
    if redis.url is not None and path is None:
        return RedisToolStore(redis)
    return SqliteToolStore(path, settings=settings)


def tool_store_exists(settings: tool.ToolSettings) -> bool:
    """Whether there is a tool store to read: Redis configured (reading it creates nothing),
    else the SQLite file (opening a missing one would create it)."""
    return RedisConfig().url is not None or settings.tools_path.exists()


def trace_index(*, install: bool = True) -> TraceIndex:
    """Elasticsearch when ``HERMES_ELASTICSEARCH_URL`` is set, else SQLite under the state
    folder. ``install``: put the data stream's templates (the read-only commands do not)."""
    config = ElasticsearchConfig()
    if config.url:
        return ElasticsearchTraceIndex(config, install=install)
    return SqliteTraceIndex()
