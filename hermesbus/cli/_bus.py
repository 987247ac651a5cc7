"""What ``say`` and ``send`` share: the broker to talk to, the key to sign with, the topics
to write to checked on the broker, and a client started on it."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from hermesbus.client import Client
from hermesbus.compose.settings import Settings
from hermesbus.connectors.kafka import KafkaAdmin, KafkaConfig
from hermesbus.errors import BrokerError, ConfigError
from hermesbus.identity import ENV_PREFIX, KEYS_FILE_ENV, Keyring
from hermesbus.processors.protocol import IDENTITIES
from hermesbus.topics import apply_command_line

from ._common import kafka_with

__all__ = [
    "BAD_ARGUMENT",
    "CLIENT_NAME",
    "cli_client",
    "connect",
    "kafka_config",
    "missing_topics",
    "one_line",
    "signing_keys",
    "unknown_identity",
]

CLIENT_NAME = "cli"
"""The app instance the shell speaks as: its envelopes come from ``app:cli``."""
BAD_ARGUMENT = 2
"""Exit code of ``say`` and ``send`` for a bad argument or input: nothing was sent."""
_ERRORS_SHOWN = 4
"""A validation's errors named one by one; past these, only counted."""


def kafka_config(settings: Settings, bootstrap: str | None) -> KafkaConfig:
    """``HERMES_KAFKA_*`` with ``--bootstrap`` over it; BrokerError saying how to name one."""
    kafka = kafka_with(settings, bootstrap)
    if not kafka.bootstrap:
        raise BrokerError(
            "no Kafka broker given: pass --bootstrap HOST:PORT or set HERMES_KAFKA_BOOTSTRAP "
            "(`hermesbus up` prints the address of the bus it starts)"
        )
    return kafka


def cli_client(
    settings: Settings, bootstrap: str | None, prefix: str, identity: str, **options: Any
) -> Client:
    """The client ``say`` and ``send`` speak through: ``app:cli`` on ``--bootstrap`` (else
    the settings' broker), signing as ``identity`` with the bus's key for it."""
    return Client(
        kafka_config(settings, bootstrap),
        settings=settings,
        name=CLIENT_NAME,
        topic_prefix=prefix,
        identity=identity,
        keys=signing_keys(settings, identity),
        **options,
    )


def unknown_identity(identity: str) -> str | None:
    """Why ``identity`` is no identity of the bus, or None if it is one."""
    if identity in IDENTITIES:
        return None
    return f"unknown identity {identity!r}: the bus's identities are {', '.join(IDENTITIES)}"


def signing_keys(settings: Settings, identity: str) -> Keyring:
    """The keyring, which holds a key for ``identity``; else ConfigError saying which key.

    Any new key signs, but only the one the bus holds is accepted: a key made for the
    occasion (``hermesbus keys init`` in another HERMES_HOME) gets the records refused.
    """
    keys = settings.keys.load()
    if keys.has(identity):
        return keys
    variable = ENV_PREFIX + identity.upper().replace("-", "_")
    raise ConfigError(
        f"no signing key for identity {identity!r} in {keys.source}; it must be the key the "
        "bus verifies with, or the bus refuses what is sent. For a bus `hermesbus up` started "
        "on the embedded broker, use the same HERMES_HOME (its keys.json; `up` prints it as "
        f"`signing keys: PATH`) or set {KEYS_FILE_ENV} to that file; for another cluster, the "
        f"keyring file its processes share (or {variable}). `hermesbus keys init` makes new "
        "keys: only for a new cluster whose processes will all share that file"
    )


async def missing_topics(kafka: KafkaConfig, topics: Collection[str]) -> list[str]:
    """Those of ``topics`` the cluster lacks, asked of the admin client.

    Its metadata request lists the cluster's topics, so it never makes the broker create
    one (a producer's or consumer's request for a missing topic may, with the wrong
    partition count).
    """
    async with KafkaAdmin(kafka) as admin:
        existing = await admin.describe(sorted(topics))
    return sorted(set(topics) - set(existing))


async def connect(client: Client, topics: Collection[str]) -> None:
    """Start ``client`` once every one of ``topics`` exists; else BrokerError naming them.

    A broker that cannot be reached is one BrokerError saying what to check.
    """
    missing = await missing_topics(client.config, topics)
    if missing:
        raise BrokerError(_missing(missing, client.config.bootstrap, client.topic_prefix))
    await client.start()


def _missing(missing: list[str], bootstrap: str | None, prefix: str) -> str:
    """Which topics are missing, that nothing was sent, and the two usual causes."""
    return (
        f"{_topics(missing)} on {bootstrap} (prefix {prefix!r}); nothing was sent. "
        "Another prefix? pass the bus's --prefix (or HERMES_TOPIC_PREFIX); a new broker? "
        f"`{apply_command_line(bootstrap, prefix)}` creates the topics"
    )


def _topics(names: list[str]) -> str:
    if len(names) == 1:
        return f"topic {names[0]} does not exist"
    return f"topics {', '.join(names)} do not exist"


def one_line(exc: ValidationError) -> str:
    """A pydantic error as one line, ``field.path: message; ...``, for its first few errors."""
    errors = exc.errors()
    said = []
    for error in errors[:_ERRORS_SHOWN]:
        where = ".".join(str(part) for part in error["loc"])
        said.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    more = len(errors) - _ERRORS_SHOWN
    return "; ".join(said) + (f"; and {more} more" if more > 0 else "")
