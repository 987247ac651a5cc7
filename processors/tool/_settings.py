"""Settings of the tool processor, read from ``HERMES_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ToolSettings"]


class ToolSettings(BaseSettings):
    """``HERMES_TOOL_HOSTS`` (comma-separated allow-list of HTTP tool hosts), ``HERMES_DEBUG``
    (admits tools with fallback ``none``), ``HERMES_HOME`` (holds ``tools.sqlite3``)."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: Path = Path(".hermes")
    debug: bool = False
    tool_hosts: str = "127.0.0.1,localhost"
    tool_spawn_timeout_s: float = 60.0
    """How long a python tool's worker may take to start (import the tool) before failing."""
    tool_health_window: int = 20
    """Observed success rate: over this many latest calls of the tool."""

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset(h.strip().lower() for h in self.tool_hosts.split(",") if h.strip())

    @property
    def tools_path(self) -> Path:
        return self.home / "tools.sqlite3"
