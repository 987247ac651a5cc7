"""Where the embedded store lives: ``$HERMES_HOME/state.sqlite3`` unless told otherwise."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SqliteConfig"]


class SqliteConfig(BaseSettings):
    """``HERMES_HOME`` (default ``./.hermes``) holds the database file."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: Path = Path(".hermes")
    busy_timeout_ms: int = 10_000

    @property
    def path(self) -> Path:
        return self.home / "state.sqlite3"
