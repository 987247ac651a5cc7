"""What a client is configured by: the broker, the bus's settings and the keys.

A program that composes a bus hands its :class:`~hermesbus.compose.settings.Settings` to
``Client(settings=...)``: it has these three parts. An app that gives none starts its
program where it makes its first client: :func:`from_environment` reads the ``HERMES_*``
variables there, once per client, the one place below the composition layer that does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from pydantic import ValidationError

from hermesbus.base.config import HermesSettings
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.errors import ConfigError
from hermesbus.identity import KeySettings

__all__ = ["ClientSettings", "from_environment", "invalid"]


class ClientSettings(Protocol):
    """The parts of a program's settings a client uses."""

    @property
    def kafka(self) -> KafkaConfig:
        """The broker and how to reach it."""
        ...

    @property
    def bus(self) -> HermesSettings:
        """The topic prefix and the schema registry."""
        ...

    @property
    def keys(self) -> KeySettings:
        """The keyring the client signs with and the public keys it checks replies with."""
        ...


@dataclass(frozen=True, slots=True)
class _Read:
    kafka: KafkaConfig
    bus: HermesSettings
    keys: KeySettings


def from_environment() -> ClientSettings:
    """The ``HERMES_*`` variables of this process, read now: an app's program start."""
    try:
        kafka = KafkaConfig()
    except ValidationError as exc:
        raise invalid("Kafka settings", exc) from exc
    try:
        bus = HermesSettings()
    except ValidationError as exc:
        raise invalid("settings", exc) from exc
    return _Read(kafka, bus, KeySettings.from_environ(bus.home, os.environ))


def invalid(what: str, exc: ValidationError) -> ConfigError:
    """``invalid WHAT: field: why; ...``, without pydantic's decoration."""
    said = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}"
        for e in exc.errors(include_url=False)
    )
    return ConfigError(f"invalid {what}: {said}")
