"""Settings read from ``HERMES_*`` environment variables (frozen pydantic-settings models)."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["HermesSettings"]


class HermesSettings(BaseSettings):
    """Process-wide settings; secrets are ``SecretStr`` and never printed."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: Path = Path(".hermes")
    topic_prefix: str = ""
    """Put in front of every topic name (one per tenant or environment)."""
    schema_registry_url: str | None = None
    schema_registry_username: str | None = None
    schema_registry_password: SecretStr | None = None
    schema_registry_timeout_s: float = 10.0
