"""What ``say`` and ``send`` share: the broker to talk to, and a client started on it."""

from __future__ import annotations

from pydantic import ValidationError

from hermesbus.client import Client
from hermesbus.connectors.kafka import KafkaConfig
from hermesbus.errors import BrokerError

__all__ = ["CLIENT_NAME", "connect", "kafka_config", "one_line"]

CLIENT_NAME = "cli"
"""The app instance the shell speaks as: its envelopes come from ``app:cli``."""
_ERRORS_SHOWN = 4
"""A validation's errors named one by one; past these, only counted."""


def kafka_config(bootstrap: str | None) -> KafkaConfig:
    """``HERMES_KAFKA_*`` with ``--bootstrap`` over it; BrokerError saying how to name one."""
    kafka = KafkaConfig()
    if bootstrap:
        kafka = kafka.model_copy(update={"bootstrap": bootstrap})
    if not kafka.bootstrap:
        raise BrokerError(
            "no Kafka broker given: pass --bootstrap HOST:PORT or set HERMES_KAFKA_BOOTSTRAP "
            "(`hermesbus up` prints the address of the bus it starts)"
        )
    return kafka


async def connect(client: Client) -> None:
    """Start ``client``; a broker that cannot be reached is one plain BrokerError."""
    try:
        await client.start()
    except BrokerError as exc:
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        raise BrokerError(
            f"no Kafka broker reachable at {client.config.bootstrap}: is the bus running? "
            f"`hermesbus up` starts one and prints its address ({cause})"
        ) from exc


def one_line(exc: ValidationError) -> str:
    """A pydantic error as one line, ``field.path: message; ...``, for its first few errors."""
    errors = exc.errors()
    said = []
    for error in errors[:_ERRORS_SHOWN]:
        where = ".".join(str(part) for part in error["loc"])
        said.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    more = len(errors) - _ERRORS_SHOWN
    return "; ".join(said) + (f"; and {more} more" if more > 0 else "")
