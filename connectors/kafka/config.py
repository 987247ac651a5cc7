"""Kafka connection settings from ``HERMES_KAFKA_*`` (bootstrap, SASL, TLS)."""

from __future__ import annotations

from typing import Any, Literal

from aiokafka.helpers import create_ssl_context
from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from hermesbus.errors import ConfigError

__all__ = ["KafkaConfig"]


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

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by aiokafka's producer, consumer and admin client."""
        if not self.bootstrap:
            raise ConfigError("no Kafka bootstrap: set HERMES_KAFKA_BOOTSTRAP or pass --bootstrap")
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
            "request_timeout_ms": self.request_timeout_ms,
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
