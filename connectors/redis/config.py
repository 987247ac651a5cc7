"""Where Redis is: ``HERMES_REDIS_*`` settings."""

from __future__ import annotations

import re

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.config import without_userinfo

__all__ = ["RedisConfig"]

_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class RedisConfig(BaseSettings):
    """``HERMES_REDIS_URL`` (``redis://[user:password@]host:port/db``, or ``rediss://`` for
    TLS) selects Redis for session state; a password in it comes only from the environment
    and is never printed. Every key starts with ``HERMES_REDIS_PREFIX`` (``hermes``), so
    several buses (or a test per run) can share one server."""

    model_config = SettingsConfigDict(env_prefix="HERMES_REDIS_", frozen=True, extra="ignore")

    url: SecretStr | None = None
    prefix: str = "hermes"
    timeout_s: float = 2.0
    """How long one store operation (a command, or the few a commit or a timer scan makes)
    may take before the store counts as unreachable (then work pauses in place and is
    retried; nothing is committed past it). Connecting has the same bound."""

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _PREFIX.match(value):
            raise ValueError(f"letters, digits, '_', '.', '-' (at most 64); got {value!r}")
        return value

    @property
    def shown_url(self) -> str:
        """The URL for messages, without its ``user:password@`` part."""
        return without_userinfo(self.url.get_secret_value()) if self.url else ""
