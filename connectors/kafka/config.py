"""Kafka connection settings from ``HERMES_KAFKA_*`` (bootstrap, SASL, TLS)."""

from __future__ import annotations

from typing import Any, Literal

from aiokafka.helpers import create_ssl_context
from pydantic import PrivateAttr, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.errors import ConfigError

__all__ = ["BOOTSTRAP_ENV", "KafkaConfig", "check_bootstrap"]

BOOTSTRAP_ENV = "HERMES_KAFKA_BOOTSTRAP"
_MAX_PORT = 65_535
_FORM = "use HOST:PORT, several separated by commas (e.g. 127.0.0.1:9092)"


def check_bootstrap(value: str) -> str:
    """``value`` without blanks around its entries, if each is ``HOST:PORT`` with a port
    in 1..65535; else ValueError saying which entry is wrong and the form to use."""
    entries = [entry.strip() for entry in value.split(",")]
    for entry in entries:
        host, colon, port = entry.rpartition(":")
        where = f" (in {entry!r})" if len(entries) > 1 else ""
        if not entry or not colon or not host.strip("[]"):
            raise ValueError(f"{entry!r} is not HOST:PORT; {_FORM}")
        if not port.isdigit() or not 1 <= int(port) <= _MAX_PORT:
            raise ValueError(f"port {port!r}{where} is not a number in 1..65535; {_FORM}")
    return ",".join(entries)


class KafkaConfig(BaseSettings):
    """Where the cluster is and how to authenticate; the password is never printed."""

    model_config = SettingsConfigDict(env_prefix="HERMES_KAFKA_", frozen=True, extra="ignore")

    bootstrap: str | None = None
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    request_timeout_ms: int = 30_000
    metadata_max_age_ms: int = 10_000
    """How often a client asks for the cluster's metadata unprompted: how soon a consumer
    sees a topic that was gone made again (a broker back empty; aiokafka's 5 min default
    left the processors on no partitions that long)."""
    _origin: str | None = PrivateAttr(default=None)

    def __init__(self, **values: Any) -> None:
        super().__init__(**values)
        if "bootstrap" not in values and self.bootstrap:
            self._origin = BOOTSTRAP_ENV

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        return check_bootstrap(value) if value else value

    def given_by(self, origin: str) -> KafkaConfig:
        """The same settings, their bootstrap named as given by ``origin`` (``--bootstrap``)."""
        copy = self.model_copy()
        copy._origin = origin
        return copy

    @property
    def origin(self) -> str | None:
        """Where the bootstrap came from: ``HERMES_KAFKA_BOOTSTRAP``, what ``given_by`` said,
        or None (given in code)."""
        return self._origin

    @property
    def address(self) -> str:
        """The bootstrap for messages, with where it came from: ``127.0.0.1:9092 (from
        HERMES_KAFKA_BOOTSTRAP; unset it and `hermesbus up` starts the embedded broker)``."""
        if self._origin == BOOTSTRAP_ENV:
            return (
                f"{self.bootstrap} (from {BOOTSTRAP_ENV}; unset it and `hermesbus up` starts "
                "the embedded broker)"
            )
        return f"{self.bootstrap} (from {self._origin})" if self._origin else str(self.bootstrap)

    @property
    def principal(self) -> str:
        """Who the cluster takes the client for: ``User:<SASL user>``, the TLS client, or
        ``User:ANONYMOUS`` (no authentication)."""
        if self.security_protocol.startswith("SASL") and self.sasl_username:
            return f"User:{self.sasl_username}"
        if self.security_protocol == "SSL" and self.ssl_certfile:
            return f"the TLS client of {self.ssl_certfile}"
        return "User:ANONYMOUS"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by aiokafka's producer, consumer and admin client."""
        if not self.bootstrap:
            raise ConfigError(f"no Kafka bootstrap: set {BOOTSTRAP_ENV} or pass --bootstrap")
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
            "metadata_max_age_ms": self.metadata_max_age_ms,
        }
        if self.security_protocol.startswith("SASL"):
            if not (self.sasl_mechanism and self.sasl_username and self.sasl_password):
                raise ConfigError(
                    f"security protocol {self.security_protocol} needs HERMES_KAFKA_SASL_MECHANISM,"
                    " HERMES_KAFKA_SASL_USERNAME and HERMES_KAFKA_SASL_PASSWORD"
                )
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password.get_secret_value()
        if self.security_protocol.endswith("SSL"):
            kwargs["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
            )
        return kwargs
