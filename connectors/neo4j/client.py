"""A Neo4j driver for ``Neo4jConfig.url`` (the official async driver), and its errors made
ours: the optional dependency missing is a :class:`ConfigError` naming the extra; a server
gone or a failed query is a :class:`StoreError` naming the server, never its password."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from hermesbus.connectors.neo4j.config import Neo4jConfig
from hermesbus.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from neo4j import AsyncDriver

__all__ = ["INSTALL_HINT", "connect", "translated"]

INSTALL_HINT = "pip install 'hermesbus[neo4j]'"


def connect(config: Neo4jConfig) -> AsyncDriver:
    """A driver for ``config.url``; it connects on first use."""
    if not config.url:
        raise ConfigError("no Neo4j URL: set HERMES_NEO4J_URL")
    try:
        from neo4j import AsyncGraphDatabase  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise ConfigError(
            f"HERMES_NEO4J_URL is set but the Neo4j driver is not installed: {INSTALL_HINT}"
        ) from exc
    auth = None
    if config.user is not None:
        secret = config.password.get_secret_value() if config.password is not None else ""
        auth = (config.user, secret)
    return AsyncGraphDatabase.driver(
        config.url,
        auth=auth,
        connection_timeout=config.timeout_s,
        connection_acquisition_timeout=config.timeout_s,
        # no retries inside the driver: a query fails at once when the server is away, so
        # the runtime holds the record in place and tells whoever waits, from the start
        max_transaction_retry_time=0,
    )


@asynccontextmanager
async def translated(config: Neo4jConfig, doing: str) -> AsyncIterator[None]:
    """The driver's errors while ``doing`` raised as a StoreError."""
    from neo4j.exceptions import DriverError, Neo4jError  # noqa: PLC0415 - an optional extra

    try:
        yield
    except (Neo4jError, DriverError) as exc:
        kind = type(exc).__name__
        raise StoreError(
            f"Neo4j at {config.shown_url}: {doing} failed ({kind}: {exc})",
            retriable=_outage(exc),
        ) from exc
    except OSError as exc:
        raise StoreError(f"Neo4j at {config.shown_url}: {doing} failed ({exc})") from exc


def _outage(exc: Exception) -> bool:
    """True for a server that is gone or unavailable, a session or connection lost, a
    transient failure the driver says may be retried, or refused credentials; False for a
    query, a constraint or a use of the driver the server refuses: trying again cannot help."""
    from neo4j.exceptions import (  # noqa: PLC0415 - an optional extra
        ClientError,
        DriverError,
        Neo4jError,
        ServiceUnavailable,
        SessionExpired,
    )

    if isinstance(exc, ServiceUnavailable | SessionExpired):
        return True
    if isinstance(exc, ClientError) and exc.code is not None:
        return exc.code.startswith("Neo.ClientError.Security.")
    if isinstance(exc, Neo4jError | DriverError):
        return exc.is_retryable()
    return True
