"""One settings object for a whole program, read once where it starts and passed down.

Each concern keeps its own frozen settings model, with its own ``HERMES_*`` variables
(``HERMES_KAFKA_*``, ``HERMES_RUNTIME_*``, ``HERMES_REDIS_*``, ...): :class:`Settings`
holds one of each, and one state folder (``HERMES_HOME``) for all of them. A command, ``up``
and the test kit call :meth:`Settings.from_environment` once; a library user may build one
in code instead (:meth:`Settings.of`: nothing is read from the environment then). Below
the composition layer, code is handed the part it needs and never reads the environment.

A redrive's sandbox is made from the bus's settings by :meth:`Settings.sandbox`: what it
gives is the sandbox's by construction (SQLite files in its folder, no server), not by
clearing variables someone remembered to list.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from hermesbus.base.config import HermesSettings, StateHome
from hermesbus.compose.metrics import MetricsSettings
from hermesbus.compose.otel import OtelSettings
from hermesbus.connectors.elasticsearch import ElasticsearchConfig
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.neo4j import Neo4jConfig
from hermesbus.connectors.redis import RedisConfig
from hermesbus.connectors.sqlite import SqliteConfig
from hermesbus.errors import ConfigError, SettingError
from hermesbus.identity import KeySettings
from hermesbus.processors.conversation import ConversationSettings
from hermesbus.processors.diagnostics import DiagnosticsSettings
from hermesbus.processors.memory import MemorySettings
from hermesbus.processors.tool import ToolEnvironment, ToolSettings
from hermesbus.runtime import RuntimeSettings

__all__ = ["Settings"]

_PARTS: dict[str, type[BaseModel]] = {
    "bus": HermesSettings,
    "kafka": KafkaConfig,
    "runtime": RuntimeSettings,
    "sqlite": SqliteConfig,
    "redis": RedisConfig,
    "neo4j": Neo4jConfig,
    "elasticsearch": ElasticsearchConfig,
    "tool": ToolSettings,
    "conversation": ConversationSettings,
    "memory": MemorySettings,
    "metrics": MetricsSettings,
    "otel": OtelSettings,
    "diagnostics": DiagnosticsSettings,
}
"""Every part of :class:`Settings` but the keys, with the model that reads it."""
_HOMED = ("bus", "sqlite", "tool", "memory")
"""The parts that keep files under the state folder: given the one ``home``."""
SANDBOX: dict[str, str] = {
    "bus": "moved",
    "kafka": "taken",
    "runtime": "taken",
    "sqlite": "moved",
    "redis": "default",
    "neo4j": "default",
    "elasticsearch": "default",
    "tool": "moved",
    "conversation": "taken",
    "memory": "moved",
    "metrics": "taken",
    "otel": "default",
    "diagnostics": "default",
    "tool_env": "taken",
}
"""What a redrive's sandbox takes of each part of the bus's settings: ``taken`` as it is
(the broker, the tuning), ``moved`` into the sandbox's folder, or ``default`` (a part not
taken: no server). Every part is named here; tests/unit/compose/test_settings.py fails on
a part that is not, so a new backend is placed on purpose.

``metrics`` is taken on a free port (``HERMES_METRICS_ENABLED`` and the host as the bus
has them; its port is the bus's). ``tool_env`` is taken: a redrive with ``--live-tools``
runs the bus's tools, and they get what they get on the bus (a worker the variables its
spec names, the service the keys its signatures name), or they would fail where the
bus's did not. No store or server is chosen from it (those come from the other parts); in
recorded mode no tool runs."""
_GIVEN: dict[str, type[BaseModel]] = {"keys": KeySettings, "tool_env": ToolEnvironment}
"""The parts no settings model reads: built by :meth:`Settings.from_environment` from the
environment, or given in code."""


class Settings(BaseModel):
    """Every setting of a hermesbus program, one frozen part per concern."""

    model_config = ConfigDict(frozen=True)

    bus: HermesSettings
    """The state folder, topic prefix, schema registry and Kibana."""
    kafka: KafkaConfig
    runtime: RuntimeSettings
    sqlite: SqliteConfig
    redis: RedisConfig
    neo4j: Neo4jConfig
    elasticsearch: ElasticsearchConfig
    tool: ToolSettings
    conversation: ConversationSettings
    memory: MemorySettings
    metrics: MetricsSettings
    """Where ``/metrics`` is served (a free loopback port by default)."""
    otel: OtelSettings
    """Where spans are exported (OTLP/HTTP; none by default). A sandbox exports none."""
    diagnostics: DiagnosticsSettings
    """The diagnostics rollup's windows and timing (a sandbox runs none)."""
    keys: KeySettings
    tool_env: ToolEnvironment
    """The program's environment as read at its start, for its tools only (a worker gets
    the variables its spec names, a signature is checked with the key it names); secrets,
    never printed. Built in code: empty unless given."""

    @property
    def home(self) -> Path:
        """The state folder every part keeps its files under."""
        return self.bus.home

    @classmethod
    def from_environment(cls, **given: BaseModel) -> Self:
        """Every part from its ``HERMES_*`` variables, read now, once: every part is checked
        here, so a malformed variable stops the program at its start, named, whatever the
        command goes on to use. A part ``given`` (``kafka=`` from ``--bootstrap``) is taken
        as it is, and its variables are not read."""
        _known(given, "Settings.from_environment")
        environ = os.environ
        bus = HermesSettings()
        home = bus.home
        parts: dict[str, Any] = {
            name: given.get(name) or (model(home=home) if name in _HOMED else model())
            for name, model in _PARTS.items()
        }
        keys = KeySettings.from_environ(home, environ)
        return cls(**parts, keys=keys, tool_env=ToolEnvironment.of(environ))

    @classmethod
    def of(cls, home: Path, **parts: BaseModel) -> Self:
        """Settings built in code, with nothing read from the environment: every part not
        given has its defaults, with its files under ``home``; the keyring is
        ``home/keys.json`` and the tools are given no variable (``tool_env``). ``parts``
        by name (``kafka=KafkaConfig(...)``)."""
        _known(parts, "Settings.of")
        home = _state_home(home)
        keys = parts.pop("keys", None) or KeySettings(file=home / "keys.json")
        given: dict[str, Any] = {"keys": keys, "tool_env": parts.pop("tool_env", ToolEnvironment())}
        for name, model in _PARTS.items():
            part = parts.get(name)
            if part is None:  # its defaults, marked as given by nobody (model_fields_set)
                values: dict[str, Any] = {"home": home} if name in _HOMED else {}
                part = model.model_construct(**values)
            given[name] = part
        return cls(**given)

    def with_parts(self, **parts: BaseModel) -> Self:
        """The same settings with some parts replaced (``kafka=...``, ``runtime=...``)."""
        _known(parts, "Settings.with_parts")
        for name, part in parts.items():
            wanted = _GIVEN.get(name) or _PARTS[name]
            if not isinstance(part, wanted):
                raise TypeError(f"Settings.with_parts: {name} must be a {wanted.__name__}")
        return self.model_copy(update=parts)

    def at_home(self, home: Path) -> Self:
        """The same settings with ``home`` as every part's state folder (``--home``); the
        keyring file moves with it unless it was named (``HERMES_KEYS_FILE``)."""
        home = _state_home(home)
        moved: dict[str, Any] = {
            name: getattr(self, name).model_copy(update={"home": home}) for name in _HOMED
        }
        if self.keys.file == self.home / "keys.json":
            moved["keys"] = self.keys.model_copy(update={"file": home / "keys.json"})
        return self.model_copy(update=moved)

    def sandbox(self, home: Path, keys: KeySettings | None = None) -> Self:
        """A redrive's settings, built afresh in ``home``: only what :data:`SANDBOX` says a
        sandbox takes from the bus's settings is taken (the broker, the tuning, the tools'
        environment), every store is a SQLite file in ``home`` and no server is configured.
        ``keys``: whose the sandbox signs and verifies with (default: the bus's keyring,
        read)."""
        fresh = type(self).of(home)
        taken: dict[str, Any] = {"keys": keys or self.keys}
        for name, how in SANDBOX.items():
            if how == "taken":
                taken[name] = getattr(self, name)
            elif how == "moved":  # the bus's part in the sandbox's folder, no path of its own
                part = getattr(self, name)
                update: dict[str, Any] = {"home": fresh.home}
                update |= {"path": None} if name == "memory" else {}
                taken[name] = part.model_copy(update=update)
        # /metrics as the bus serves them (or not), on a port of its own: the bus has it
        taken["metrics"] = self.metrics.model_copy(update={"port": 0})
        return fresh.model_copy(update=taken)  # the rest: the fresh settings' defaults

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # the parts hold URLs that may carry a password: what is printed is where state is
        yield "home", self.home

    def outside(self, home: Path) -> list[str]:
        """What these settings would use outside ``home``: a store's file elsewhere or a
        server (for :meth:`sandbox`'s callers to refuse; empty when all is inside)."""
        files = {
            "session state": self.sqlite.path,
            "memory": self.memory.db_path,
            "tools": self.tool.tools_path,
        }
        found = [
            f"{what} at {path}" for what, path in files.items() if not path.is_relative_to(home)
        ]
        return found + [f"{server} (a server)" for server in self.servers()]

    def servers(self) -> list[str]:
        """The parts that name a server to connect to (a ``url`` set), by the server's name
        (``Redis``, ``Neo4j``, ...): found from the parts, so a new backend is counted
        without being listed here."""
        return [
            _SERVER_NAMES.get(name, name)
            for name in _PARTS
            if "url" in type(getattr(self, name)).model_fields and getattr(self, name).url
        ]


_SERVER_NAMES = {"redis": "Redis", "neo4j": "Neo4j", "elasticsearch": "Elasticsearch"}
"""How a server part is named to a person; a part not here is named by its own name."""


def _known(parts: Mapping[str, object], where: str) -> None:
    unknown = sorted(set(parts) - set(_PARTS) - set(_GIVEN))
    if unknown:
        raise ConfigError(f"{where}: no part named {', '.join(unknown)}")


def _state_home(home: Path) -> Path:
    """``home`` as ``HERMES_HOME`` is taken: absolute, user expanded, not a file."""
    try:
        return TypeAdapter(StateHome).validate_python(home)
    except ValidationError as exc:
        said = str(exc.errors(include_url=False)[0]["msg"])
        raise SettingError(said.removeprefix("Value error, ")) from None
