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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, SecretStr

from hermesbus.base.config import HermesSettings
from hermesbus.connectors.elasticsearch import ElasticsearchConfig
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.connectors.neo4j import Neo4jConfig
from hermesbus.connectors.redis import RedisConfig
from hermesbus.connectors.sqlite import SqliteConfig
from hermesbus.errors import ConfigError
from hermesbus.identity import ENV_PREFIX, KEYS_FILE_ENV, PUBLIC_KEYS_FILE_ENV, KeySettings
from hermesbus.processors.conversation import ConversationSettings
from hermesbus.processors.memory import MemorySettings
from hermesbus.processors.tool import ToolSettings
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
}
"""Every part of :class:`Settings` but the keys, with the model that reads it."""
_HOMED = ("bus", "sqlite", "tool", "memory")
"""The parts that keep files under the state folder: given the one ``home``."""


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
    keys: KeySettings

    @property
    def home(self) -> Path:
        """The state folder every part keeps its files under."""
        return self.bus.home

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Self:
        """Every part from its ``HERMES_*`` variables (``environ``: the process's), read now.

        The variables are read from the process environment by each part's model, so
        ``environ`` other than ``os.environ`` only decides the keys' variables; tests that
        need other values set them in the environment first."""
        environ = os.environ if environ is None else environ
        bus = HermesSettings()
        home = bus.home
        parts: dict[str, Any] = {
            name: (model(home=home) if name in _HOMED else model())
            for name, model in _PARTS.items()
        }
        named, public = environ.get(KEYS_FILE_ENV), environ.get(PUBLIC_KEYS_FILE_ENV)
        keys = KeySettings(
            file=Path(named) if named else home / "keys.json",
            public_file=Path(public) if public else None,
            given={k: SecretStr(v) for k, v in environ.items() if k.startswith(ENV_PREFIX) and v},
        )
        return cls(**parts, keys=keys)

    @classmethod
    def of(cls, home: Path, **parts: BaseModel) -> Self:
        """Settings built in code, with nothing read from the environment: every part not
        given has its defaults, with its files under ``home``; the keyring is
        ``home/keys.json``. ``parts`` by name (``kafka=KafkaConfig(...)``)."""
        unknown = sorted(set(parts) - set(_PARTS) - {"keys"})
        if unknown:
            raise ConfigError(f"Settings.of: no part named {', '.join(unknown)}")
        given: dict[str, Any] = {
            "keys": parts.pop("keys", None) or KeySettings(file=home / "keys.json")
        }
        for name, model in _PARTS.items():
            values: dict[str, Any] = {"home": home} if name in _HOMED else {}
            part = parts.get(name)
            given[name] = (
                part
                if part is not None
                else model.model_construct(**{**_defaults(model), **values})
            )
        return cls(**given)

    def with_parts(self, **parts: BaseModel) -> Self:
        """The same settings with some parts replaced (``kafka=...``, ``runtime=...``)."""
        unknown = sorted(set(parts) - set(_PARTS) - {"keys"})
        if unknown:
            raise ConfigError(f"Settings.with_parts: no part named {', '.join(unknown)}")
        return self.model_copy(update=parts)

    def at_home(self, home: Path) -> Self:
        """The same settings with ``home`` as every part's state folder (``--home``); the
        keyring file moves with it unless it was named (``HERMES_KEYS_FILE``)."""
        home = home.expanduser().absolute()
        moved: dict[str, Any] = {
            name: getattr(self, name).model_copy(update={"home": home}) for name in _HOMED
        }
        if self.keys.file == self.home / "keys.json":
            moved["keys"] = self.keys.model_copy(update={"file": home / "keys.json"})
        return self.model_copy(update=moved)

    def sandbox(self, home: Path) -> Self:
        """A redrive's settings: every store a SQLite file under ``home`` (state, memory,
        tools), no server (Redis, Neo4j, Elasticsearch are not configured), the same
        broker and keys (the bus's keyring, read: the sandbox's processors sign as the
        bus's components, so its records verify with the keys the apps have)."""
        moved = self.at_home(home).model_copy(update={"keys": self.keys})
        return moved.model_copy(
            update={
                "memory": moved.memory.model_copy(update={"path": None}),
                "redis": self.redis.model_copy(update={"url": None}),
                "neo4j": self.neo4j.model_copy(update={"url": None}),
                "elasticsearch": self.elasticsearch.model_copy(update={"url": None}),
            }
        )

    def outside(self, home: Path) -> list[str]:
        """What these settings would use outside ``home``: a store's file elsewhere or a
        server (for :meth:`sandbox`'s callers to refuse; empty when all is inside)."""
        files = {
            "session state": self.sqlite.path,
            "memory": self.memory.db_path,
            "tools": self.tool.tools_path,
        }
        servers = {
            "Redis": self.redis.url is not None,
            "Neo4j": bool(self.neo4j.url),
            "Elasticsearch": bool(self.elasticsearch.url),
        }
        found = [
            f"{what} at {path}" for what, path in files.items() if not path.is_relative_to(home)
        ]
        return found + [f"{what} (a server)" for what, on in servers.items() if on]


def _defaults(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s field defaults, without reading anything (for :meth:`Settings.of`)."""
    found: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.default_factory is not None:
            found[name] = field.default_factory()  # type: ignore[call-arg]
        elif not field.is_required():
            found[name] = field.default
    return found
