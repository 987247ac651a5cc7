"""Where Neo4j is: ``HERMES_NEO4J_*`` settings."""

from __future__ import annotations

import re

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.config import without_userinfo

__all__ = ["Neo4jConfig"]

_NAMESPACE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Neo4jConfig(BaseSettings):
    """``HERMES_NEO4J_URL`` (``bolt://``, ``neo4j://``, ``+s`` for TLS) selects Neo4j for
    memory's long-term graph, with ``HERMES_NEO4J_USER`` and ``HERMES_NEO4J_PASSWORD``
    (only from the environment, never printed; none: a server without authentication).
    Every node carries ``HERMES_NEO4J_NAMESPACE`` (``hermes``), so several buses (or a
    test each) can share one database, as Community has only one."""

    model_config = SettingsConfigDict(env_prefix="HERMES_NEO4J_", frozen=True, extra="ignore")

    url: str | None = None
    user: str | None = None
    password: SecretStr | None = None
    database: str | None = None
    """None: the server's default database."""
    namespace: str = "hermes"
    timeout_s: float = 5.0

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not _NAMESPACE.match(value):
            raise ValueError(f"letters, digits, '_', '.', '-' (at most 64); got {value!r}")
        return value

    @property
    def shown_url(self) -> str:
        return without_userinfo(self.url) if self.url else ""
