"""Where the Confluent-compatible schema registry is and how to authenticate."""

from __future__ import annotations

from dataclasses import dataclass

from hermesbus.base.config import HermesSettings

__all__ = ["RegistryConfig"]


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    url: str
    username: str | None = None
    password: str | None = None
    timeout_s: float = 10.0

    def __repr__(self) -> str:  # never print the password
        return f"RegistryConfig(url={self.url!r}, username={self.username!r})"

    @classmethod
    def from_settings(cls, settings: HermesSettings) -> RegistryConfig | None:
        """The configured registry, or ``None`` when ``HERMES_SCHEMA_REGISTRY_URL`` is unset."""
        if not settings.schema_registry_url:
            return None
        password = settings.schema_registry_password
        return cls(
            url=settings.schema_registry_url.rstrip("/"),
            username=settings.schema_registry_username,
            password=password.get_secret_value() if password else None,
            timeout_s=settings.schema_registry_timeout_s,
        )
