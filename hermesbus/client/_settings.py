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

__all__ = ["ClientSettings", "from_environment", "invalid", "kafka_from_environment"]


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


def from_environment(kafka: KafkaConfig | None = None) -> ClientSettings:
    """The ``HERMES_*`` variables of this process, read now: an app's program start
    (``kafka``: the Kafka part, when the client was given it, not read again)."""
    if kafka is None:
        kafka = kafka_from_environment({})
    try:
        bus = HermesSettings()
    except ValidationError as exc:
        raise invalid("settings", exc) from exc
    return _Read(kafka, bus, KeySettings.from_environ(bus.home, os.environ))


def kafka_from_environment(given: dict[str, object]) -> KafkaConfig:
    """``HERMES_KAFKA_*`` under the fields ``given`` in code (``Client(bootstrap=...)``):
    those are not read from the environment, so a given bootstrap mends a bad variable."""
    try:
        return KafkaConfig(**given)
    except ValidationError as exc:
        raise invalid("Kafka settings", exc) from exc


def invalid(what: str, exc: ValidationError) -> ConfigError:
    """``invalid WHAT: field: why; ...``, without pydantic's decoration."""
    said = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {str(e['msg']).removeprefix('Value error, ')}"
        for e in exc.errors(include_url=False)
    )
    return ConfigError(f"invalid {what}: {said}")
