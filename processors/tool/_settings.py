"""Settings of the tool processor, read from ``HERMES_*`` environment variables, and the
environment its tools are given (read where the program starts, handed down)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.base.config import StateHome, default_home

__all__ = ["DEMO_MODULES", "ToolEnvironment", "ToolSettings", "module_allowed", "private_part"]

DEMO_MODULES = "hermesbus.processors.tool.demo"
"""The module prefix allowed by default: the demo tools."""


def module_allowed(target: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the module of ``module:function`` is one of ``prefixes`` or inside one."""
    module = target.partition(":")[0]
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def private_part(target: str) -> str | None:
    """The first part of ``module:function`` (a dotted part of the module path or of the
    attribute) that starts with ``_``; None when nothing is private. A private callable
    is never a tool, probe or verifier, even in an allowed module (``demo.tools:_signed``
    would sign any arguments)."""
    module, _, attribute = target.partition(":")
    parts = (*module.split("."), *attribute.split("."))
    return next((part for part in parts if part.startswith("_")), None)


class ToolSettings(BaseSettings):
    """``HERMES_TOOL_HOSTS`` (comma-separated allow-list of HTTP tool hosts),
    ``HERMES_TOOL_MODULES`` (comma-separated allow-list of module prefixes python
    targets, probes, verifiers and backups may name: their code runs with the
    processor's rights), ``HERMES_DEBUG`` (admits tools with fallback ``none``),
    ``HERMES_HOME`` (holds ``tools.sqlite3``)."""

    model_config = SettingsConfigDict(env_prefix="HERMES_", frozen=True, extra="ignore")

    home: StateHome = Field(default_factory=default_home)
    debug: bool = False
    tool_hosts: str = "127.0.0.1,localhost"
    tool_modules: str = DEMO_MODULES
    tool_spawn_timeout_s: float = 60.0
    """How long a python tool's worker may take to start (import the tool) before failing."""
    tool_health_window: int = 20
    """Observed success rate: over this many latest calls of the tool."""
    tool_max_arguments_bytes: int = Field(default=256 * 1024, gt=0)
    """Larger ``arguments_json`` is refused (400) before it is parsed."""
    tool_max_json_depth: int = Field(default=64, gt=0)
    """Arguments nested deeper are refused (400), results are discarded (502)."""
    tool_result_retention_s: float = Field(default=7 * 24 * 3600, gt=0)
    """Stored results (idempotency and cache) older than this, by envelope time, are pruned."""
    tool_response_factor: int = Field(default=4, gt=0)
    """An HTTP or MCP tool's body may be this many times its ``max_result_bytes``; larger
    is 502."""
    mcp_relist_s: float = Field(default=2.0, ge=0)
    """An MCP server's tool list is listed again before a call when older than this (and
    whenever the server says it changed; a probe always lists it): a changed definition
    stops the tool's calls at most this long after it appears (0: before every call)."""
    mcp_ping_grace_s: float = Field(default=2.0, gt=0)
    """After a call to an MCP server timed out, how long the server has to answer a ping
    before its session is closed (a stdio server killed)."""
    demo_tools: Literal["python", "mcp"] = "python"
    """``HERMES_DEMO_TOOLS``: the demo tools run as python tools, or served by the demo
    MCP server (over stdio) with the same answers."""

    @cached_property
    def hosts(self) -> frozenset[str]:
        return frozenset(h.strip().lower() for h in self.tool_hosts.split(",") if h.strip())

    @cached_property
    def modules(self) -> tuple[str, ...]:
        return tuple(m.strip() for m in self.tool_modules.split(",") if m.strip())

    @property
    def tools_path(self) -> Path:
        return self.home / "tools.sqlite3"

    @property
    def mcp_state(self) -> Path:
        """Where stdio MCP servers' stderr logs and pid files are kept."""
        return self.home / "mcp"


class ToolEnvironment(BaseModel):
    """The variables tools are given, from the program's environment as it was read at
    its start: a python tool's worker gets the base ones (PATH, HOME, LANG, LC_*, TZ,
    TMPDIR) and those its spec's ``env`` names, and the service checks a result's
    signature with the key its ``key_env`` names. The values are secrets, never printed;
    the :class:`~hermesbus.processors.tool.ToolService` is handed :meth:`revealed`."""

    model_config = ConfigDict(frozen=True)

    variables: tuple[tuple[str, SecretStr], ...] = Field(default=(), repr=False)

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> Self:
        """Every variable of ``environ`` (a program's ``os.environ``, read where it starts)."""
        return cls(variables=tuple((k, SecretStr(v)) for k, v in sorted(environ.items())))

    def revealed(self) -> dict[str, str]:
        """The variables with their values: for the tool service, never to print."""
        return {name: value.get_secret_value() for name, value in self.variables}
